// Command runner-standin stands in for the build runner's two images in
// the e2e "runner" image (e2e/images, runner.go): the runner agent
// (images.agent of charts/runner) and rootless BuildKit (images.engine).
// No runner agent build and no BuildKit image are reachable offline, and
// the kind e2e only needs the runner's pods to start, pass their probes
// and stop under the chart's contract; this one static binary does that.
//
// Its role is chosen by the name it runs under (the base name of argv[0]):
//
//   - buildkitd (the image's /usr/bin/buildkitd): the engine. It takes
//     the chart's arguments (--config FILE --oci-worker-no-process-sandbox,
//     and --addr as buildkitd does), reads [grpc] address from the config
//     file, listens on each address and answers the line protocol of
//     proto.go. It runs no builds.
//   - buildctl (/usr/bin/buildctl): the engine's readiness probe; only
//     `buildctl debug workers`, against BUILDKIT_HOST.
//   - anything else (runner-agent, the image's entrypoint): the agent. It
//     checks the chart's environment and serves /healthz, /readyz (ready
//     when the engine at BUILDKIT_HOST answers) and /version on PORT. It
//     registers with no platform.
//
// The engine's Deployment sets only args, so the image's entrypoint
// (runner-agent) receives buildkitd's flags: runner-agent with arguments
// whose first one is a flag acts as buildkitd, and `runner-agent buildkitd
// ...` or `runner-agent buildctl ...` pick a role explicitly. The agent
// itself takes no arguments.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
)

// Role names, as the binary is installed or called.
const (
	roleAgent     = "runner-agent"
	roleBuildkitd = "buildkitd"
	roleBuildctl  = "buildctl"
)

func main() {
	// SIGTERM is how the kubelet stops the containers; SIGINT is for a
	// terminal.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(dispatch(ctx, os.Args, os.Getenv, os.Stdout, os.Stderr))
}

// dispatch runs the role that argv asks for and returns the exit code.
func dispatch(ctx context.Context, argv []string, getenv func(string) string, stdout, stderr io.Writer) int {
	role, args := roleOf(argv)
	switch role {
	case roleBuildkitd:
		return buildkitdMain(ctx, args, getenv, stderr)
	case roleBuildctl:
		return buildctlMain(ctx, args, getenv, stdout, stderr)
	}
	if len(args) > 0 {
		fmt.Fprintf(stderr, "%s (e2e stand-in): unexpected arguments %q: the agent takes none; "+
			"flags (as the engine's chart passes them) run buildkitd, or name a role: %s buildkitd|buildctl ARGS...\n",
			roleAgent, strings.Join(args, " "), roleAgent)
		return 2
	}
	return agentMain(ctx, getenv, stderr)
}

// roleOf picks the role and its arguments from argv: by the program's
// name, then (for the entrypoint) by its first argument.
func roleOf(argv []string) (string, []string) {
	if len(argv) == 0 {
		// A process may be started with no argv at all: be the agent.
		return roleAgent, nil
	}
	switch base := filepath.Base(argv[0]); base {
	case roleBuildkitd, roleBuildctl:
		return base, argv[1:]
	}
	args := argv[1:]
	if len(args) > 0 {
		switch {
		case args[0] == roleBuildkitd || args[0] == roleBuildctl:
			return args[0], args[1:]
		case strings.HasPrefix(args[0], "-"):
			// The engine container: the chart sets args only, which
			// follow the image's entrypoint.
			return roleBuildkitd, args
		}
	}
	return roleAgent, args
}
