package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/installer/output"
	snap "onprem.dev/onprem/installer/snapshot"
	"onprem.dev/onprem/installer/support"
)

// collectProgress prints a line per collector on stderr.
func collectProgress(w io.Writer) func(snap.CollectorResult) {
	return func(r snap.CollectorResult) {
		fmt.Fprintf(w, "collected %-12s %5d item(s) in %s\n", r.Name, r.Items, r.Duration)
		for i, s := range r.Skipped {
			if i == 3 {
				fmt.Fprintf(w, "  ... and %d more (summary.txt lists them)\n", len(r.Skipped)-3)
				break
			}
			fmt.Fprintf(w, "  not collected: %s\n", s)
		}
	}
}

func addCollectFlags(cmd *cobra.Command, a *action.Collect) {
	addClusterFlags(cmd, &a.Cluster)
	addTargetFlags(cmd, &a.Target)
	cmd.Flags().StringArrayVar(&a.Bundles, "bundle", nil, "air-gapped bundle of the installed version, for the preflight checks when onprem does not embed it (repeatable)")
	addTrustFlags(cmd, &a.PublicKeys, &a.AllowUnsigned)
	cmd.Flags().IntVar(&a.Concurrency, "concurrency", snap.DefaultConcurrency, "collectors and log reads run at once")
	cmd.Flags().DurationVar(&a.Timeout, "collector-timeout", snap.DefaultTimeout, "time limit of each collector (one that runs out keeps what it had)")
	cmd.Flags().BoolVar(&a.NoPreflight, "no-preflight", false, "do not run the preflight checks")
}

func newSupportBundleCmd() *cobra.Command {
	a := &action.SupportBundle{}
	var format string
	cmd := &cobra.Command{
		Use:   "support-bundle [-o FILE]",
		Short: "Write one .tar.gz with everything support needs, with every secret redacted",
		Long: `Collect everything needed to understand a broken installation into one
.tar.gz that is safe to send:

  - onprem's version, the effective configuration, the state record and its
    history, every Helm release of the platform with its history (values
    redacted);
  - every object of the platform's namespace and of the runners' and
    runtimes' namespaces on this cluster (Secrets as names and keys only),
    events, container logs (current and previous, bounded by --log-lines,
    --log-age and --log-bytes), nodes with their conditions, capacity and
    allocations, StorageClasses, PersistentVolumes, IngressClasses, the lock,
    and the cluster's DNS pods (k8s-app=kube-dns in kube-system) with their
    logs;
  - the preflight checks run now, each service's readiness answer (does it
    reach its databases), the runners, runtimes, Git sources and managed
    clusters with their health (never a token);
  - the analyzers' findings (as 'onprem doctor'), summary.txt for humans and
    index.json describing every file.

Every value of every Secret in those namespaces, and anything shaped like a
secret (private keys, bearer tokens, password=/token= pairs, user:password@
in URLs) is replaced by <redacted> before it is written.

A collector that cannot read something (no permission, a time limit, a pod
whose logs are gone) does not fail the bundle: summary.txt lists what was
not collected and why. The file is written as FILE.partial and renamed when
complete.

'onprem support-bundle analyze FILE' runs the analyzers on a bundle offline.

Exit code 0 when written (whatever it found), 3 when the cluster cannot be
reached.`,
		Example: `  onprem support-bundle
  onprem support-bundle -o /tmp/ci-platform.tar.gz --namespace ci-platform
  onprem support-bundle --log-lines 1000 --log-age 72h
  onprem support-bundle analyze onprem-support-20261125-101500.tar.gz`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			a.Progress = collectProgress(cmd.ErrOrStderr())
			res, rep, err := a.Run(cmd.Context())
			if err != nil {
				return err
			}
			return output.Write(cmd.OutOrStdout(), format, res, func(w io.Writer) {
				fmt.Fprintf(w, "support bundle %s: %d files, %d KiB; %d error(s), %d warning(s) found\n", res.Path, res.Files, res.Size>>10, rep.Count(doctor.Error), rep.Count(doctor.Warning))
				if len(res.Skipped) > 0 {
					fmt.Fprintf(w, "not collected (%d, listed in summary.txt)\n", len(res.Skipped))
				}
			})
		},
	}
	addCollectFlags(cmd, &a.Collect)
	cmd.Flags().StringVar(&a.Output, "file", "", "bundle file to write (default onprem-support-TIME.tar.gz here)")
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml; or, for a file path, use --file")
	cmd.Flags().Int64Var(&a.Logs.Lines, "log-lines", snap.DefaultLogLines, "last lines of each container's log")
	cmd.Flags().DurationVar(&a.Logs.Age, "log-age", snap.DefaultLogAge, "oldest log line kept")
	cmd.Flags().Int64Var(&a.Logs.Bytes, "log-bytes", snap.DefaultLogBytes, "largest log kept per container")
	// -o FILE, as the issue and most tools spell it: a value that is not
	// an output format is the bundle's file.
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if format != output.Table && format != output.JSON && format != output.YAML {
			if a.Output != "" {
				return inputError{fmt.Errorf("-o %q and --file %q: give the bundle's file once", format, a.Output)}
			}
			a.Output, format = format, output.Table
		}
		return nil
	}
	cmd.AddCommand(newSupportAnalyzeCmd())
	return cmd
}

// printReport prints an analysis for humans.
func printReport(w io.Writer, rep *doctor.Report) {
	if len(rep.Findings) == 0 {
		fmt.Fprintf(w, "no problem found (%d analyzers: %s)\n", len(rep.Analyzers), strings.Join(rep.Analyzers, ", "))
		return
	}
	fmt.Fprintf(w, "%d error(s), %d warning(s), %d note(s)\n", rep.Count(doctor.Error), rep.Count(doctor.Warning), rep.Count(doctor.Info))
	var b strings.Builder
	for _, f := range rep.Findings {
		support.WriteFinding(&b, f)
	}
	fmt.Fprint(w, b.String())
}

func newSupportAnalyzeCmd() *cobra.Command {
	a := &action.SupportAnalyze{}
	var format string
	cmd := &cobra.Command{
		Use:   "analyze FILE",
		Short: "Run the analyzers on a support bundle, offline",
		Long: `Read a support bundle ('onprem support-bundle') and run the same analyzers
as 'onprem doctor' on what it holds: no cluster is needed.

Exit code 0 when no error-level finding exists, 1 when one does, 2 when the
file is not a support bundle.`,
		Example: `  onprem support-bundle analyze onprem-support-20261125-101500.tar.gz
  onprem support-bundle analyze bundle.tar.gz -o json`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return inputError{fmt.Errorf("name one support bundle file: onprem support-bundle analyze FILE (got %d arguments)", len(args))}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			a.File = args[0]
			rep, err := a.Run(cmd.Context())
			return writeAnyway(cmd, format, rep, err, func(w io.Writer) { printReport(w, rep) })
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}

func newDoctorCmd() *cobra.Command {
	a := &action.Doctor{}
	var format string
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Find what is wrong with the installed platform, and say how to fix it",
		Long: `Look at the installed platform and name what is wrong, each finding with its
evidence (an object, an event, a log line) and its fix. The analyzers:

` + analyzerList() + `
Doctor reads the cluster only (the logs of pods that are not well only) and
changes nothing. 'onprem support-bundle' writes the same findings with
everything else into a file for support; 'onprem support-bundle analyze'
runs them on such a file.

Exit code 0 when no error-level finding exists, 1 when one does, 3 when the
cluster cannot be reached.`,
		Example: `  onprem doctor
  onprem doctor --namespace ci-platform -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			if format == output.Table {
				a.Progress = collectProgress(cmd.ErrOrStderr())
			}
			rep, err := a.Run(cmd.Context())
			return writeAnyway(cmd, format, rep, err, func(w io.Writer) { printReport(w, rep) })
		},
	}
	addCollectFlags(cmd, &a.Collect)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}

func analyzerList() string {
	var b strings.Builder
	for _, an := range doctor.All() {
		fmt.Fprintf(&b, "  %-22s %s\n", an.ID, an.Description)
	}
	return b.String()
}
