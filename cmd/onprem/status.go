package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/output"
	"onprem.dev/onprem/installer/state"
)

func newStatusCmd() *cobra.Command {
	a := &action.Status{}
	var format string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show what is installed: version, components, readiness, last operation",
		Long: `Show the installation recorded in the cluster: the platform version, each
component's Helm release and revision, its ready and desired replicas, the
last error, and the last operation (who ran what, when, and how it ended).
Reads the cluster only; works from any machine with access.`,
		Example: `  onprem status
  onprem status --namespace ci-platform -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Check(format, output.Table, output.JSON, output.YAML); err != nil {
				return inputError{err}
			}
			res, err := a.Run(cmd.Context())
			if err != nil {
				return err
			}
			return output.Write(cmd.OutOrStdout(), format, res, func(w io.Writer) {
				if !res.Installed {
					fmt.Fprintf(w, "nothing installed in namespace %s\n", res.Namespace)
					return
				}
				fmt.Fprintf(w, "installation %s: platform %s in namespace %s\n", res.Installation, res.Version, res.Namespace)
				tw := output.NewTable(w)
				fmt.Fprintln(tw, "COMPONENT\tCHART\tREVISION\tRELEASE\tREADY\tLAST ERROR")
				for _, c := range res.Components {
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d/%d\t%s\n", c.Name, c.Chart, c.Revision, c.Release, c.Ready, c.Desired, c.LastError)
				}
				tw.Flush()
				if op := res.LastOperation; op != nil {
					fmt.Fprintf(w, "last operation: %s %s by onprem %s on %s, %s at %s\n", op.Kind, op.Version, op.Installer, op.Host, op.Outcome, op.Started.Format("2006-01-02 15:04:05 MST"))
					if op.Message != "" && op.Outcome != state.OutcomeSucceeded {
						fmt.Fprintf(w, "  %s\n", op.Message)
					}
				}
			})
		},
	}
	addClusterFlags(cmd, &a.Cluster)
	addTargetFlags(cmd, &a.Target)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}
