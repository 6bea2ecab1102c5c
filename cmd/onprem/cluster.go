package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/preflight"
)

// exitCluster: the cluster could not be reached or refused us.
const exitCluster = 3

// addClusterFlags adds --kubeconfig and --context.
func addClusterFlags(cmd *cobra.Command, o *kube.Options) {
	cmd.Flags().StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	cmd.Flags().StringVar(&o.Context, "context", "", "kubeconfig context (default: the current context)")
}

// isTerminal reports whether w is an interactive terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progress returns the reporter for stderr: a live table on a terminal,
// one line per change otherwise; stop finishes it.
func progress(stderr io.Writer) (apply.Reporter, func()) {
	if isTerminal(stderr) {
		l := apply.NewLiveReporter(stderr)
		return l, l.Stop
	}
	return apply.NewLineReporter(stderr), func() {}
}

// confirm asks a yes/no question on a terminal; false when not interactive.
func confirm(in io.Reader, out io.Writer, question string) bool {
	if !isTerminal(out) {
		return false
	}
	fmt.Fprintf(out, "%s [y/N] ", question)
	line, _ := bufio.NewReader(in).ReadString('\n')
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes"
}

func round(d time.Duration) time.Duration { return d.Round(100 * time.Millisecond) }

// addTargetFlags adds the flags of commands that work on an installation
// without its full configuration (status, uninstall, rollback).
func addTargetFlags(cmd *cobra.Command, t *action.Target) {
	cmd.Flags().StringVar(&t.Namespace, "namespace", "", "platform namespace (default: from -c if the file exists, else onprem)")
	cmd.Flags().StringVarP(&t.ConfigPath, "config", "c", "onprem.yaml", "configuration file, read only for its namespace")
}

// addLockFlags adds the flags of the installation's lock.
func addLockFlags(cmd *cobra.Command, wait, lease *time.Duration) {
	cmd.Flags().DurationVar(wait, "lock-wait", 2*time.Minute, "how long to wait for another onprem working on this installation")
	cmd.Flags().DurationVar(lease, "lock-lease", 30*time.Second, "how long the lock outlives an onprem that was killed; after that another onprem takes it over")
}

// printPreflightSummary is the install and upgrade commands' view of the
// preflight report: every finding when one failed or warned, else a count.
func printPreflightSummary(w io.Writer) func(*preflight.Report) {
	return func(r *preflight.Report) {
		if r.Failed() || hasWarnings(r) {
			printPreflight(w, r)
		} else {
			fmt.Fprintf(w, "preflight: %d checks passed\n", len(r.Findings)-len(r.Skipped))
		}
	}
}
