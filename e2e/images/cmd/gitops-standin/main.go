// Command gitops-standin plays every container of the real GitOps runtime
// chart (the published gitops-runtime package, installed by the kind
// end-to-end ring) under the chart's own commands and arguments, so that
// the chart's hooks, Secrets, probes, pull secrets and Pod Security
// settings are exercised for real without the upstream images, which the
// ring cannot pull.
//
// It picks its role by the name it runs under and its arguments:
//
//   - argocd admin redis-initial-password (the chart's pre-install hook):
//     creates the Secret argocd-redis (key auth) when it is missing, as
//     Argo CD's command does; the Redis and Argo CD pods read it;
//   - cf helm validate / cf account validate-usage (the installer's hook
//     Jobs): reads the values file the hook mounts and requires the
//     runtime's name and platform URL in it (the real command also asks
//     the platform, which the ring's stand-in platform does not answer);
//   - init.sh (app-proxy's init container): nothing to prepare;
//   - anything else is a server: it answers HTTP on every port the chart's
//     containers declare or probe, and first creates what the real
//     component creates at start and other pods read: argocd-server the
//     Secret argocd-initial-admin-secret, app-proxy the runtime's
//     codefresh-token and argocd-token (the real app-proxy gets its token
//     by registering with the platform). A Redis invocation must have been
//     given its password (--requirepass), from argocd-redis.
//
// Secrets are created with the pod's service account (the chart's own
// RBAC), through the API server's REST API.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, filepath.Base(os.Args[0]), os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "gitops-standin: error: %v\n", err)
		os.Exit(1)
	}
}

// run plays the role that name (the program's base name) and args ask
// for.
func run(ctx context.Context, name string, args []string) error {
	switch {
	case name == "argocd" && len(args) >= 2 && args[0] == "admin" && args[1] == "redis-initial-password":
		return redisInitialPassword(ctx)
	case name == "cf":
		return cf(args)
	case name == "init.sh":
		logf("app-proxy init: nothing to prepare")
		return nil
	}
	return serve(ctx, name, args, os.Getenv)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gitops-standin: "+format+"\n", args...)
}
