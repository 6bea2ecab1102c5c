package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/output"
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

// attachmentVerb is what one command of a kind of attachment sets in its
// action, as pointers to the action's fields: the parts that every runner
// and runtime command has (which platform, which clusters, how long, the
// lock), so that one builder (attachmentCommand) adds their flags.
type attachmentVerb struct {
	// source is the platform's configuration (install, upgrade: -c,
	// --platform-namespace, --bundle, the trust flags); target only finds
	// the platform (the other verbs: -c, --platform-namespace). One of
	// them is set.
	source *action.Source
	target *action.Target
	// platform is the platform's cluster (--kubeconfig, --context); nil
	// when the command adds its own flags for it.
	platform *kube.Options
	// cluster is the attachment's cluster (--KIND-kubeconfig,
	// --KIND-context), by default the one clusterDefault says; nil: the
	// command has none.
	cluster        *config.ClusterRef
	clusterDefault string
	// timeout, with timeoutHelp, is --timeout with its default
	// apply.DefaultTimeout; nil: the command has its own or none.
	timeout     *time.Duration
	timeoutHelp string
	// lockWait and lockLease are the lock's flags; nil: the command only
	// reads (no lock).
	lockWait, lockLease *time.Duration
	// reporter receives the progress shown on stderr; nil: none.
	reporter *apply.Reporter
	// flags adds the command's own flags.
	flags func(*pflag.FlagSet)
}

// attachmentCommand completes cmd (its words: Use, Short, Long, Example,
// Args) into a command of kind k: it adds v's flags, -o and the refusal
// of the ambiguous --namespace, and its RunE gives the action its
// arguments (args, nil: none), runs it (run, with progress on stderr
// when v has a reporter) and prints its result (table, or -o's format;
// present says whether there is one to print, even on failure).
func attachmentCommand[T any](k attachmentCmds, cmd *cobra.Command, v attachmentVerb, args func([]string), run func(context.Context) (T, error), table func(io.Writer, T), present func(T) bool) *cobra.Command {
	var format string
	cmd.RunE = func(c *cobra.Command, a []string) error {
		if args != nil {
			args(a)
		}
		var setReporter func(apply.Reporter)
		if v.reporter != nil {
			setReporter = func(r apply.Reporter) { *v.reporter = r }
		}
		return runThenPrint(c, format, setReporter, run, table, present)
	}
	switch {
	case v.source != nil:
		addRunnerSourceFlags(cmd, v.source)
	case v.target != nil:
		addRunnerTargetFlags(cmd, v.target)
	}
	if v.platform != nil {
		addPlatformClusterFlags(cmd, v.platform)
	}
	if v.cluster != nil {
		k.addClusterFlags(cmd, v.cluster, v.clusterDefault)
	}
	if v.flags != nil {
		v.flags(cmd.Flags())
	}
	if v.timeout != nil {
		cmd.Flags().DurationVar(v.timeout, "timeout", apply.DefaultTimeout, v.timeoutHelp)
	}
	// A command that takes the lock changes something and prints its
	// result; one that only reads prints its output.
	if v.lockWait != nil {
		addLockFlags(cmd, v.lockWait, v.lockLease)
		cmd.Flags().StringVarP(&format, "output", "o", output.Table, "result on stdout: table, json or yaml")
	} else {
		cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	}
	refuseNamespaceFlag(cmd)
	return cmd
}

// runThenPrint runs an action with progress on stderr and writes its
// result (even a partial one, on failure) in the chosen format.
func runThenPrint[T any](cmd *cobra.Command, format string, setReporter func(apply.Reporter), run func(context.Context) (T, error), table func(io.Writer, T), present func(T) bool) error {
	if err := checkFormat(format); err != nil {
		return err
	}
	stop := func() {}
	if setReporter != nil {
		rep, s := progress(cmd.ErrOrStderr())
		setReporter(rep)
		stop = s
	}
	res, err := run(cmd.Context())
	stop()
	if present(res) {
		if werr := output.Write(cmd.OutOrStdout(), format, res, func(w io.Writer) { table(w, res) }); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

func notNil[T any](p *T) bool { return p != nil }

// printRemoval prints what an uninstall of a runner or runtime removed
// and what it kept.
func printRemoval(w io.Writer, res *attachment.Removal) {
	for _, r := range res.Removed {
		fmt.Fprintf(w, "removed: %s\n", r)
	}
	for _, k := range res.Kept {
		fmt.Fprintf(w, "kept: %s\n", k)
	}
}

// oneName is the args of a command that acts on one attachment: it sets
// *name to the first argument (the command's Args checked there is one).
func oneName(name *string) func([]string) {
	return func(args []string) { *name = args[0] }
}

// listCommand is 'onprem KIND list' of kind k (words: the command's
// own): target finds the platform, timeout is --KIND-timeout (how long
// each one's cluster is tried).
func listCommand[T any](k attachmentCmds, words *cobra.Command, target *action.Target, timeout *time.Duration, run func(context.Context) (*T, error), table func(io.Writer, *T)) *cobra.Command {
	return attachmentCommand(k, words, attachmentVerb{
		target: target, platform: &target.Cluster,
		flags: func(f *pflag.FlagSet) {
			f.DurationVar(timeout, k.name+"-timeout", 0, "how long to try each "+k.name+"'s cluster (default 5s)")
		},
	}, nil, run, table, notNil)
}

// uninstallCommand is 'onprem KIND uninstall NAME' of kind k (words: the
// command's own): a, with the kind's cluster override cluster, is its
// action; forgetHelp says what --forget removes, timeoutHelp what
// --timeout bounds.
func uninstallCommand(k attachmentCmds, words *cobra.Command, a *action.AttachmentUninstall, cluster *config.ClusterRef, forgetHelp, timeoutHelp string, run func(context.Context) (*attachment.Removal, error)) *cobra.Command {
	return attachmentCommand(k, words, attachmentVerb{
		target: &a.Target, platform: &a.Cluster, cluster: cluster, clusterDefault: "as recorded at install",
		timeout: &a.Timeout, timeoutHelp: timeoutHelp,
		lockWait: &a.LockWait, lockLease: &a.LockLease, reporter: &a.Reporter,
		flags: func(f *pflag.FlagSet) { f.BoolVar(&a.Forget, "forget", false, forgetHelp) },
	}, oneName(&a.Name), run, printRemoval, notNil)
}

// upgradeCommand is 'onprem KIND upgrade NAME... | --all' of kind k
// (words: the command's own): a, with the kind's cluster override
// cluster, is its action; flags adds the kind's own flags (nil: none);
// table prints the results.
func upgradeCommand[T any](k attachmentCmds, words *cobra.Command, a *action.AttachmentUpgrade, cluster *config.ClusterRef, flags func(*pflag.FlagSet), run func(context.Context) ([]T, error), table func(io.Writer, []T)) *cobra.Command {
	return attachmentCommand(k, words, attachmentVerb{
		source: &a.Source, platform: &a.Cluster, cluster: cluster, clusterDefault: "as recorded at install",
		timeout: &a.Timeout, timeoutHelp: "how long each " + k.name + " may take to become ready",
		lockWait: &a.LockWait, lockLease: &a.LockLease, reporter: &a.Reporter,
		flags: func(f *pflag.FlagSet) {
			f.BoolVar(&a.All, "all", false, "upgrade every "+k.name+" of the installation")
			if flags != nil {
				flags(f)
			}
		},
	}, func(args []string) { a.Names = args }, run, table, func(r []T) bool { return r != nil })
}

// printFailure prints, below a table of results, why the KIND name failed
// (err; nothing when it did not) and what was not ready then.
func printFailure(w io.Writer, kind, name, err string, notReady []string) {
	if err == "" {
		return
	}
	fmt.Fprintf(w, "%s %s: %s\n", kind, name, err)
	for _, n := range notReady {
		fmt.Fprintf(w, "  %s\n", n)
	}
}

// listedStatus is an attachment's STATUS in a listing: ready, unreachable
// or not ready, and how its last install ended (recorded) when that was
// not "deployed".
func listedStatus(reachable, ready bool, recorded string) string {
	status := "ready"
	switch {
	case !reachable:
		status = "unreachable"
	case !ready:
		status = "not ready"
	}
	if recorded != "" && recorded != "deployed" {
		status += " (last install: " + recorded + ")"
	}
	return status
}
