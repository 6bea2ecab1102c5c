package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/output"
	"onprem.dev/onprem/preflight"
)

func newPreflightCmd() *cobra.Command {
	a := &action.Preflight{}
	var format string
	var list bool
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Run every check that can fail an install, before anything is touched",
		Long: `Check the cluster and everything the installation needs before anything is
changed: Kubernetes version, permissions, capacity, storage, ingress and the
domain's certificate, the private registry and its images, external
databases (a real handshake with the given credentials), an existing
installation's upgrade path, conflicting objects, GitOps runtimes, Pod
Security Admission and clock skew.

Every check prints its result (pass, warn, fail) with what to do about it.
'onprem install' runs the same checks first and stops on a failure;
--skip-check ID skips one (and the install records that it was skipped).

Exit code 0 when nothing fails (warnings allowed), 1 when a check fails.`,
		Example: `  onprem preflight -c onprem.yaml
  onprem preflight --list
  onprem preflight -c onprem.yaml -o json --skip-check clock.skew`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			if list {
				checks := a.Checks()
				if format != output.Table {
					type row struct{ ID, Title, Severity string }
					var rows []row
					for _, c := range checks {
						rows = append(rows, row{c.ID, c.Title, string(c.Severity)})
					}
					return output.Encode(cmd.OutOrStdout(), format, rows)
				}
				tw := output.NewTable(cmd.OutOrStdout())
				fmt.Fprintln(tw, "ID\tSEVERITY\tCHECKS THAT")
				for _, c := range checks {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", c.ID, c.Severity, c.Title)
				}
				return tw.Flush()
			}
			rep, err := a.Run(cmd.Context())
			if rep != nil {
				if werr := output.Write(cmd.OutOrStdout(), format, rep, func(w io.Writer) { printPreflight(w, rep) }); werr != nil {
					return werr
				}
			}
			return err
		},
	}
	addSourceFlags(cmd, &a.Source)
	addBundleFlags(cmd, &a.Source)
	addClusterFlags(cmd, &a.Cluster)
	cmd.Flags().StringArrayVar(&a.Set, "set", nil, "override a value: COMPONENT.key=value (repeatable)")
	cmd.Flags().StringArrayVar(&a.Skip, "skip-check", nil, "do not run this check (repeatable; see --list)")
	cmd.Flags().BoolVar(&list, "list", false, "list the checks and what each one checks")
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}

// printPreflight prints the report for people: one line per check, and
// for each that does not pass, its details and what to do.
func printPreflight(w io.Writer, rep *preflight.Report) {
	writeTable(w, "CHECK\tRESULT\tMESSAGE", rep.Findings, func(f preflight.Finding) string {
		return fmt.Sprintf("%s\t%s\t%s", f.ID, strings.ToUpper(string(f.Result)), f.Message)
	})
	for _, f := range rep.Findings {
		if f.Result != preflight.Warn && f.Result != preflight.Fail {
			continue
		}
		fmt.Fprintf(w, "\n%s (%s):\n", f.ID, f.Result)
		for _, d := range f.Details {
			fmt.Fprintf(w, "  - %s\n", d)
		}
		if f.Remediation != "" {
			fmt.Fprintf(w, "  fix: %s\n", f.Remediation)
		}
	}
}
