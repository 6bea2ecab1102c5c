package main

import (
	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/output"
	"onprem.dev/onprem/installer/render"
)

func newRenderCmd() *cobra.Command {
	a := &action.Render{}
	var format string
	cmd := &cobra.Command{
		Use:   "render",
		Short: "Print every object the installation would create, without a cluster",
		Long: `Render the platform exactly as 'onprem install' would apply it: every
component's Helm chart with its layered values (chart defaults < release <
sizing profile < onprem.yaml < --set, checked against each chart's
values.schema.json), then the kustomize overlays (labels, image relocation
to your registry, hardening, placement, proxy, and your own overlay
folders); what your overlays or --set add is relocated and hardened too,
and a pod the namespace's restricted Pod Security would refuse stops the
render (exit 2). Nothing is sent anywhere; no helm or kubectl is needed.

Secrets that onprem generates (database passwords, keys, the self-signed
certificate) are listed by name only: their values are created once, at
install, and exist only in the cluster.`,
		Example: `  onprem render -c onprem.yaml > platform.yaml
  onprem render --component pipelines-api
  onprem render --set pipelines-api.replicas=3 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Check(format, output.YAML, output.JSON); err != nil {
				return inputError{err}
			}
			res, err := a.Run(cmd.Context())
			if err != nil {
				return err
			}
			if format == output.JSON {
				return output.Encode(cmd.OutOrStdout(), format, res)
			}
			return render.WriteYAML(cmd.OutOrStdout(), res)
		},
	}
	addSourceFlags(cmd, &a.Source)
	addBundleFlags(cmd, &a.Source)
	cmd.Flags().StringVar(&a.Component, "component", "", "render only this component")
	cmd.Flags().StringArrayVar(&a.Set, "set", nil, "override a value: COMPONENT.key=value (repeatable, Helm syntax)")
	cmd.Flags().StringVarP(&format, "output", "o", output.YAML, "output: yaml or json")
	return cmd
}
