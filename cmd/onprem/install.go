package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/output"
	"onprem.dev/onprem/preflight"
)

func hasWarnings(r *preflight.Report) bool {
	for _, f := range r.Findings {
		if f.Result == preflight.Warn {
			return true
		}
	}
	return false
}

func newInstallCmd() *cobra.Command {
	a := &action.Install{}
	var format string
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install the platform, or make an installation match onprem.yaml",
		Long: `Make the cluster match onprem.yaml: run the preflight checks (nothing is
touched if one fails; see 'onprem preflight'), render every component, generate the
secrets that do not exist yet (database passwords, per-service credentials,
keys, the self-signed certificate: created once, never changed), then apply
the components in dependency order (ingress, infrastructure, database
provisioning, services), independent ones in parallel, each a Helm release
waited for until ready.

Running it again with the same configuration changes nothing; a changed
value upgrades only the components it affects. It converges on what runs,
not on what Helm last stored: a component whose live objects differ from
onprem's in a field onprem sets (an image or an environment variable
changed by hand, replicas scaled without an autoscaler, a Service or
ConfigMap deleted, a NetworkPolicy edited) is applied again, and the result
names each object and what was reverted ("repaired: Deployment/gitops-ui
image"). Fields onprem does not set are left alone: labels and annotations
others add, fields other controllers own (a HorizontalPodAutoscaler's
replicas), a 'kubectl rollout restart'. 'onprem status' shows such drift
without changing anything. Only one onprem works on an
installation at a time: a second one waits (--lock-wait), then fails naming
the holder. The result is recorded in the cluster (Secret onprem-state), so
'onprem status' shows it from any machine.

If a component does not become ready within --timeout, the install stops
there, says which objects are not ready and why, records the failure and
leaves everything applied in place: fix the cause and run it again.

A failure that waiting cannot fix ends the wait at once, named as
'onprem doctor' names it, with the fix: an image the registry says does not
exist or refuses, an invalid image reference, a missing Secret or ConfigMap
key, pods refused by admission (pod security, quota), a Job past its backoff
limit, a container that crashed 3 times with the same exit code. Anything
else (an unreachable registry, a slow pull, a pod waiting for capacity, a
probe not passing yet) is waited for until --timeout, and the progress line
says what it waits for ("gitops-api  0/1 ready, pulling image (35 s)").

Changing spec.availability between single and high on an installed platform
moves its databases (docs/availability.md): the preflight check
'availability' says what will move; then the services stop, every database
is backed up to a file on this machine (--move-dir, encrypted to a key kept
in the cluster), the moving databases are made again in their new form and
their data restored, and the services start again: minutes without service,
no acknowledged write lost. Interrupted, the next install on the same
machine finishes it.

Progress goes to stderr (a live table on a terminal); the result to stdout.
Exit codes: 0 done, 1 failed, 2 bad configuration or flags, 3 cluster
unreachable or access refused.`,
		Example: `  onprem install -c onprem.yaml
  onprem install -c onprem.yaml --dry-run
  onprem install -c onprem.yaml --bundle platform-2.8.0.bundle --public-key bundle.pub
  onprem install -c onprem.yaml --context prod -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			a.Preflight = printPreflightSummary(cmd.ErrOrStderr())
			rep, stop := progress(cmd.ErrOrStderr())
			a.Reporter = rep
			res, err := a.Run(cmd.Context())
			stop()
			return writeAnyway(cmd, format, res, err, func(w io.Writer) { printInstall(w, res) })
		},
	}
	addSourceFlags(cmd, &a.Source)
	addBundleFlags(cmd, &a.Source)
	addClusterFlags(cmd, &a.Cluster)
	cmd.Flags().StringArrayVar(&a.Set, "set", nil, "override a value: COMPONENT.key=value (repeatable)")
	cmd.Flags().StringArrayVar(&a.SkipChecks, "skip-check", nil, "skip this preflight check (repeatable; recorded in the state; see 'onprem preflight --list')")
	cmd.Flags().BoolVar(&a.DryRun, "dry-run", false, "render and validate every object on the API server; change nothing")
	cmd.Flags().IntVar(&a.Concurrency, "concurrency", apply.DefaultConcurrency, "components applied at once")
	cmd.Flags().DurationVar(&a.Timeout, "timeout", apply.DefaultTimeout, "how long each component may take to become ready (a failure that waiting cannot fix ends the wait at once)")
	addLockFlags(cmd, &a.LockWait, &a.LockLease)
	cmd.Flags().StringVar(&a.MoveDir, "move-dir", "", "where a move between spec.availability single and high keeps its backup until it is done (default $XDG_STATE_HOME/onprem/availability-moves, else ~/.local/state/onprem/availability-moves)")
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "result on stdout: table, json or yaml")
	return cmd
}

func printInstall(w io.Writer, res *action.InstallResult) {
	writeTable(w, "COMPONENT\tRESULT\tREVISION\tTIME", res.Components, func(c apply.ComponentResult) string {
		return fmt.Sprintf("%s\t%s\t%d\t%s", c.Name, c.Action, c.Revision, round(c.Elapsed))
	})
	verb := "installed"
	if res.DryRun {
		verb = "validated (dry run, nothing changed)"
	}
	for _, r := range res.Repaired() {
		fmt.Fprintf(w, "repaired: %s\n", r)
	}
	fmt.Fprintf(w, "platform %s %s in namespace %s (%s)\n", res.Version, verb, res.Namespace, round(res.Elapsed))
	if m := res.Move; m != nil {
		how := "moved"
		if m.Resumed {
			how = "finished moving"
		}
		what := strings.Join(m.Changes, "; ")
		if what == "" { // finishing a move whose StatefulSets were already gone
			what = strings.Join(m.Databases, ", ")
		}
		fmt.Fprintf(w, "availability: %s %s (services stopped %s)\n", how, what, round(m.Downtime))
	}
	if s := res.Secrets; s != nil && len(s.Created) > 0 {
		fmt.Fprintf(w, "generated %d secrets (kept in the cluster, never shown)\n", len(s.Created))
	}
	if res.CertificateRenewal != "" {
		fmt.Fprintf(w, "certificate: %s\n", res.CertificateRenewal)
	}
	if res.CredentialRotation != "" {
		fmt.Fprintf(w, "credentials: %s\n", res.CredentialRotation)
	}
	if res.KeyRotation != "" {
		fmt.Fprintf(w, "keys: %s\n", res.KeyRotation)
	}
}
