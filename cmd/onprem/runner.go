package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/runner"
)

func newRunnerCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runner",
		Short: "Install, list, upgrade and remove build runners",
		Long: `Build runners take builds from the platform and run them: an agent that
talks to the platform's API through its ingress and runs each build step as
a pod in its own namespace, and a build engine (rootless BuildKit) that
builds images. A runner runs on the platform's cluster or on another one,
and is registered with the platform under a name unique in the
installation.

Two clusters may be involved, so the flags say which is which:

  --kubeconfig, --context                the platform's cluster (as for every
                                         other command): its state records
                                         the runners
  --runner-kubeconfig, --runner-context  the runner's cluster (default: the
                                         platform's)
  --runner-namespace                     the runner's namespace (default:
                                         onprem-runner-NAME)
  --platform-namespace                   the platform's namespace (default:
                                         spec.namespace of -c, else onprem)

The registration token is generated once and kept in Secrets only: on the
runner's cluster (onprem-runner-token in the runner's namespace) and on the
platform's (key NAME of onprem-runner-tokens, read by runtime-manager). It
is never printed.

Runners can also be declared in onprem.yaml (spec.runners[]): 'onprem
install' then installs or converges them after the platform.

Exit codes: 0 done, 1 failed, 2 bad arguments or configuration (nothing
was changed), 3 a cluster is unreachable or refused access (the message
names its kubeconfig, context and server).`,
	}
	cmd.AddCommand(newRunnerInstallCmd(), newRunnerListCmd(), newRunnerUpgradeCmd(), newRunnerUninstallCmd())
	return cmd
}

// addPlatformClusterFlags adds --kubeconfig and --context: the platform's
// cluster.
func addPlatformClusterFlags(cmd *cobra.Command, o *kube.Options) {
	cmd.Flags().StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig of the platform's cluster (default: $KUBECONFIG, then ~/.kube/config)")
	cmd.Flags().StringVar(&o.Context, "context", "", "context of the platform's cluster (default: the current context)")
}

// runnerCmds is the runners' kind, to the commands' builders.
var runnerCmds = attachmentCmds{name: "runner"}

// refuseNamespaceFlag adds a hidden --namespace that explains which
// namespace flag to use: both clusters have one here.
func refuseNamespaceFlag(cmd *cobra.Command) {
	var ns string
	cmd.Flags().StringVar(&ns, "namespace", "", "")
	_ = cmd.Flags().MarkHidden("namespace")
	cmd.PreRunE = chain(cmd.PreRunE, func(c *cobra.Command, _ []string) error {
		if c.Flags().Changed("namespace") {
			return inputError{errors.New("--namespace is ambiguous here: use --runner-namespace for the runner's namespace, or --platform-namespace for the platform's")}
		}
		return nil
	})
}

// addRunnerSourceFlags adds -c, --platform-namespace, --bundle and
// --public-key: the platform's configuration, which a runner's render
// needs (domain, registry, proxy, placement).
func addRunnerSourceFlags(cmd *cobra.Command, src *action.Source) {
	cmd.Flags().StringVarP(&src.ConfigPath, "config", "c", "onprem.yaml", "the platform's configuration file")
	var ns string
	cmd.Flags().StringVar(&ns, "platform-namespace", "", "override spec.namespace: the platform's namespace (ONPREM_NAMESPACE)")
	cmd.PreRunE = chain(cmd.PreRunE, func(c *cobra.Command, _ []string) error {
		if c.Flags().Changed("platform-namespace") {
			src.Overrides.Namespace = &ns
		}
		return nil
	})
	cmd.Flags().StringArrayVar(&src.Bundles, "bundle", nil, "the air-gapped bundle of the installed platform version ('onprem bundle create'): its charts, and images from spec.registry")
	addTrustFlags(cmd, &src.PublicKeys, &src.AllowUnsigned)
}

// addRunnerTargetFlags adds -c and --platform-namespace for commands that
// only need to find the platform (list, uninstall).
func addRunnerTargetFlags(cmd *cobra.Command, t *action.Target) {
	cmd.Flags().StringVar(&t.Namespace, "platform-namespace", "", "the platform's namespace (default: spec.namespace of -c if the file exists, else onprem)")
	cmd.Flags().StringVarP(&t.ConfigPath, "config", "c", "onprem.yaml", "the platform's configuration file, read only for its namespace")
}

func newRunnerInstallCmd() *cobra.Command {
	a := &action.RunnerInstall{}
	return attachmentCommand(runnerCmds, &cobra.Command{
		Use:   "install NAME",
		Short: "Install a build runner and register it with the platform",
		Long: `Install the build runner NAME on the runner's cluster (default: the
platform's) and register it with the platform, at the installed platform
version. Running it again for the same runner changes nothing (same token,
no new Helm revision); it converges a runner whose settings changed.

Needs the platform installed (with its pipelines module) and its
configuration (-c): the runner uses the platform's domain (the agent calls
https://DOMAIN/api), private registry (images relocated there, docker.io
pulled through it), proxy and placement. When onprem.yaml declares NAME in
spec.runners[], its cluster, namespace and concurrency are the defaults
here; the flags win.

What it creates on the runner's cluster: the namespace (Pod Security
"restricted": the agent and the build pods it creates) and NAMESPACE-engine
(Pod Security "privileged", for the build engine alone: rootless BuildKit
runs with seccomp and AppArmor Unconfined, privilege escalation and
SETUID/SETGID to build in user namespaces, as uid 1000 and never
privileged; nothing else runs there and the agent cannot create pods
there), the token Secret onprem-runner-token, the Helm release runner-NAME
(agent Deployment, its ServiceAccount and a Role limited to pods, pods/log,
pods/exec, Secrets and ConfigMaps of its namespace, the engine and its
buildkitd.toml, NetworkPolicies). On the platform's: the token under key
NAME of Secret onprem-runner-tokens, and the runner's record in the state.

A name already used by a runner on another cluster or in another namespace
is refused (exit 2), naming where it runs.`,
		Example: `  onprem runner install default -c onprem.yaml
  onprem runner install gpu -c onprem.yaml --runner-context gpu-cluster --concurrency 8
  onprem runner install gpu -c onprem.yaml --context platform --runner-kubeconfig gpu.kubeconfig --runner-namespace ci-gpu`,
		Args: exactlyOneName,
	}, attachmentVerb{
		source: &a.Source, platform: &a.Cluster, cluster: &a.RunnerCluster, clusterDefault: "spec.runners[]'s, else the platform's",
		timeout: &a.Timeout, timeoutHelp: "how long the runner may take to become ready (a failure that waiting cannot fix, such as an image the registry does not have, ends the wait at once)",
		lockWait: &a.LockWait, lockLease: &a.LockLease, reporter: &a.Reporter,
		flags: func(f *pflag.FlagSet) {
			f.StringVar(&a.Namespace, "runner-namespace", "", "the runner's namespace; its build engine's is NAMESPACE-engine (default: spec.runners[]'s, else onprem-runner-NAME)")
			f.IntVar(&a.Concurrency, "concurrency", 0, "builds the runner runs at once, 1 to 256 (default: spec.runners[]'s, else 4)")
		},
	}, oneName(&a.Name), a.Run, func(w io.Writer, res *runner.Result) { printRunnerResults(w, []runner.Result{*res}) }, notNil)
}

func newRunnerUpgradeCmd() *cobra.Command {
	a := &action.RunnerUpgrade{}
	return upgradeCommand(runnerCmds, &cobra.Command{
		Use:   "upgrade NAME... | --all",
		Short: "Bring runners to the installed platform version",
		Long: `Upgrade runners to the runner chart and images of the installed platform
version, and to the platform's current configuration (registry, proxy,
placement, CA). Run it after 'onprem upgrade apply' (or let 'onprem
install' converge the runners of spec.runners[]). The token never changes.

Each runner's cluster is reached the way it was at install (kubeconfig and
context recorded in the state); when they differ on this machine, give
--runner-kubeconfig / --runner-context (one runner at a time). A runner that
fails does not stop the others.`,
		Example: `  onprem runner upgrade --all -c onprem.yaml
  onprem runner upgrade gpu -c onprem.yaml --runner-kubeconfig ~/.kube/gpu`,
	}, &a.AttachmentUpgrade, &a.RunnerCluster, nil, a.Run, printRunnerResults)
}

func newRunnerUninstallCmd() *cobra.Command {
	a := &action.RunnerUninstall{}
	return uninstallCommand(runnerCmds, &cobra.Command{
		Use:   "uninstall NAME",
		Short: "Remove a build runner from its cluster and from the platform",
		Long: `Remove the runner NAME: on its cluster the Helm release, the token Secret,
the copies of the platform's CA and pull Secret, and the namespaces onprem
created for it; on the platform's, its registration (key NAME of
onprem-runner-tokens) and its record. Running builds are stopped.

If the runner's cluster is gone for good, --forget removes the platform's
side only. A failure on the runner's cluster leaves the registration in
place: run it again.`,
		Example: `  onprem runner uninstall gpu
  onprem runner uninstall gpu --runner-context gpu-cluster
  onprem runner uninstall old --forget`,
		Args: exactlyOneName,
	}, &a.AttachmentUninstall, &a.RunnerCluster, "remove only the platform's side (the runner's cluster is gone for good)",
		"how long the runner's removal may take", a.Run)
}

func newRunnerListCmd() *cobra.Command {
	a := &action.RunnerList{}
	return listCommand(runnerCmds, &cobra.Command{
		Use:   "list",
		Short: "List the build runners and whether they are ready",
		Long: `List the runners registered with the installation (from its state on the
platform's cluster), each with its cluster, namespace, version and the
readiness of its agent and build engine. A runner whose cluster cannot be
reached is shown as unreachable, with the reason; that is not an error.`,
		Example: `  onprem runner list
  onprem runner list --context platform -o json`,
		Args: cobra.NoArgs,
	}, &a.Target, &a.RunnerTimeout, a.Run, printRunnerList)
}

// exactlyOneName accepts one argument: the runner's name.
func exactlyOneName(_ *cobra.Command, args []string) error {
	switch len(args) {
	case 1:
		return nil
	case 0:
		return inputError{errors.New("name the runner (a DNS label of at most 40 characters), e.g. onprem runner install default")}
	}
	return inputError{fmt.Errorf("one runner at a time: got %s", strings.Join(args, " "))}
}

func printRunnerResults(w io.Writer, rs []runner.Result) {
	writeTable(w, "RUNNER\tRESULT\tREVISION\tNAMESPACE\tCLUSTER\tVERSION\tTIME", rs, func(r runner.Result) string {
		return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s\t%s", r.Name, r.Action, r.Revision, r.Namespace, clusterOf(r.Context, r.Server), r.Version, round(r.Elapsed))
	})
	for _, r := range rs {
		if r.TokenCreated {
			fmt.Fprintf(w, "runner %s: registration token generated (Secret %s/%s; never shown)\n", r.Name, r.Namespace, runner.TokenSecret)
		}
		printFailure(w, "runner", r.Name, r.Error, r.NotReady)
	}
}

func printRunnerList(w io.Writer, res *action.RunnerListResult) {
	if len(res.Runners) == 0 {
		fmt.Fprintf(w, "no runners registered with the installation in namespace %s\n", res.Namespace)
		return
	}
	writeTable(w, "RUNNER\tCLUSTER\tNAMESPACE\tVERSION\tREVISION\tAGENT\tENGINE\tSTATUS", res.Runners, func(s runner.Status) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%d/%d\t%d/%d\t%s", s.Name, clusterOf(s.Context, s.Server), s.Namespace, s.Version, s.Revision,
			s.Agent.Ready, s.Agent.Desired, s.Engine.Ready, s.Engine.Desired, listedStatus(s.Reachable, s.Ready, s.Recorded))
	})
	for _, s := range res.Runners {
		printFailure(w, "runner", s.Name, s.Problem, nil)
	}
}

func clusterOf(context, server string) string {
	if context != "" {
		return context
	}
	return server
}
