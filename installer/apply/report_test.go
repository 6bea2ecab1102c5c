package apply

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestLineReporterWritesOneLinePerChange(t *testing.T) {
	var b bytes.Buffer
	r := NewLineReporter(&b)
	r.Report(Event{Component: "mongodb", Phase: PhaseQueued})
	r.Report(Event{Component: "mongodb", Phase: PhaseApplying})
	r.Report(Event{Component: "mongodb", Phase: PhaseReady, Revision: 1, Elapsed: 2 * time.Second})
	r.Report(Event{Component: "redis", Phase: PhaseFailed, Err: errors.New("timed out"), NotReady: []string{"pod redis-0 not ready: container redis waiting: ImagePullBackOff"}})
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), out)
	}
	for _, want := range []string{"mongodb", "applying", "ready, revision 1 (2s)", "FAILED", "ImagePullBackOff"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestLiveReporterRedrawsInPlace(t *testing.T) {
	var b bytes.Buffer
	r := NewLiveReporter(&b)
	r.Report(Event{Component: "mongodb", Phase: PhaseQueued})
	r.Report(Event{Component: "redis", Phase: PhaseQueued})
	r.Report(Event{Component: "mongodb", Phase: PhaseApplying})
	r.Report(Event{Component: "redis", Phase: PhaseFailed, Err: errors.New("timed out"), NotReady: []string{"pod redis-0 not ready"}})
	r.Stop()
	r.Stop() // idempotent
	out := b.String()
	if !strings.Contains(out, "\x1b[3A") {
		t.Error("the table is not redrawn in place (cursor up over its 3 lines)")
	}
	if !strings.Contains(out, "applying") || !strings.Contains(out, "FAILED") || !strings.HasSuffix(out, "redis: pod redis-0 not ready\n") {
		t.Errorf("output:\n%q", out)
	}
}

func TestLineReporterMadeWithoutItsConstructorCountsFromItsFirstLine(t *testing.T) {
	var b bytes.Buffer
	r := &LineReporter{W: &b}
	r.Report(Event{Component: "redis", Phase: PhaseApplying})
	if got := strings.Fields(b.String())[0]; got != "0.0s" {
		t.Errorf("elapsed %q, want 0.0s:\n%s", got, b.String())
	}
}
