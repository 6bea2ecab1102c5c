package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/output"
)

func newDiffCmd() *cobra.Command {
	a := &action.Diff{}
	var format string
	cmd := &cobra.Command{
		Use:   "diff",
		Short: "Show what 'onprem install' would change in the cluster",
		Long: `Compare the cluster with onprem.yaml: for every component, a unified diff
of each live object against what applying the desired one would make of it
(a server-side dry run, so server defaults do not show as changes), new
objects, and objects the new release would remove. Secret values never
appear. Nothing is changed. It is the comparison 'onprem install' makes
before it leaves a component alone: with an unchanged onprem.yaml, what it
shows is drift that install reverts (see 'onprem install --help'). A changed
spec.availability is named first: the databases install would move between
a single server and a replicated cluster.

Exit code 0 whether or not there are differences; -o json for scripts.`,
		Example: `  onprem diff -c onprem.yaml
  onprem diff -c onprem.yaml --set pipelines-api.replicas=3`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAndWrite(cmd, format, a.Run, func(w io.Writer, res *action.DiffResult) {
				for _, m := range res.Moves {
					fmt.Fprintf(w, "# install will move %s: the services stop, the data is backed up, the database made again and its data restored (docs/availability.md)\n", m)
				}
				if len(res.Components) == 0 {
					fmt.Fprintf(w, "no differences: the cluster matches platform %s\n", res.Version)
					return
				}
				for _, c := range res.Components {
					fmt.Fprintf(w, "# component %s\n", c.Name)
					for _, o := range c.Objects {
						fmt.Fprintf(w, "## %s %s/%s\n%s", o.Change, o.Kind, o.Name, o.Diff)
					}
				}
			})
		},
	}
	addSourceFlags(cmd, &a.Source)
	addBundleFlags(cmd, &a.Source)
	addClusterFlags(cmd, &a.Cluster)
	cmd.Flags().StringArrayVar(&a.Set, "set", nil, "override a value: COMPONENT.key=value (repeatable)")
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table (unified diffs), json or yaml")
	return cmd
}
