// Package podexec runs a command in a container of a pod through the API
// server (what `kubectl exec -i` does) and streams its standard input and
// output: backups and restores move database dumps this way, so that no
// storage is needed in the cluster and nothing listens on the network.
package podexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// Target is a container of a pod.
type Target struct {
	Namespace, Pod, Container string
}

func (t Target) String() string {
	return t.Namespace + "/" + t.Pod + " (container " + t.Container + ")"
}

// Executor runs cmd in the target container, feeding it stdin (nil: none)
// and copying its standard output to stdout.
type Executor interface {
	Exec(ctx context.Context, t Target, cmd []string, stdin io.Reader, stdout io.Writer) error
}

// ExitError: the command ran and exited with a non-zero code.
type ExitError struct {
	Target Target
	Cmd    string
	Code   int
	// Stderr is the end of the command's standard error.
	Stderr string
}

func (e *ExitError) Error() string {
	msg := fmt.Sprintf("%s in %s exited with code %d", e.Cmd, e.Target, e.Code)
	if s := strings.TrimSpace(e.Stderr); s != "" {
		msg += ": " + s
	}
	return msg
}

// maxStderr is how much of a command's standard error is kept.
const maxStderr = 4 << 10

// Kube execs through the API server: WebSocket first (the protocol whose
// version 5 closes the command's standard input at its end), SPDY when the
// server does not upgrade to WebSocket.
type Kube struct {
	Config *rest.Config
	Client kubernetes.Interface
}

// Exec implements Executor. A command the container runtime failed to
// start (containerd's "failed to load task" of a node too busy to answer
// in time) is tried again, up to startAttempts times: it never ran, so
// nothing it would have done is done twice. What the failed attempt
// read of stdin is fed again, as long as it was no more than replayMax.
func (k Kube) Exec(ctx context.Context, t Target, cmd []string, stdin io.Reader, stdout io.Writer) error {
	return retryStart(ctx, describe(cmd)+" in "+t.String(), stdin, func(in io.Reader) error {
		return k.exec(ctx, t, cmd, in, stdout)
	})
}

func (k Kube) exec(ctx context.Context, t Target, cmd []string, stdin io.Reader, stdout io.Writer) error {
	req := k.Client.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.Namespace).Name(t.Pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: t.Container,
			Command:   cmd,
			Stdin:     stdin != nil,
			Stdout:    true,
			Stderr:    true,
		}, scheme.ParameterCodec)
	cfg := rest.CopyConfig(k.Config)
	cfg.Timeout = 0 // a dump may stream for hours; ctx bounds it
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		return fmt.Errorf("exec in %s: %w", t, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		return fmt.Errorf("exec in %s: %w", t, err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return fmt.Errorf("exec in %s: %w", t, err)
	}
	stderr := &tailBuffer{max: maxStderr}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	if err == nil {
		return nil
	}
	var ce utilexec.CodeExitError
	if errors.As(err, &ce) {
		return &ExitError{Target: t, Cmd: describe(cmd), Code: ce.Code, Stderr: stderr.String()}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("exec in %s: %w", t, ctx.Err())
	}
	msg := fmt.Sprintf("exec in %s: %v", t, err)
	if s := strings.TrimSpace(stderr.String()); s != "" {
		msg += " (stderr: " + s + ")"
	}
	if notStarted(err) {
		return &StartError{msg: msg}
	}
	return errors.New(msg)
}

// describe names a command for messages: the program, and the script's
// first line for sh -c.
func describe(cmd []string) string {
	if len(cmd) >= 3 && cmd[1] == "-c" {
		return cmd[0] + " -c script"
	}
	if len(cmd) > 0 {
		return cmd[0]
	}
	return "command"
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}
