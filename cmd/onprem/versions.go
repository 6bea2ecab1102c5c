package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/output"
)

func newVersionsCmd() *cobra.Command {
	a := &action.Versions{}
	var format string
	cmd := &cobra.Command{
		Use:   "versions",
		Short: "List the platform versions this onprem can install",
		Long: `List the platform releases this onprem knows, oldest first: the Kubernetes
versions each supports, the versions it may be upgraded from, whether it is
a required stop on an upgrade path, and its migrations.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			infos, err := a.Run()
			if err != nil {
				return err
			}
			if format != output.Table {
				return output.Encode(cmd.OutOrStdout(), format, infos)
			}
			tw := output.NewTable(cmd.OutOrStdout())
			fmt.Fprintln(tw, "VERSION\tDATE\tKUBERNETES\tUPGRADE FROM\tREQUIRED\tMIGRATIONS")
			for _, i := range infos {
				from := i.UpgradeFrom
				if from == "" {
					from = "(fresh install only)"
				}
				req := "no"
				if i.Required {
					req = "yes"
				}
				migs := strings.Join(i.Migrations, ",")
				if migs == "" {
					migs = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", i.Version, i.Date, i.Kubernetes, from, req, migs)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}
