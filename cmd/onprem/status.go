package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/installer/output"
	"onprem.dev/onprem/installer/state"
)

// printBackupStatus says when the platform was last backed up, and why the
// newest scheduled backup failed.
func printBackupStatus(w io.Writer, b *action.BackupStatus) {
	if b == nil {
		fmt.Fprintln(w, "backups: none recorded and none scheduled (see 'onprem backup --help' and spec.backup)")
		return
	}
	if b.Schedule != "" {
		tz := ""
		if b.TimeZone != "" {
			tz = " (" + b.TimeZone + ")"
		}
		fmt.Fprintf(w, "backups: scheduled %q%s", b.Schedule, tz)
		if b.LastSuccessful != nil {
			fmt.Fprintf(w, ", last success %s", b.LastSuccessful.Format(timeFormat))
		}
		if b.Running {
			fmt.Fprint(w, ", one running now")
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "backups: none scheduled (spec.backup.schedule)")
	}
	if op := b.Last; op != nil {
		what := ""
		if bk := op.Backup; bk != nil {
			what = fmt.Sprintf(" %s at %s (%s)", bk.Name, bk.Where, bk.Trigger)
		}
		fmt.Fprintf(w, "  last backup:%s %s at %s\n", what, op.Outcome, op.Started.Format(timeFormat))
		if op.Outcome == state.OutcomeFailed && op.Message != "" {
			fmt.Fprintf(w, "    %s\n", op.Message)
		}
	}
	if b.Failed != "" {
		fmt.Fprintf(w, "  the newest scheduled backup FAILED: %s\n", b.Failed)
	}
}

const timeFormat = "2006-01-02 15:04:05 MST"

// printDrift names each component's live objects that differ from its
// release, and says how to revert them.
func printDrift(w io.Writer, cs []action.ComponentStatus) {
	n := 0
	for _, c := range cs {
		for _, d := range c.Drift {
			fmt.Fprintf(w, "%s drifted: %s\n", c.Name, d)
			n++
		}
		if c.DriftError != "" {
			fmt.Fprintf(w, "%s: could not compare with its live objects: %s\n", c.Name, c.DriftError)
		}
	}
	if n > 0 {
		fmt.Fprintln(w, "  'onprem install -c onprem.yaml' reverts these; 'onprem diff -c onprem.yaml' shows the values")
	}
}

// printCertificates lists the platform's certificates with their expiry.
func printCertificates(w io.Writer, cs []action.CertificateStatus) {
	if len(cs) == 0 {
		return
	}
	fmt.Fprintln(w, "certificates:")
	for _, c := range cs {
		fmt.Fprintf(w, "  %s\n", certificateLine(c.Certificate, c.Level, c.DaysLeft))
	}
}

// certificateLine is one certificate with its expiry, marked when it is
// near (installer/certs judges it).
func certificateLine(c certs.Certificate, level certs.Level, daysLeft int) string {
	kind := "certificate"
	if c.IsCA {
		kind = "CA"
	}
	when := fmt.Sprintf("expires %s, in %d days", c.NotAfter.Format(time.DateOnly), daysLeft)
	if daysLeft < 0 || !c.NotAfter.After(time.Now()) {
		when = fmt.Sprintf("EXPIRED on %s", c.NotAfter.Format(time.DateOnly))
	}
	mark := ""
	switch level {
	case certs.Warning:
		mark = "WARNING: "
	case certs.Error:
		mark = "ERROR: "
	}
	return fmt.Sprintf("%s%s %s (Secret %s, %s): %s", mark, kind, c.Subject, c.Secret, c.Key, when)
}

func newStatusCmd() *cobra.Command {
	a := &action.Status{}
	var format string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what is installed: version, components, readiness, last operation",
		Long: `Show the installation recorded in the cluster: the platform version, each
component's Helm release and revision, its ready and desired replicas, the
last error, its drift (live objects that differ from what onprem applied in
a field onprem sets, e.g. "gitops-ui drifted: Deployment/gitops-ui image",
which 'onprem install' reverts), the last operation (who ran what, when, and how it ended), the
backups: their schedule (spec.backup), the newest backup, and why the
newest scheduled one failed if it did; and the platform's certificates
(the CA and the serving certificate, onprem's or spec.tls.secretName's)
with their expiry: WARNING within 30 days, ERROR within 7 or once expired;
and, with spec.availability high, each replicated database's primary, its
replicas with their lag, which one is synchronous, and a warning when no
synchronous replica is ready (losing the primary then would stop writes or
lose them).
Reads the cluster only; works from any machine with access.`,
		Example: `  onprem status
  onprem status --namespace ci-platform -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAndWrite(cmd, format, a.Run, func(w io.Writer, res *action.StatusResult) {
				if !res.Installed {
					fmt.Fprintf(w, "nothing installed in namespace %s\n", res.Namespace)
					return
				}
				fmt.Fprintf(w, "installation %s: platform %s in namespace %s\n", res.Installation, res.Version, res.Namespace)
				writeTable(w, "COMPONENT\tCHART\tREVISION\tRELEASE\tREADY\tLAST ERROR", res.Components, func(c action.ComponentStatus) string {
					return fmt.Sprintf("%s\t%s\t%d\t%s\t%d/%d\t%s", c.Name, c.Chart, c.Revision, c.Release, c.Ready, c.Desired, c.LastError)
				})
				printDrift(w, res.Components)
				if op := res.LastOperation; op != nil {
					fmt.Fprintf(w, "last operation: %s %s by onprem %s on %s, %s at %s\n", op.Kind, op.Version, op.Installer, op.Host, op.Outcome, op.Started.Format("2006-01-02 15:04:05 MST"))
					if op.Message != "" && op.Outcome != state.OutcomeSucceeded {
						fmt.Fprintf(w, "  %s\n", op.Message)
					}
				}
				if lk := res.Lock; lk != nil {
					held := "held"
					if lk.Expired {
						held = "left behind (its holder stopped renewing it; the next onprem takes it over)"
					}
					fmt.Fprintf(w, "lock: %s by %s since %s, expires %s\n", held, lk.Holder, lk.Since.Format(timeFormat), lk.Expires.Format(timeFormat))
				}
				printBackupStatus(w, res.Backups)
				printCertificates(w, res.Certificates)
				for _, db := range res.Databases {
					fmt.Fprintf(w, "%s: %s\n", db.Engine, db.Summary())
				}
			})
		},
	}
	addClusterFlags(cmd, &a.Cluster)
	addTargetFlags(cmd, &a.Target)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}
