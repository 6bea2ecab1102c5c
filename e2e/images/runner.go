//go:build linux

package images

import (
	"context"
	"fmt"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

const (
	runnerStandIn = mainModule + "/e2e/images/cmd/runner-standin"
	// runnerUID is the user of moby/buildkit's rootless image, which the
	// runner chart's engine runs as (its agent runs as 10001 by its own
	// securityContext).
	runnerUID = 1000
	// runnerEnginePort is the runner chart's default engine.port.
	runnerEnginePort = 1234
)

// RunnerRef is the reference of the runner's image before it is tagged as
// the release's runner-agent and buildkit (ForRelease).
const RunnerRef = "onprem.dev/e2e/runner:dev"

func (b *builder) runnerStamp(ctx context.Context) (string, error) {
	gs, err := b.goStamp(ctx, runnerStandIn)
	if err != nil {
		return "", err
	}
	return hashOf(layoutVersion, "runner", gs, fmt.Sprint(runnerUID)), nil
}

// runnerImage: one image for both of the runner chart's containers
// (cmd/runner-standin). The entrypoint runner-agent is the agent when it
// gets no arguments and buildkitd when it gets flags: the engine's
// Deployment sets only args (--config ... --oci-worker-no-process-sandbox)
// and they follow the entrypoint. buildkitd and buildctl (the engine's
// readiness probe) are links to the same binary, which picks its role by
// the name it runs under. The user and folders are rootless BuildKit's:
// user 1000 with its home, where the chart mounts the engine's cache,
// temporary files and runtime folder.
func (b *builder) runnerImage(ctx context.Context, scratch string) (v1.Image, string, error) {
	bin := filepath.Join(scratch, "runner-agent")
	if err := b.goBuild(ctx, "runner", runnerStandIn, bin); err != nil {
		return nil, "", err
	}
	const agent = "/usr/local/bin/runner-agent"
	owned := func(p string) file {
		return file{path: p, dir: true, mode: 0o755, uid: runnerUID, gid: runnerUID}
	}
	layer, err := filesLayer([]file{
		{path: agent, src: bin, mode: 0o755},
		{path: "/usr/bin/buildkitd", link: agent},
		{path: "/usr/bin/buildctl", link: agent},
		{path: "/etc/passwd", data: passwd("user", runnerUID, "/home/user"), mode: 0o644},
		{path: "/etc/group", data: group("user", runnerUID), mode: 0o644},
		owned("/home/user"),
		owned("/home/user/.local"),
		owned("/home/user/.local/share"),
		owned("/home/user/.local/share/buildkit"),
		owned("/home/user/.local/tmp"),
		{path: "/run/user/1000", dir: true, mode: 0o700, uid: runnerUID, gid: runnerUID},
		{path: "/tmp", dir: true, mode: 0o1777},
	})
	if err != nil {
		return nil, "", fmt.Errorf("runner: %w", err)
	}
	img, err := assemble([]v1.Layer{layer}, v1.Config{
		Entrypoint: []string{"runner-agent"},
		Env:        []string{"PATH=" + basePath},
		User:       fmt.Sprintf("%d:%d", runnerUID, runnerUID),
		WorkingDir: "/home/user",
		// The agent's http port and the engine's.
		ExposedPorts: ports(8080, runnerEnginePort),
	})
	return img, "onprem runner stand-in (" + runnerStandIn + "): agent, buildkitd and buildctl speaking a line protocol, no builds", err
}
