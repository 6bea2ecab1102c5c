package main

import (
	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/config"
)

// attachmentCmds is one kind of attachment (build runners, runnerCmds;
// GitOps runtimes, runtimeCmds: what onprem installs beside the platform,
// on its cluster or another one) as its commands see it.
type attachmentCmds struct {
	// name names the kind in its flags (--NAME-kubeconfig,
	// --NAME-context) and in their help: "runner", "runtime".
	name string
}

// addClusterFlags adds --NAME-kubeconfig and --NAME-context: the
// attachment's cluster, by default the one def says.
func (k attachmentCmds) addClusterFlags(cmd *cobra.Command, ref *config.ClusterRef, def string) {
	cmd.Flags().StringVar(&ref.Kubeconfig, k.name+"-kubeconfig", "", "kubeconfig of the "+k.name+"'s cluster (default: "+def+")")
	cmd.Flags().StringVar(&ref.Context, k.name+"-context", "", "context of the "+k.name+"'s cluster (default: "+def+")")
}
