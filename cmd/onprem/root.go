package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/quote"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/version"
)

// Exit codes, documented in the README.
const (
	exitOK      = 0
	exitFailure = 1 // the operation failed
	exitInput   = 2 // bad configuration, flags or arguments: nothing was done
)

// inputError marks errors in what the operator gave (exit code 2).
type inputError struct{ err error }

func (e inputError) Error() string { return e.err.Error() }
func (e inputError) Unwrap() error { return e.err }

// run executes the command line and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, quote.Message(formatError(err)))
	return exitCode(err)
}

func exitCode(err error) int {
	var ce config.Errors
	var uv *release.UnknownVersionError
	var ie inputError
	var ae *action.InputError
	var ue *kube.UnreachableError
	var au *kube.AuthError
	switch {
	case errors.As(err, &ce), errors.As(err, &uv), errors.As(err, &ie), errors.As(err, &ae):
		return exitInput
	case errors.As(err, &ue), errors.As(err, &au):
		return exitCluster
	}
	return exitFailure
}

func formatError(err error) string {
	var ce config.Errors
	if errors.As(err, &ce) {
		n := len(ce)
		noun := "problem"
		if n != 1 {
			noun = "problems"
		}
		return fmt.Sprintf("Error: the configuration has %d %s:\n%s", n, noun, indent(ce.Error()))
	}
	return "Error: " + err.Error()
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = "  " + l
	}
	return strings.Join(lines, "\n")
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	var logLevel string
	root := &cobra.Command{
		Use:   "onprem",
		Short: "Install and run the CI/CD platform on your own Kubernetes clusters",
		Long: `onprem installs a complete CI/CD platform (ingress, MongoDB, Redis,
RabbitMQ, PostgreSQL, the pipelines and GitOps services, runners, GitOps
runtimes) on your own Kubernetes clusters and runs its whole life.

It is declarative: describe the installation in onprem.yaml, and onprem
makes the cluster match. Start with:

  onprem config init            # write a commented onprem.yaml
  onprem config validate        # check it
  onprem render                 # see every object it would create

  onprem install                # make the cluster match it
  onprem status                 # what is installed, and how it is doing

Exit codes: 0 success, 1 the operation failed, 2 bad configuration or
arguments (nothing was changed), 3 the cluster is unreachable or refused
access.`,
		Version:       version.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return inputError{fmt.Errorf("--log-level %s: use debug, info, warn or error", quote.Value(logLevel))}
			}
			slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: lvl})))
			return nil
		},
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return inputError{err} })
	root.PersistentFlags().StringVar(&logLevel, "log-level", "warn", "log detail on stderr: debug, info, warn or error")
	root.AddCommand(newConfigCmd(), newRenderCmd(), newVersionsCmd(), newPreflightCmd(), newInstallCmd(), newStatusCmd(), newDiffCmd(), newUninstallCmd(), newUpgradeCmd(), newRollbackCmd(), newAdoptCmd(), newBundleCmd(), newRunnerCmd(), newRuntimeCmd(), newLocalCmd(), newBackupCmd(), newRestoreCmd(), newSupportBundleCmd(), newDoctorCmd(), newRotateCmd(), newConsoleCmd(), newSBOMCmd())
	// Cobra adds these two when it runs; added now, they get the same
	// strictness as every other group below.
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	strictHelp(root)
	strictGroups(root)
	argsAreInput(root)
	return root
}

// strictGroups makes every command that only groups others (config,
// backup, runner, ..., and onprem itself) print its help when called
// alone, and refuse an unknown subcommand as bad input (exit 2) with the
// closest command. Cobra, left alone, prints the help and exits 0
// ('onprem backup creat' succeeded), and at the top fails with exit 1.
func strictGroups(c *cobra.Command) {
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return nil
			}
			return unknownCommand(cmd, args[0])
		}
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
	for _, sub := range c.Commands() {
		strictGroups(sub)
	}
}

// unknownCommand is the input error for a word that names no subcommand
// of cmd.
func unknownCommand(cmd *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %s for %q", quote.Value(word), cmd.CommandPath())
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default
	}
	if s := cmd.SuggestionsFor(word); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return inputError{fmt.Errorf("%s ('%s --help' lists the commands)", msg, cmd.CommandPath())}
}

// strictHelp makes 'onprem help TOPIC' refuse a topic that names no
// command (exit 2), as the command itself would; cobra prints the usage
// and exits 0.
func strictHelp(root *cobra.Command) {
	for _, h := range root.Commands() {
		if h.Name() != "help" || h.Run == nil {
			continue
		}
		show := h.Run
		h.Run = nil
		h.RunE = func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil {
				return inputError{err}
			}
			if len(rest) > 0 {
				return unknownCommand(cmd, rest[0])
			}
			show(c, args)
			return nil
		}
	}
}

// argsAreInput makes every command's argument check an input error, so
// that a wrong argument exits 2 ("bad arguments, nothing was changed")
// like a wrong flag, not 1 as cobra's own errors would.
func argsAreInput(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			err := check(cmd, args)
			var ie inputError
			if err == nil || errors.As(err, &ie) {
				return err
			}
			return inputError{err}
		}
	}
	for _, sub := range c.Commands() {
		argsAreInput(sub)
	}
}

// addSourceFlags adds the flags that say where the configuration comes
// from and override it (flags > ONPREM_* environment > file > defaults).
func addSourceFlags(cmd *cobra.Command, src *action.Source) {
	f := cmd.Flags()
	f.StringVarP(&src.ConfigPath, "config", "c", "onprem.yaml", "the installation's configuration file")
	o := &src.Overrides
	strFlag := func(target **string, name, usage string) {
		var v string
		f.StringVar(&v, name, "", usage)
		cmd.PreRunE = chain(cmd.PreRunE, func(c *cobra.Command, _ []string) error {
			if c.Flags().Changed(name) {
				*target = &v
			}
			return nil
		})
	}
	strFlag(&o.Version, "platform-version", "override spec.version (ONPREM_VERSION)")
	strFlag(&o.Namespace, "namespace", "override spec.namespace (ONPREM_NAMESPACE)")
	strFlag(&o.Domain, "domain", "override spec.domain (ONPREM_DOMAIN)")
	strFlag(&o.Profile, "profile", "override spec.profile: small, medium or large (ONPREM_PROFILE)")
	strFlag(&o.RegistryHost, "registry", "override spec.registry.host (ONPREM_REGISTRY_HOST)")
	strFlag(&o.RegistryPathPrefix, "registry-prefix", "override spec.registry.pathPrefix (ONPREM_REGISTRY_PATH_PREFIX)")
}

// addBundleFlags adds --bundle and --public-key: install, render and
// upgrade from air-gapped bundles.
func addBundleFlags(cmd *cobra.Command, src *action.Source) {
	cmd.Flags().StringArrayVar(&src.Bundles, "bundle", nil, "use this air-gapped bundle's release, charts and manifests ('onprem bundle create'); its images are pulled from spec.registry by digest (repeatable: one per version of an upgrade path)")
	addTrustFlags(cmd, &src.PublicKeys, &src.AllowUnsigned)
}

// addTrustFlags adds --public-key and --allow-unsigned to a command that
// takes bundles.
func addTrustFlags(cmd *cobra.Command, keys *[]string, allow *bool) {
	cmd.Flags().StringArrayVar(keys, "public-key", nil, "trust bundles signed with this public key (bundle.pub from 'onprem bundle keygen'), besides the keys onprem's releases name and spec.trust (repeatable)")
	cmd.Flags().BoolVar(allow, "allow-unsigned", false, "accept a bundle that is unsigned or signed by a key that is not trusted: a warning, recorded in the history")
}

func chain(a, b func(*cobra.Command, []string) error) func(*cobra.Command, []string) error {
	if a == nil {
		return b
	}
	return func(c *cobra.Command, args []string) error {
		if err := a(c, args); err != nil {
			return err
		}
		return b(c, args)
	}
}
