package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

// defaultBuildkitHost is buildctl's address when BUILDKIT_HOST is unset.
const defaultBuildkitHost = "unix:///run/buildkit/buildkitd.sock"

// buildctlTimeout stays under the engine's readiness probe's 5 s.
const buildctlTimeout = 3 * time.Second

// buildctlMain runs `buildctl debug workers` against BUILDKIT_HOST: exit 0
// and the worker listed when the engine answers, 1 with the reason when it
// does not, 2 for any other command line.
func buildctlMain(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) != 2 || args[0] != "debug" || args[1] != "workers" {
		fmt.Fprintf(stderr, "buildctl (e2e stand-in): unsupported command %q: only `buildctl debug workers` (the engine's readiness probe) is known\n", strings.Join(args, " "))
		return 2
	}
	host := getenv("BUILDKIT_HOST")
	if host == "" {
		host = defaultBuildkitHost
	}
	id, err := queryWorkers(ctx, host, buildctlTimeout)
	if err != nil {
		fmt.Fprintf(stderr, "buildctl (e2e stand-in): %v\n", err)
		return 1
	}
	// buildctl's table, with the one worker.
	fmt.Fprintf(stdout, "ID\t\t\t\tPLATFORMS\n%s\tlinux/amd64\n", id)
	return 0
}
