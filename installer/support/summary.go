package support

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/installer/snapshot"
)

// Summary is summary.txt: what an engineer reads first.
func Summary(s *snapshot.Snapshot, rep *doctor.Report) string {
	var b strings.Builder
	m := s.Meta
	fmt.Fprintf(&b, "onprem support bundle\n=====================\n\n")
	fmt.Fprintf(&b, "collected   %s by onprem %s\n", m.CollectedAt.UTC().Format(time.RFC3339), m.Onprem)
	fmt.Fprintf(&b, "cluster     %s (Kubernetes %s)\n", m.Server, m.ServerVersion)
	fmt.Fprintf(&b, "namespaces  %s (platform: %s)\n", strings.Join(m.Namespaces, ", "), m.Namespace)
	if st := s.State; st != nil {
		fmt.Fprintf(&b, "platform    installation %s, version %s\n", st.Installation, st.Version)
		if n := len(st.History); n > 0 {
			op := st.History[n-1]
			fmt.Fprintf(&b, "last op     %s %s: %s at %s\n", op.Kind, op.Version, op.Outcome, op.Started.UTC().Format(time.RFC3339))
		}
	} else {
		fmt.Fprintf(&b, "platform    no state record in namespace %s\n", m.Namespace)
	}

	fmt.Fprintf(&b, "\nFindings: %d error(s), %d warning(s)\n", rep.Count(doctor.Error), rep.Count(doctor.Warning))
	if len(rep.Findings) == 0 {
		fmt.Fprintf(&b, "  none: every analyzer (%s) found nothing wrong\n", strings.Join(rep.Analyzers, ", "))
	}
	for _, f := range rep.Findings {
		WriteFinding(&b, f)
	}

	if st := s.State; st != nil && len(st.Components) > 0 {
		fmt.Fprintf(&b, "\nComponents\n")
		tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  COMPONENT\tCHART\tREVISION\tHELM\tRECORDED")
		names := make([]string, 0, len(st.Components))
		for n := range st.Components {
			names = append(names, n)
		}
		sort.Strings(names)
		helm := map[string]string{}
		for _, r := range s.Releases {
			if l := r.Last(); l != nil && r.Namespace == m.Namespace {
				helm[r.Name] = l.Status
			}
		}
		for _, n := range names {
			c := st.Components[n]
			fmt.Fprintf(tw, "  %s\t%s-%s\t%d\t%s\t%s\n", n, c.Chart, c.ChartVersion, c.Revision, helm[c.Release], firstLine(c.Status))
		}
		tw.Flush()
	}

	fmt.Fprintf(&b, "\nCollectors\n")
	for _, c := range m.Collectors {
		fmt.Fprintf(&b, "  %-12s %5d item(s) in %s\n", c.Name, c.Items, c.Duration)
		for _, sk := range c.Skipped {
			fmt.Fprintf(&b, "    not collected: %s\n", sk)
		}
	}
	if m.Limits.Lines > 0 {
		fmt.Fprintf(&b, "\nLogs: the last %d lines of each container, at most %s old and %d KiB (logs/index.json lists them)\n", m.Limits.Lines, m.Limits.Age, m.Limits.Bytes>>10)
	}
	fmt.Fprintf(&b, "\nEvery secret value of the collected namespaces, and anything shaped like a secret, is replaced by <redacted>; Secrets are listed by name and keys only. index.json describes every file.\n")
	return b.String()
}

// WriteFinding writes one finding for humans.
func WriteFinding(b interface{ WriteString(string) (int, error) }, f doctor.Finding) {
	b.WriteString(fmt.Sprintf("\n  [%s] %s: %s\n", strings.ToUpper(string(f.Severity)), f.Analyzer, f.Title))
	if f.Object != "" {
		b.WriteString("    object: " + f.Object + "\n")
	}
	if f.Definitive {
		b.WriteString("    it will not resolve by itself: waiting longer does not help\n")
	}
	for _, e := range f.Evidence {
		if e != "" {
			b.WriteString("    - " + e + "\n")
		}
	}
	if f.Remediation != "" {
		b.WriteString("    fix: " + f.Remediation + "\n")
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 80 {
		s = s[:80] + "..."
	}
	return s
}
