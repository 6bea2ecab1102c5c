package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/console"
)

func newConsoleCmd() *cobra.Command {
	var src console.Actions
	target := &src.Target
	o := console.ServeOptions{}
	cmd := &cobra.Command{
		Use:   "console [--listen 127.0.0.1:8800]",
		Short: "Serve the admin console: the installation in a browser",
		Long: `Serve the admin console on this machine: web pages that show the
installation through the same library as the CLI, with your kubeconfig and
context. It prints a URL with a token made for this run: open it in a
browser (it sets a session cookie, HttpOnly and SameSite=Strict), or give
the token on the login page. The pages refresh by themselves.

  Overview    the installation's name, namespace and version; every
              component with its chart, Helm release, revision, ready and
              desired replicas and last error; the recent operations of the
              history; the backups; the certificates and their expiry
  Component   its pods and containers with their state and restarts, the
              last lines of each container's log (secret values redacted),
              recent events, and its Helm history
  Runners and runtimes
              each with its cluster and health (as 'runner list' and
              'runtime list')
  Preflight   runs the checks 'onprem install' runs (with the -c
              configuration) and shows each result with its fix
  Upgrade     the versions reachable from the installed one (embedded, and
              those of --bundle files), the plan of an upgrade to one of
              them, and, once you confirm the plan, the upgrade itself with
              its progress per step and component as it happens (a failing
              step is rolled back, as 'onprem upgrade apply' does)
  Configuration
              the -c file and its effective form (defaults, ONPREM_*
              variables); an edited copy is checked (every problem with its
              line) and shows what installing it would change; only after
              you confirm those changes is it written over the file and
              installed ('onprem install')
  Support and backups
              a support bundle to download (redacted, as 'onprem
              support-bundle' writes it) and the backups in the bucket of
              spec.backup

The console listens on loopback (127.0.0.1:8800) unless --listen says
otherwise; another address needs --tls-cert and --tls-key, or --insecure
(the token and the session would cross the network in the clear). To reach
a loopback console on a jump host, tunnel it: ssh -L 8800:127.0.0.1:8800
HOST.

Upgrades and installs started from the console are the library's, as the
CLI's: they take the installation's lock (another onprem, or another
browser tab, sees who holds it), record every step in the installation's
state, and resume with the same command after an interruption. One runs at
a time per console. Stop the console with Ctrl-C: a running operation is
interrupted, records that, and the console waits for it to do so.

Exit code 0 when stopped, 2 for bad flags (nothing started), 3 when the
cluster cannot be reached at start.`,
		Example: `  onprem console
  onprem console --listen 127.0.0.1:9000 --context prod
  onprem console --listen 0.0.0.0:8443 --tls-cert console.crt --tls-key console.key`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Check(); err != nil {
				return inputError{err}
			}
			// The cluster is reached once before serving, so that a wrong
			// kubeconfig fails here (exit 3), not in the browser.
			if _, err := (&action.Status{Target: *target}).Run(cmd.Context()); err != nil {
				return err
			}
			if o.InsecureBeyondLoopback() {
				fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: serving plain HTTP on %s (--insecure): the token and the session cross the network in the clear\n", o.Listen)
			}
			o.Source = src
			o.Ready = func(u string) {
				fmt.Fprintln(cmd.OutOrStdout(), u)
				fmt.Fprintln(cmd.ErrOrStderr(), "console serving: open the URL above in a browser; Ctrl-C stops it")
			}
			err := console.Serve(cmd.Context(), o)
			var ie *console.InputError
			if errors.As(err, &ie) {
				return inputError{err}
			}
			return err
		},
	}
	addClusterFlags(cmd, &target.Cluster)
	addTargetFlags(cmd, target)
	cmd.Flags().Lookup("config").Usage = "the installation's configuration file: its namespace, the checks, upgrades and the Configuration page"
	cmd.Flags().StringArrayVar(&src.Bundles, "bundle", nil, "an air-gapped bundle whose version the Upgrade page offers ('onprem bundle create'; repeatable)")
	addTrustFlags(cmd, &src.PublicKeys, &src.AllowUnsigned)
	cmd.Flags().DurationVar(&src.Timeout, "timeout", apply.DefaultTimeout, "how long each component may take to become ready in upgrades and installs from the console")
	cmd.Flags().StringVar(&o.Listen, "listen", console.DefaultListen, "host:port to serve on (loopback unless TLS or --insecure)")
	cmd.Flags().StringVar(&o.TLSCert, "tls-cert", "", "certificate (PEM) to serve HTTPS with")
	cmd.Flags().StringVar(&o.TLSKey, "tls-key", "", "the certificate's private key (PEM)")
	cmd.Flags().BoolVar(&o.Insecure, "insecure", false, "allow plain HTTP on an address other than loopback")
	return cmd
}
