package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/kube"
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
