package main

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/local"
	"onprem.dev/onprem/installer/output"
)

func newLocalCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "local",
		Short: "Try the platform on this machine: a kind cluster with the platform installed",
		Long: `Run the whole platform on this machine, in a kind cluster (Kubernetes in a
docker container): 'onprem local up' creates the cluster and installs the
platform into it, 'onprem local down' removes both. You need docker, and
nothing else: onprem drives kind through its Go library.`,
		Example: `  onprem local up
  onprem local down`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newLocalUpCmd(), newLocalDownCmd())
	return cmd
}

// localLogger is the logger of the local commands: their progress (kind's
// steps, image loading) is shown unless --log-level asks for less.
func localLogger(cmd *cobra.Command) *slog.Logger {
	if f := cmd.Flag("log-level"); f != nil && f.Changed {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func newLocalUpCmd() *cobra.Command {
	a := &local.Up{}
	var format, version, domain string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Create a local kind cluster and install the platform into it",
		Long: `Create a kind cluster on this machine (one node, a docker container) and
install the platform into it, then print its URL and how to reach it.

The node maps this machine's ports --http-port (8080) and --https-port
(8443), on --listen-address (127.0.0.1: this machine only), to the ingress
controller, so the platform answers at https://onprem.localhost:8443 (a
*.localhost name resolves to 127.0.0.1 by itself in browsers and curl; the
certificate is self-signed).

Without --config, onprem writes the installation's onprem.yaml for you
(the newest platform version, domain onprem.localhost, profile small) next
to the cluster's kubeconfig in ~/.onprem/local/NAME.{yaml,kubeconfig}; your
~/.kube/config is not touched. With --config, your file is installed, with
the ingress served on the mapped ports.

On a machine that reaches Docker Hub and the platform's registry, kind's
default node image and the upstream images are pulled. On a machine with
no registry, give a node image already in docker (--node-image) and the
platform's images as docker-archive tarballs (--image-archive), which are
loaded into the node before the install: 'make demo' builds both offline
and runs this command.

If the install fails, the cluster is left as it is for inspection: the
error says how to finish the install or remove the cluster.
Exit codes: 0 done, 1 failed, 2 bad flags or configuration (nothing was
made), 3 the new cluster did not answer.`,
		Example: `  # the platform at https://onprem.localhost:8443
  onprem local up

  # your own configuration, other ports, every interface
  onprem local up -c onprem.yaml --http-port 80 --https-port 443 --listen-address 0.0.0.0

  # an older version, to try 'onprem upgrade' on it
  onprem local up --name try-upgrade --platform-version 2.7.1 --https-port 9443 --http-port 9080

  # no registry: a node image in the local docker, and the images from files
  onprem local up --node-image onprem.dev/kind-node:v1.36.3 --image-archive platform-images.tar

  # the result for scripts
  onprem local up -o json | jq -r .url`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			if cmd.Flags().Changed("platform-version") {
				a.Overrides.Version = &version
			}
			if cmd.Flags().Changed("domain") {
				a.Overrides.Domain = &domain
			}
			a.Log = localLogger(cmd)
			a.Preflight = printPreflightSummary(cmd.ErrOrStderr())
			rep, stop := progress(cmd.ErrOrStderr())
			a.Reporter = rep
			res, err := a.Run(cmd.Context())
			stop()
			if res == nil {
				return err
			}
			if err != nil {
				// The install failed: its components, then the error.
				if res.Install != nil && format == output.Table {
					printInstall(cmd.OutOrStdout(), res.Install)
				}
				return err
			}
			return output.Write(cmd.OutOrStdout(), format, res, func(w io.Writer) { printLocalUp(w, res) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&a.Name, "name", local.DefaultName, "name of the kind cluster")
	f.StringVar(&a.NodeImage, "node-image", "", "kind node image (default: kind's own for its version, pulled from Docker Hub)")
	f.StringArrayVar(&a.ImageArchives, "image-archive", nil, "docker-archive tarball ('docker save') of images to load into the node before the install (repeatable)")
	f.StringVarP(&a.ConfigPath, "config", "c", "", "the installation's onprem.yaml (default: one written to ~/.onprem/local/NAME.yaml)")
	f.StringVar(&version, "platform-version", "", "platform version to install (default: the newest one 'onprem versions' lists)")
	f.StringVar(&domain, "domain", "", "domain the platform is served under (default: "+local.DefaultDomain+")")
	f.StringVar(&a.KindConfig, "kind-config", "", "kind v1alpha4 Cluster configuration to start from (advanced: more nodes, mounts, registry mirrors); the port mappings are added to it")
	f.IntVar(&a.Ports.HTTP, "http-port", local.DefaultHTTPPort, "port of this machine that serves the platform over HTTP")
	f.IntVar(&a.Ports.HTTPS, "https-port", local.DefaultHTTPSPort, "port of this machine that serves the platform over HTTPS")
	f.StringVar(&a.Ports.ListenAddress, "listen-address", local.DefaultListenAddress, "address of this machine the ports listen on (0.0.0.0: every interface)")
	f.DurationVar(&a.Wait, "wait", local.DefaultWait, "how long the cluster may take to become ready")
	f.DurationVar(&a.Timeout, "timeout", 0, "how long each component may take to become ready (default: as 'onprem install')")
	f.StringArrayVar(&a.SkipChecks, "skip-check", nil, "skip this preflight check (repeatable; see 'onprem preflight --list')")
	f.StringVarP(&format, "output", "o", output.Table, "result on stdout: table, json or yaml")
	return cmd
}

func printLocalUp(w io.Writer, res *local.UpResult) {
	if res.Install != nil {
		printInstall(w, res.Install)
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "The platform runs on the local cluster %q.\n\n", res.Cluster)
	tw := output.NewTable(w)
	fmt.Fprintf(tw, "  URL\t%s\n", res.URL)
	fmt.Fprintf(tw, "  platform\t%s in namespace %s\n", res.Version, res.Namespace)
	fmt.Fprintf(tw, "  kubeconfig\t%s\n", res.Kubeconfig)
	cfg := res.Config
	if res.Generated {
		cfg += " (written for you)"
	}
	fmt.Fprintf(tw, "  config\t%s\n", cfg)
	fmt.Fprintf(tw, "  node image\t%s\n", res.NodeImage)
	tw.Flush()
	fmt.Fprintln(w, "\nReach it:")
	for _, l := range res.Reach {
		fmt.Fprintf(w, "  - %s\n", l)
	}
	fmt.Fprintln(w, "\nNext:")
	for _, l := range res.Next {
		fmt.Fprintf(w, "  %s\n", l)
	}
}

func newLocalDownCmd() *cobra.Command {
	a := &local.Down{}
	var format string
	cmd := &cobra.Command{
		Use:   "down",
		Short: "Delete the local cluster made by 'onprem local up'",
		Long: `Delete the kind cluster made by 'onprem local up', with everything in it,
and the files up wrote for it (~/.onprem/local/NAME.kubeconfig, and
NAME.yaml when up wrote it; a configuration file of your own is left).
Running it again is harmless: it reports the cluster "(already gone)".`,
		Example: `  onprem local down
  onprem local down --name try-upgrade`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a.Log = localLogger(cmd)
			return runAndWrite(cmd, format, a.Run, func(w io.Writer, res *local.DownResult) {
				if res.Deleted {
					fmt.Fprintf(w, "cluster %s deleted\n", res.Cluster)
				} else {
					fmt.Fprintf(w, "cluster %s deleted (already gone)\n", res.Cluster)
				}
				for _, f := range res.Removed {
					fmt.Fprintf(w, "removed %s\n", f)
				}
			})
		},
	}
	cmd.Flags().StringVar(&a.Name, "name", local.DefaultName, "name of the kind cluster")
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "result on stdout: table, json or yaml")
	return cmd
}
