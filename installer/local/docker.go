package local

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// dockerCommand is the docker CLI that kind drives (a seam for tests).
var dockerCommand = "docker"

// dockerTimeout bounds the check that docker answers.
const dockerTimeout = 20 * time.Second

// DockerError: docker, which runs the kind nodes, is missing or its daemon
// does not answer. Nothing was changed.
type DockerError struct {
	// Missing is true when there is no docker command at all.
	Missing bool
	// Detail is what docker said.
	Detail string
	Err    error
}

func (e *DockerError) Error() string {
	if e.Missing {
		return fmt.Sprintf("docker: %v: local clusters run their nodes as docker containers: install Docker "+
			"(https://docs.docker.com/engine/install/, or Debian's docker.io package) and run again", e.Err)
	}
	msg := "docker does not answer"
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg + ": start the Docker daemon (sudo systemctl start docker, or open Docker Desktop), check that " +
		"'docker info' works for this user (DOCKER_HOST, membership of the docker group), and run again; " +
		"on a machine with no registry, 'make demo' starts one for you"
}

func (e *DockerError) Unwrap() error { return e.Err }

// dockerInfo checks that docker answers and returns the cgroup version its
// daemon runs containers with ("1" or "2").
func dockerInfo(ctx context.Context) (cgroupVersion string, err error) {
	path, err := exec.LookPath(dockerCommand)
	if err != nil {
		return "", &DockerError{Missing: true, Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, dockerTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "info", "--format", "{{.CgroupVersion}}")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return "", &DockerError{Detail: fmt.Sprintf("'docker info' took more than %s", dockerTimeout), Err: err}
		}
		return "", &DockerError{Detail: firstLine(stderr.String(), stdout.String()), Err: err}
	}
	return strings.TrimSpace(stdout.String()), nil
}

// firstLine returns the first non-empty line of the texts, trimmed.
func firstLine(texts ...string) string {
	for _, t := range texts {
		for l := range strings.SplitSeq(t, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				return l
			}
		}
	}
	return ""
}
