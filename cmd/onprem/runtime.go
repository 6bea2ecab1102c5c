package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/configrepo"
	"onprem.dev/onprem/installer/gitops"
	"onprem.dev/onprem/installer/managedcluster"
)

func newRuntimeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "runtime",
		Short: "Install, list, upgrade and remove GitOps runtimes, their Git sources and managed clusters",
		Long: `A GitOps runtime is an Argo-based installation (Argo CD, Workflows,
Rollouts, Events and app-proxy) that deploys from Git. It runs on the
platform's cluster or another one: one runtime per cluster, each with a name
unique in the installation (default codefresh).

All runtimes share one configuration repository (URL, optional branch and
folder): the first runtime initialises its layout (resources/) and holds the
configuration (resources/configuration) unless another is designated with
'onprem runtime designate-config'.

The Git token is read from a file (--git-token-file) or the environment
variable ONPREM_GIT_TOKEN, never from a flag value (it would land in shell
history). It is checked against the configuration repository before
anything is created, stored only as a Secret on the runtime's cluster
(onprem-runtime-git in its namespace) and never printed, logged or recorded.
The platform token a runtime registers with is read and kept the same way
(--platform-token-file or ONPREM_PLATFORM_TOKEN; Secret
onprem-runtime-platform-token).

The runtime chart is the release's: fetched from its chart repository (OCI
or HTTP), from a mirror (--chart-repository), or taken from the bundle of the
installed version.

Clusters involved:

  --kubeconfig, --context                  the platform's cluster: its state
                                           records the runtimes
  --runtime-kubeconfig, --runtime-context  the runtime's cluster (default:
                                           the platform's)

Runtimes can also be declared in onprem.yaml (spec.runtimes[],
spec.runtimeConfig): 'onprem install' installs or converges them, with
their Git sources, after the platform and its runners.

Exit codes: 0 done, 1 failed, 2 bad arguments, configuration or a refused
Git token (nothing was changed), 3 a cluster is unreachable or refused
access (the message names its kubeconfig, context and server).`,
	}
	cmd.AddCommand(newRuntimeInstallCmd(), newRuntimeListCmd(), newRuntimeUpgradeCmd(), newRuntimeUninstallCmd(),
		newRuntimeDesignateCmd(), newGitSourceCmd(), newRuntimeClusterCmd())
	return cmd
}

// runtimeCmds is the GitOps runtimes' kind, to the commands' builders.
var runtimeCmds = attachmentCmds{name: "runtime"}

// addGitFlags adds how Git hosts are reached.
func addGitFlags(f *pflag.FlagSet, g *configrepo.Remote) {
	f.StringVar(&g.CAFile, "git-ca-file", "", "CA certificates (PEM) that the Git host's certificate is checked against")
	f.BoolVar(&g.InsecureSkipTLSVerify, "git-insecure-skip-tls-verify", false, "do not check the Git host's certificate (a lab only)")
}

// addFetchFlags adds where the runtime chart comes from, and the Git flags.
func addFetchFlags(fs *pflag.FlagSet, f *action.RuntimeFetch) {
	fs.StringVar(&f.ChartRepository, "chart-repository", "", "a mirror of the release's runtime chart repository: oci://HOST/PATH or https://HOST/PATH (default: the release's)")
	fs.BoolVar(&f.Chart.PlainHTTP, "chart-plain-http", false, "reach an oci:// chart repository over plain HTTP (a lab registry)")
	fs.StringVar(&f.Chart.CAFile, "chart-ca-file", "", "CA certificates (PEM) for the chart repository")
	fs.StringVar(&f.Chart.RegistryConfig, "chart-registry-config", "", "docker config.json with credentials for an oci:// chart repository")
	addGitFlags(fs, &f.Git)
}

func newRuntimeInstallCmd() *cobra.Command {
	a := &action.RuntimeInstall{}
	cmd := attachmentCommand(runtimeCmds, &cobra.Command{
		Use:   "install [NAME]",
		Short: "Install a GitOps runtime (default name codefresh)",
		Long: `Install the GitOps runtime NAME (default codefresh) on the runtime's
cluster (default: the platform's), at the installed platform version.
Running it again changes nothing; it converges a runtime whose settings
changed.

Needs the platform installed (with its gitops module), its configuration
(-c) and the configuration repository (spec.runtimeConfig.repository, or
--config-repo for the first runtime). When onprem.yaml declares NAME in
spec.runtimes[], its cluster, namespace and token source are the defaults
here; the flags win.

Before anything is created: the name must be free in the installation, the
cluster must run no other runtime and no foreign Argo CD, and the Git host
must accept the token (a refused token leaves nothing behind, exit 2).

What the operator provides:
  the platform account    spec.runtimeConfig.accountId, or --account ID
  the platform token      a platform user token the runtime registers with:
                          --platform-token-file FILE, $ONPREM_PLATFORM_TOKEN
                          or spec.runtimeConfig.platformToken (first install
                          only: later runs reuse the one on the cluster)
  the Git token           --git-token-file FILE, $ONPREM_GIT_TOKEN or
                          spec.runtimes[].gitToken (first install only)
  how it is reached       spec.runtimes[].access: an Ingress (default, host
                          NAME.runtimes.DOMAIN, the platform's IngressClass),
                          a tunnel to a tunnel server of the operator's
                          (access.tunnelServer; never the vendor's hosted
                          one), or a URL of the operator's

What onprem fills in, at the paths the release's runtime chart reads them
(the release manifest's runtime.contract): the runtime's name, the platform
URL (https://DOMAIN), the account, whether it holds the configuration, the
tokens and the platform's CA as Secret references (never values), access,
placement and proxies from onprem.yaml. The chart's images are the ones
it renders, relocated to spec.registry.

What it creates on the runtime's cluster: the namespace (Pod Security
"restricted"), the Secrets onprem-runtime-git (the Git token, as an Argo CD
credential template for the configuration repository),
onprem-runtime-platform-token and, when the platform's certificate is
onprem's self-signed one (or the operator's Secret carries ca.crt),
onprem-runtime-platform-ca; and the Helm release runtime-NAME. In the
configuration repository: the resources/ layout on the first runtime, and
resources/configuration naming the configuration runtime.

What onprem never stores: the tokens anywhere but those Secrets (not in its
state, a backup, a log or an output).`,
		Example: `  ONPREM_GIT_TOKEN=... ONPREM_PLATFORM_TOKEN=... onprem runtime install -c onprem.yaml --account 64f0c1d2e3a4b5c6d7e8f901
  onprem runtime install -c onprem.yaml --git-token-file git-token.txt --platform-token-file platform-token.txt
  onprem runtime install edge -c onprem.yaml --runtime-context edge --git-token-file /run/secrets/git-token
  onprem runtime install -c onprem.yaml --config-repo https://git.example.com/platform/gitops.git --config-repo-path runtimes --git-token-file token.txt
  onprem runtime install -c onprem.yaml --chart-repository oci://registry.example.com/charts --git-token-file token.txt`,
		Args: cobra.MaximumNArgs(1),
	}, attachmentVerb{
		source: &a.Source, platform: &a.Cluster, cluster: &a.RuntimeCluster, clusterDefault: "spec.runtimes[]'s, else the platform's",
		timeout: &a.Timeout, timeoutHelp: "how long the runtime may take to become ready (a failure that waiting cannot fix, such as an image the registry does not have, ends the wait at once)",
		lockWait: &a.LockWait, lockLease: &a.LockLease, reporter: &a.Reporter,
		flags: func(f *pflag.FlagSet) { addRuntimeInstallFlags(f, a) },
	}, func(args []string) {
		if len(args) == 1 {
			a.Name = args[0]
		}
	}, a.Run, func(w io.Writer, r *gitops.Result) { printRuntimeResults(w, []gitops.Result{*r}) }, notNil)
	refuseTokenValueFlags(cmd)
	return cmd
}

// addRuntimeInstallFlags adds the flags of 'runtime install' that are the
// runtime's own: its namespace, tokens, account, configuration repository
// and where its chart comes from.
func addRuntimeInstallFlags(f *pflag.FlagSet, a *action.RuntimeInstall) {
	f.StringVar(&a.Namespace, "runtime-namespace", "", "the runtime's namespace (default: spec.runtimes[]'s, else the runtime's name)")
	f.StringVar(&a.TokenFile, "git-token-file", "", "file holding the Git token (default: the environment variable "+gitops.TokenEnv+", then spec.runtimes[].gitToken)")
	f.StringVar(&a.PlatformTokenFile, "platform-token-file", "", "file holding the platform token the runtime registers with (default: the environment variable "+gitops.PlatformTokenEnv+", then spec.runtimeConfig.platformToken)")
	f.StringVar(&a.AccountID, "account", "", "the platform account the runtime registers with (default: spec.runtimeConfig.accountId)")
	f.StringVar(&a.Repository.URL, "config-repo", "", "the configuration repository's https URL (default: spec.runtimeConfig.repository.url; only before the first runtime)")
	f.StringVar(&a.Repository.Branch, "config-repo-branch", "", "its branch (default: the repository's default branch)")
	f.StringVar(&a.Repository.Path, "config-repo-path", "", "the folder inside it (default: its root)")
	addFetchFlags(f, &a.Fetch)
}

func newRuntimeUpgradeCmd() *cobra.Command {
	a := &action.RuntimeUpgrade{}
	cmd := upgradeCommand(runtimeCmds, &cobra.Command{
		Use:   "upgrade NAME... | --all",
		Short: "Bring runtimes to the installed platform version",
		Long: `Upgrade runtimes to the runtime chart of the installed platform version and
to the platform's current configuration. Run it after 'onprem upgrade
apply'. The Git token kept on each runtime's cluster is reused;
--git-token-file replaces it (one runtime at a time), checked against the
configuration repository first. A runtime that fails does not stop the
others.`,
		Example: `  onprem runtime upgrade --all -c onprem.yaml
  onprem runtime upgrade edge -c onprem.yaml --git-token-file new-token.txt`,
	}, &a.AttachmentUpgrade, &a.RuntimeCluster, func(f *pflag.FlagSet) {
		f.StringVar(&a.TokenFile, "git-token-file", "", "file holding a new Git token (default: keep the one on the runtime's cluster)")
		f.StringVar(&a.PlatformTokenFile, "platform-token-file", "", "file holding a new platform token (default: keep the one on the runtime's cluster)")
		addFetchFlags(f, &a.Fetch)
	}, a.Run, printRuntimeResults)
	refuseTokenValueFlags(cmd)
	return cmd
}

func newRuntimeUninstallCmd() *cobra.Command {
	a := &action.RuntimeUninstall{}
	return uninstallCommand(runtimeCmds, &cobra.Command{
		Use:   "uninstall NAME",
		Short: "Remove a GitOps runtime from its cluster",
		Long: `Remove the runtime NAME: its Helm release (with its Git sources), the Git
token Secret, the managed clusters' Secrets and the namespace onprem created
for it; then its record. The configuration repository and its content stay.

The configuration runtime cannot be removed while other runtimes exist:
designate another first ('onprem runtime designate-config OTHER'). If the
runtime's cluster is gone for good, --forget removes the record only.`,
		Example: `  onprem runtime uninstall edge
  onprem runtime uninstall old --forget`,
		Args: cobra.ExactArgs(1),
	}, &a.AttachmentUninstall, &a.RuntimeCluster, "remove only the record (the runtime's cluster is gone for good)",
		"how long the removal may take", a.Run)
}

func newRuntimeListCmd() *cobra.Command {
	a := &action.RuntimeList{}
	return listCommand(runtimeCmds, &cobra.Command{
		Use:   "list",
		Short: "List the GitOps runtimes and whether they are ready",
		Long: `List the runtimes of the installation (from its state on the platform's
cluster): cluster, namespace, version, which one holds the configuration,
and the readiness of their workloads. A runtime whose cluster cannot be
reached is shown as unreachable, with the reason; that is not an error.`,
		Example: `  onprem runtime list
  onprem runtime list -o json`,
		Args: cobra.NoArgs,
	}, &a.Target, &a.RuntimeTimeout, a.Run, printRuntimeList)
}

func newRuntimeDesignateCmd() *cobra.Command {
	a := &action.RuntimeDesignate{}
	return attachmentCommand(runtimeCmds, &cobra.Command{
		Use:   "designate-config NAME",
		Short: "Make a runtime the one that holds the configuration",
		Long: `Move the designation of the configuration runtime to NAME: the
configuration repository's resources/configuration is rewritten to name it
(one commit, pushed with NAME's Git token, read from its cluster), then the
installation records it. Do this before uninstalling the configuration
runtime while others exist. Then tell the runtimes' charts which one holds
the configuration (their configuration-runtime value) with
'onprem runtime upgrade PREVIOUS NAME', as the output says.`,
		Example: `  onprem runtime designate-config edge`,
		Args:    cobra.ExactArgs(1),
	}, attachmentVerb{
		target: &a.Target, platform: &a.Cluster, cluster: &a.RuntimeCluster, clusterDefault: "as recorded at install",
		lockWait: &a.LockWait, lockLease: &a.LockLease,
		flags: func(f *pflag.FlagSet) { addGitFlags(f, &a.Git) },
	}, oneName(&a.Name), a.Run, func(w io.Writer, r *gitops.DesignateResult) {
		if r.Previous == r.ConfigRuntime {
			fmt.Fprintf(w, "runtime %s already holds the configuration\n", r.ConfigRuntime)
			return
		}
		fmt.Fprintf(w, "runtime %s now holds the configuration (was: %s)\n", r.ConfigRuntime, orNone(r.Previous))
		if r.RepositoryCommit != "" {
			fmt.Fprintf(w, "configuration repository: commit %s\n", r.RepositoryCommit)
		}
		if r.Next != "" {
			fmt.Fprintf(w, "next: %s (tells the runtimes' charts)\n", r.Next)
		}
	}, func(r *gitops.DesignateResult) bool { return r != nil && r.ConfigRuntime != "" })
}

func newGitSourceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "git-source",
		Short: "Add, list and remove a runtime's Git sources",
		Long: `A Git source is a folder of a Git repository that a runtime syncs into its
cluster: an Argo CD Application in the runtime's namespace (automated sync,
prune and self-heal). A runtime has any number of them. The runtime's Git
token must be accepted by the source's repository; it is checked before the
source is created.`,
	}
	add := &action.GitSourceAdd{}
	addCmd := attachmentCommand(runtimeCmds, &cobra.Command{
		Use:   "add NAME --runtime RUNTIME --repo URL",
		Short: "Add a Git source to a runtime",
		Example: `  onprem runtime git-source add apps --runtime codefresh --repo https://git.example.com/team/apps.git --path prod
  onprem runtime git-source add infra --runtime edge --repo https://git.example.com/infra.git --branch release --destination infra`,
		Args: cobra.ExactArgs(1),
	}, attachmentVerb{
		target: &add.Target, platform: &add.Cluster, cluster: &add.RuntimeCluster, clusterDefault: "as recorded at install",
		lockWait: &add.LockWait, lockLease: &add.LockLease,
		flags: func(f *pflag.FlagSet) {
			f.StringVar(&add.Source.Runtime, "runtime", config.DefaultRuntimeName, "the runtime")
			f.StringVar(&add.Source.Repository.URL, "repo", "", "the source repository's https clone URL (required)")
			f.StringVar(&add.Source.Repository.Branch, "branch", "", "branch, tag or commit (default: the repository's HEAD)")
			f.StringVar(&add.Source.Repository.Path, "path", "", "folder inside the repository (default: its root)")
			f.StringVar(&add.Source.Destination, "destination", "", "namespace its objects go to (default: the runtime's)")
			addGitFlags(f, &add.Git)
		},
	}, oneName(&add.Source.Name), add.Run, func(w io.Writer, gs *gitops.GitSource) { printGitSources(w, []gitops.GitSource{*gs}) }, notNil)

	list := &action.GitSourceList{}
	listCmd := attachmentCommand(runtimeCmds, &cobra.Command{
		Use:     "list --runtime RUNTIME",
		Short:   "List a runtime's Git sources with their sync and health",
		Example: `  onprem runtime git-source list --runtime codefresh -o json`,
		Args:    cobra.NoArgs,
	}, attachmentVerb{
		target: &list.Target, platform: &list.Cluster, cluster: &list.RuntimeCluster, clusterDefault: "as recorded at install",
		flags: func(f *pflag.FlagSet) {
			f.StringVar(&list.Runtime, "runtime", config.DefaultRuntimeName, "the runtime")
		},
	}, nil, list.Run, printGitSources, func(r []gitops.GitSource) bool { return r != nil })

	rm := &action.GitSourceRemove{}
	rmCmd := &cobra.Command{
		Use:     "remove NAME --runtime RUNTIME",
		Short:   "Remove a Git source from a runtime",
		Long:    `Remove the Git source NAME (its Argo CD Application; Argo CD prunes what it deployed). The repository is not touched.`,
		Example: `  onprem runtime git-source remove apps --runtime codefresh`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rm.Name = args[0]
			if err := rm.Run(cmd.Context()); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "git source %s removed from runtime %s\n", rm.Name, rm.Runtime)
			return nil
		},
	}
	addRunnerTargetFlags(rmCmd, &rm.Target)
	addPlatformClusterFlags(rmCmd, &rm.Cluster)
	runtimeCmds.addClusterFlags(rmCmd, &rm.RuntimeCluster, "as recorded at install")
	rmCmd.Flags().StringVar(&rm.Runtime, "runtime", config.DefaultRuntimeName, "the runtime")
	addLockFlags(rmCmd, &rm.LockWait, &rm.LockLease)
	refuseNamespaceFlag(rmCmd)

	cmd.AddCommand(addCmd, listCmd, rmCmd)
	return cmd
}

func printRuntimeResults(w io.Writer, rs []gitops.Result) {
	writeTable(w, "RUNTIME\tRESULT\tREVISION\tNAMESPACE\tCLUSTER\tVERSION\tCONFIG\tTIME", rs, func(r gitops.Result) string {
		return fmt.Sprintf("%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s", r.Name, r.Action, r.Revision, r.Namespace, clusterOf(r.Context, r.Server), r.Version, yes(r.ConfigRuntime == r.Name), round(r.Elapsed))
	})
	for _, r := range rs {
		if r.RepositoryCommit != "" {
			fmt.Fprintf(w, "runtime %s: configuration repository updated (commit %s)\n", r.Name, r.RepositoryCommit)
		}
		printFailure(w, "runtime", r.Name, r.Error, r.NotReady)
	}
}

func printRuntimeList(w io.Writer, res *action.RuntimeListResult) {
	if len(res.Runtimes) == 0 {
		fmt.Fprintf(w, "no GitOps runtimes in the installation in namespace %s\n", res.Namespace)
		return
	}
	fmt.Fprintf(w, "configuration repository: %s (held by runtime %s)\n", orNone(res.Repository), orNone(res.ConfigRuntime))
	writeTable(w, "RUNTIME\tCLUSTER\tNAMESPACE\tVERSION\tREVISION\tCONFIG\tWORKLOADS\tSTATUS", res.Runtimes, func(s gitops.Status) string {
		var wl []string
		for _, n := range slices.Sorted(maps.Keys(s.Workloads)) {
			wl = append(wl, n+" "+s.Workloads[n])
		}
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s", s.Name, clusterOf(s.Context, s.Server), s.Namespace, s.Version, s.Revision, yes(s.Config),
			orNone(strings.Join(wl, ", ")), listedStatus(s.Reachable, s.Ready, s.Recorded))
	})
	for _, s := range res.Runtimes {
		printFailure(w, "runtime", s.Name, s.Problem, nil)
	}
}

func printGitSources(w io.Writer, gs []gitops.GitSource) {
	if len(gs) == 0 {
		fmt.Fprintln(w, "no git sources")
		return
	}
	writeTable(w, "SOURCE\tRUNTIME\tREPOSITORY\tBRANCH\tPATH\tDESTINATION\tSYNC\tHEALTH", gs, func(s gitops.GitSource) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", s.Name, s.Runtime, s.URL, orNone(s.Branch), orNone(s.Path), s.Destination, orNone(s.Sync), orNone(s.Health))
	})
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// managedClusterCommand is 'onprem runtime cluster add|remove NAME'
// (words: the command's own) for the change c: --kubeconfig and
// --context (their help: kubeconfigHelp, contextHelp) reach the managed
// cluster, --timeout (timeoutHelp) bounds the change.
func managedClusterCommand[T any](words *cobra.Command, c *action.ManagedClusterChange, kubeconfigHelp, contextHelp, timeoutHelp string, run func(context.Context) (*T, error), table func(io.Writer, *T)) *cobra.Command {
	return attachmentCommand(runtimeCmds, words, attachmentVerb{
		target: &c.Target, cluster: &c.RuntimeCluster, clusterDefault: "as recorded at install",
		lockWait: &c.LockWait, lockLease: &c.LockLease,
		flags: func(f *pflag.FlagSet) {
			addManagedClusterFlags(f, &c.Target, &c.Runtime, &c.External, kubeconfigHelp, contextHelp)
			f.DurationVar(&c.Timeout, "timeout", 0, timeoutHelp)
		},
	}, oneName(&c.Name), run, table, notNil)
}

// addManagedClusterFlags adds the flags of 'runtime cluster add|list|remove':
// --platform-kubeconfig and --platform-context (there, --kubeconfig and
// --context name the cluster to manage: external, nil for list, with
// their help), and --runtime.
func addManagedClusterFlags(f *pflag.FlagSet, t *action.Target, runtime *string, external *config.ClusterRef, kubeconfigHelp, contextHelp string) {
	f.StringVar(&t.Cluster.Kubeconfig, "platform-kubeconfig", "", "kubeconfig of the platform's cluster (default: $KUBECONFIG, then ~/.kube/config)")
	f.StringVar(&t.Cluster.Context, "platform-context", "", "context of the platform's cluster (default: the current context)")
	f.StringVar(runtime, "runtime", config.DefaultRuntimeName, "the runtime")
	if external != nil {
		f.StringVar(&external.Kubeconfig, "kubeconfig", "", kubeconfigHelp)
		f.StringVar(&external.Context, "context", "", contextHelp)
	}
}

func newRuntimeClusterCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Add, list and remove the external clusters a runtime manages",
		Long: `A runtime deploys into its own cluster and into the external clusters
registered with it. Adding one creates, on that cluster, the namespace
onprem-managed with a ServiceAccount argocd-manager-RUNTIME, its token
Secret, and a least-privilege ClusterRole (read what Argo CD watches; write
only the kinds a GitOps deployment applies; no escalate, bind or
impersonate, no CRD or cluster-wide RBAC changes) with its binding; and, in
the runtime's namespace, an Argo CD cluster Secret cluster-NAME holding the
server, the CA and the token (never printed).

Here --kubeconfig and --context name the cluster to manage; the platform's
cluster is --platform-kubeconfig / --platform-context, and the runtime's is
reached as recorded at its install (or --runtime-kubeconfig /
--runtime-context).`,
	}

	add := &action.RuntimeClusterAdd{}
	addCmd := managedClusterCommand(&cobra.Command{
		Use:   "add NAME --runtime RUNTIME --context CONTEXT",
		Short: "Register an external cluster with a runtime",
		Long: `Register the cluster that --context (and/or --kubeconfig) reaches with the
runtime, under NAME. Running it again converges and keeps the token. A NAME
already registered for another server is refused. An unreachable cluster is
named, with exit code 3, before anything is created.`,
		Example: `  onprem runtime cluster add prod-eu --runtime codefresh --context prod-eu
  onprem runtime cluster add edge --runtime codefresh --kubeconfig edge.kubeconfig`,
		Args: cobra.ExactArgs(1),
	}, &add.ManagedClusterChange, "kubeconfig of the cluster to add (default: the platform's kubeconfig)", "context of the cluster to add",
		"how long to wait for the ServiceAccount's token (default 1m)", add.Run, func(w io.Writer, r *managedcluster.Result) {
			verb := "updated"
			if r.Created {
				verb = "registered"
			}
			fmt.Fprintf(w, "cluster %s (%s) %s with runtime %s: ServiceAccount %s, ClusterRole %s\n", r.Name, r.Server, verb, r.Runtime, r.ServiceAccount, r.ClusterRole)
		})

	list := &action.RuntimeClusterList{}
	listCmd := attachmentCommand(runtimeCmds, &cobra.Command{
		Use:   "list --runtime RUNTIME",
		Short: "List a runtime's managed clusters and their health",
		Long: `List the clusters registered with the runtime, each checked with its own
credentials: Healthy, Unreachable, Unauthorized (the token was revoked) or
Forbidden (its permissions were changed).`,
		Example: `  onprem runtime cluster list --runtime codefresh -o json`,
		Args:    cobra.NoArgs,
	}, attachmentVerb{
		target: &list.Target, cluster: &list.RuntimeCluster, clusterDefault: "as recorded at install",
		flags: func(f *pflag.FlagSet) {
			addManagedClusterFlags(f, &list.Target, &list.Runtime, nil, "", "")
			f.DurationVar(&list.Timeout, "timeout", 0, "how long to try each cluster (default 5s)")
		},
	}, nil, list.Run, printManagedClusters, func(r []managedcluster.Status) bool { return r != nil })

	rm := &action.RuntimeClusterRemove{}
	rmCmd := managedClusterCommand(&cobra.Command{
		Use:   "remove NAME --runtime RUNTIME [--context CONTEXT]",
		Short: "Unregister a managed cluster and clean both sides",
		Long: `Remove the runtime's cluster Secret for NAME and, with --context /
--kubeconfig of that cluster, the ServiceAccount, its token and RBAC there.
Without them only the runtime's side is removed, and the output says what
stayed on the external cluster.`,
		Example: `  onprem runtime cluster remove prod-eu --runtime codefresh --context prod-eu`,
		Args:    cobra.ExactArgs(1),
	}, &rm.ManagedClusterChange, "kubeconfig of the managed cluster, to clean its side too", "context of the managed cluster, to clean its side too",
		"how long the removal may take", rm.Run, printManagedRemoval)

	cmd.AddCommand(addCmd, listCmd, rmCmd)
	return cmd
}

func printManagedClusters(w io.Writer, cs []managedcluster.Status) {
	if len(cs) == 0 {
		fmt.Fprintln(w, "no managed clusters")
		return
	}
	writeTable(w, "CLUSTER\tSERVER\tVERSION\tHEALTH\tMESSAGE", cs, func(c managedcluster.Status) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s", c.Name, c.Server, orNone(c.Version), c.Health, orNone(c.Message))
	})
}

func printManagedRemoval(w io.Writer, r *managedcluster.RemoveResult) {
	for _, s := range r.Removed {
		fmt.Fprintf(w, "removed: %s\n", s)
	}
	for _, s := range r.Kept {
		fmt.Fprintf(w, "kept: %s\n", s)
	}
}

// refuseTokenValueFlags adds hidden --git-token and --platform-token flags
// that refuse a token given as a value: it would land in shell history.
func refuseTokenValueFlags(cmd *cobra.Command) {
	for _, f := range []struct{ flag, file, env string }{
		{"git-token", "--git-token-file", gitops.TokenEnv},
		{"platform-token", "--platform-token-file", gitops.PlatformTokenEnv},
	} {
		var v string
		cmd.Flags().StringVar(&v, f.flag, "", "")
		_ = cmd.Flags().MarkHidden(f.flag)
		cmd.PreRunE = chain(cmd.PreRunE, func(c *cobra.Command, _ []string) error {
			if c.Flags().Changed(f.flag) {
				return inputError{fmt.Errorf("--%s: a token is never given as a value (it would land in shell history): give a file with %s, or the environment variable %s", f.flag, f.file, f.env)}
			}
			return nil
		})
	}
}
