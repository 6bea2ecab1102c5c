package podexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// StartError: the container runtime did not start the command, so it did
// not run at all (and can be run again without doing anything twice).
type StartError struct{ msg string }

func (e *StartError) Error() string { return e.msg }

// startFailures are containerd's messages (its CRI exec, as the kubelet
// relays them) for an exec whose process was never started: the task not
// loaded, the process not created, or not started.
var startFailures = []string{
	"failed to exec in container: failed to load task",
	"failed to exec in container: failed to create exec",
	"failed to exec in container: failed to start exec",
}

func notStarted(err error) bool {
	msg := err.Error()
	for _, s := range startFailures {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

const (
	// startAttempts bounds the tries of a command the runtime did not
	// start.
	startAttempts = 5
	// replayMax is how much of stdin a failed start may have taken and
	// still be fed again: the stream reads ahead of a command that has
	// not started only as far as the connection buffers.
	replayMax = 8 << 20
)

// startBackoff is the wait before the second try; it doubles each time.
var startBackoff = time.Second

// retryStart runs attempt until it succeeds, fails with anything but a
// StartError, or has been tried startAttempts times. Each try reads stdin
// from where the first one began.
func retryStart(ctx context.Context, what string, stdin io.Reader, attempt func(io.Reader) error) error {
	var replay []byte // what the failed tries took of stdin, fed first
	wait := startBackoff
	for n := 1; ; n++ {
		var in io.Reader
		var rec *recorder
		if stdin != nil {
			rec = &recorder{r: io.MultiReader(bytes.NewReader(replay), stdin), max: replayMax}
			in = rec
		}
		err := attempt(in)
		var se *StartError
		if err == nil || !errors.As(err, &se) {
			if rec != nil {
				rec.detach()
			}
			return err
		}
		if rec != nil {
			taken, ok := rec.detach()
			if !ok {
				return fmt.Errorf("%w (not tried again: more than %d MiB of its input was already sent)", err, replayMax>>20)
			}
			replay = taken
		}
		if n == startAttempts {
			return fmt.Errorf("%w (the container runtime did not start it in %d tries: its node is likely overloaded or its runtime stuck; 'kubectl describe node' and the node's containerd log say which; run the command again once it answers)", err, n)
		}
		slog.Warn("the container runtime did not start a command; trying it again", "command", what, "try", n+1, "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (not tried again: %w)", err, context.Cause(ctx))
		case <-time.After(wait):
		}
		wait *= 2
	}
}

// recorder passes reads through and keeps what they returned, up to max.
// Once detached it reads nothing more: a stream's copier of a failed try
// may still be reading, and what it would take must go to the next try.
type recorder struct {
	mu       sync.Mutex
	r        io.Reader
	max      int
	buf      []byte
	over     bool
	detached bool
}

func (r *recorder) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.detached {
		return 0, io.EOF
	}
	n, err := r.r.Read(p)
	if !r.over {
		if len(r.buf)+n > r.max {
			r.over, r.buf = true, nil
		} else {
			r.buf = append(r.buf, p[:n]...)
		}
	}
	return n, err
}

// detach stops reads and returns what they took; ok is false when that
// was more than max or a read still in progress did not end within a
// few seconds.
func (r *recorder) detach() (taken []byte, ok bool) {
	deadline := time.Now().Add(5 * time.Second)
	for !r.mu.TryLock() {
		if time.Now().After(deadline) {
			return nil, false
		}
		time.Sleep(10 * time.Millisecond)
	}
	defer r.mu.Unlock()
	r.detached = true
	return r.buf, !r.over
}
