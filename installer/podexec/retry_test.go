package podexec

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

// The kubelet's relay of containerd's failure to load the task, as a
// node too busy to answer in time gives it.
const loadTaskFailure = "Internal error occurred: error executing command in container: failed to exec in container: failed to load task: context deadline exceeded"

func fastBackoff(t *testing.T) {
	t.Helper()
	was := startBackoff
	startBackoff = time.Millisecond
	t.Cleanup(func() { startBackoff = was })
}

func TestNotStarted(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want bool
	}{
		{loadTaskFailure, true},
		{`error executing command in container: failed to exec in container: failed to create exec "0a1b": ttrpc: closed`, true},
		{`error executing command in container: failed to exec in container: failed to start exec "0a1b": OCI runtime exec failed`, true},
		{"error dialing backend: dial tcp 172.18.0.3:10250: connect: connection refused", false},
		{"unable to upgrade connection: container not found (\"redis\")", false},
		{"context deadline exceeded", false},
	} {
		if got := notStarted(errors.New(tc.msg)); got != tc.want {
			t.Errorf("notStarted(%q) = %v, want %v", tc.msg, got, tc.want)
		}
	}
}

// A try that read part of stdin and then was not started: the next try
// reads stdin whole, from its first byte.
func TestRetryStartFeedsStdinAgain(t *testing.T) {
	fastBackoff(t)
	input := strings.Repeat("0123456789", 10_000)
	var tries int
	var got []byte
	err := retryStart(context.Background(), "sh -c script in onprem/redis-0 (container redis)", strings.NewReader(input), func(in io.Reader) error {
		tries++
		if tries < 3 {
			buf := make([]byte, 1000*tries)
			if _, err := io.ReadFull(in, buf); err != nil {
				t.Fatal(err)
			}
			return &StartError{msg: loadTaskFailure}
		}
		var err error
		got, err = io.ReadAll(in)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if tries != 3 {
		t.Errorf("%d tries, want 3", tries)
	}
	if string(got) != input {
		t.Errorf("the third try read %d bytes (first %q), want the whole input of %d", len(got), head(got), len(input))
	}
}

func head(b []byte) string {
	if len(b) > 20 {
		b = b[:20]
	}
	return string(b)
}

// A command that ran and failed, or a stream cut, is never run again.
func TestRetryStartOnlyWhenNotStarted(t *testing.T) {
	fastBackoff(t)
	for _, fail := range []error{
		&ExitError{Code: 1},
		errors.New("exec in onprem/redis-0 (container redis): stream error"),
	} {
		tries := 0
		err := retryStart(context.Background(), "sh -c script in onprem/redis-0 (container redis)", nil, func(in io.Reader) error {
			tries++
			if in != nil {
				t.Error("a try without stdin was given one")
			}
			return fail
		})
		if !errors.Is(err, fail) || tries != 1 {
			t.Errorf("%v: %d tries, error %v; want one try and its error", fail, tries, err)
		}
	}
}

// More than replayMax already sent: that cannot be sent again, so the
// failure is returned and says why it was not tried again.
func TestRetryStartGivesUpPastReplayMax(t *testing.T) {
	fastBackoff(t)
	tries := 0
	err := retryStart(context.Background(), "sh -c script in onprem/redis-0 (container redis)", bytes.NewReader(make([]byte, replayMax+1)), func(in io.Reader) error {
		tries++
		if _, err := io.Copy(io.Discard, in); err != nil {
			t.Fatal(err)
		}
		return &StartError{msg: loadTaskFailure}
	})
	var se *StartError
	if tries != 1 || !errors.As(err, &se) || !strings.Contains(err.Error(), "not tried again") {
		t.Errorf("%d tries, error %v; want one try and a StartError saying it was not tried again", tries, err)
	}
}

// A runtime that never starts it: startAttempts tries, and the error says
// so.
func TestRetryStartBounded(t *testing.T) {
	fastBackoff(t)
	tries := 0
	err := retryStart(context.Background(), "sh -c script in onprem/redis-0 (container redis)", nil, func(io.Reader) error {
		tries++
		return &StartError{msg: loadTaskFailure}
	})
	if tries != startAttempts || err == nil || !strings.Contains(err.Error(), "did not start it in 5 tries") {
		t.Errorf("%d tries, error %v; want %d and an error naming them", tries, err, startAttempts)
	}
}

// A command whose context ends while it waits to be tried again is not
// tried again, and the error says both why it failed and why it stopped.
func TestRetryStartStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	tries := 0
	err := retryStart(ctx, "sh -c script in onprem/redis-0 (container redis)", nil, func(io.Reader) error {
		tries++
		cancel()
		return &StartError{msg: loadTaskFailure}
	})
	var se *StartError
	if tries != 1 || !errors.As(err, &se) || !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not tried again") {
		t.Errorf("%d tries, error %v; want 1, the runtime's error and the cancellation", tries, err)
	}
}

// A stale read of a failed try (the stream's copier still running) takes
// nothing from the next try's input.
func TestRecorderDetachedReadsNothing(t *testing.T) {
	r := &recorder{r: strings.NewReader("abcdef"), max: 10}
	buf := make([]byte, 2)
	if n, _ := r.Read(buf); n != 2 {
		t.Fatalf("read %d", n)
	}
	taken, ok := r.detach()
	if !ok || string(taken) != "ab" {
		t.Fatalf("detach = %q, %v; want ab, true", taken, ok)
	}
	if n, err := r.Read(buf); n != 0 || err != io.EOF {
		t.Errorf("a read after detach = %d, %v; want 0, EOF", n, err)
	}
}
