// Command onprem installs and runs the CI/CD platform on your own
// Kubernetes clusters. This package only wires flags to the library in
// installer/; see installer/action for the behaviour.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
