package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/output"
)

func newUninstallCmd() *cobra.Command {
	a := &action.Uninstall{}
	var format string
	var yes bool
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove the platform's components, keeping its data unless --purge",
		Long: `Remove every component of the platform in reverse dependency order.

Kept, so that 'onprem install' brings the platform back with its data and
the same credentials: the PersistentVolumeClaims (MongoDB, PostgreSQL,
Redis, RabbitMQ data), the generated secrets, the state record and the
namespace.

--purge deletes those too. It cannot be undone: it asks for confirmation on
a terminal, or needs --yes.`,
		Example: `  onprem uninstall
  onprem uninstall --purge --yes --namespace ci-platform`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			a.Confirmed = yes
			if a.Purge && !yes {
				a.Confirmed = confirm(cmd.InOrStdin(), cmd.ErrOrStderr(), "Delete every volume, generated secret, the state and the namespace? This cannot be undone.")
			}
			rep, stop := progress(cmd.ErrOrStderr())
			a.Reporter = rep
			res, err := a.Run(cmd.Context())
			stop()
			return writeAnyway(cmd, format, res, err, func(w io.Writer) {
				fmt.Fprintf(w, "removed %d components from namespace %s\n", len(res.Removed), res.Namespace)
				for _, k := range res.Kept {
					fmt.Fprintf(w, "kept: %s\n", k)
				}
				if res.Purged {
					fmt.Fprintln(w, "purged: volumes, generated secrets, state and namespace deleted")
				}
			})
		},
	}
	addClusterFlags(cmd, &a.Cluster)
	addTargetFlags(cmd, &a.Target)
	cmd.Flags().BoolVar(&a.Purge, "purge", false, "also delete volumes, generated secrets, the state and the namespace")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm --purge without asking")
	cmd.Flags().DurationVar(&a.Timeout, "timeout", apply.DefaultTimeout, "how long each component may take to be removed")
	addLockFlags(cmd, &a.LockWait, &a.LockLease)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}
