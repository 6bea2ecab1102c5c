package apply

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"
)

// Phase is where a component is in an apply.
type Phase string

// Phases.
const (
	PhaseQueued   Phase = "queued"
	PhaseApplying Phase = "applying"
	// PhaseWaiting: the component's objects are applied and not ready
	// yet; Waiting says how far it is and what it waits for.
	PhaseWaiting   Phase = "waiting"
	PhaseReady     Phase = "ready"
	PhaseUnchanged Phase = "unchanged"
	PhaseFailed    Phase = "failed"
	PhaseSkipped   Phase = "skipped"
	// PhaseRolledBack: an upgrade step failed and the component went back
	// to its revision from before the step (Revision).
	PhaseRolledBack Phase = "rolled back"
	// PhaseRemoved: an upgrade step removed the component, which its
	// release dropped (its Helm history is kept).
	PhaseRemoved Phase = "removed"
)

// Event is one step of one component.
type Event struct {
	Component string
	Phase     Phase
	Action    Action
	Revision  int
	Elapsed   time.Duration
	Err       error
	NotReady  []string
	// Waiting (PhaseWaiting) is how far the component is and what it
	// waits for ("0/1 ready, pulling image"), since Since.
	Waiting string
	Since   time.Time
	// Repaired: what drifted in a component applied again for it.
	Repaired []string
}

// Reporter receives progress. Implementations must be safe for concurrent
// use: components are applied in parallel.
type Reporter interface {
	Report(Event)
}

type nopReporter struct{}

func (nopReporter) Report(Event) {}

// LineReporter writes one line per component state change: for logs, CI,
// and terminals that are not interactive.
type LineReporter struct {
	mu    sync.Mutex
	W     io.Writer
	start time.Time
}

// NewLineReporter writes progress lines to w.
func NewLineReporter(w io.Writer) *LineReporter {
	return &LineReporter{W: w, start: time.Now()}
}

// Report implements Reporter.
func (l *LineReporter) Report(e Event) {
	if e.Phase == PhaseQueued {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.start.IsZero() {
		// A LineReporter made without NewLineReporter counts from its
		// first line rather than from the year 1.
		l.start = time.Now()
	}
	fmt.Fprintf(l.W, "%6.1fs  %-20s %s\n", time.Since(l.start).Seconds(), e.Component, describe(e))
	for _, n := range e.NotReady {
		fmt.Fprintf(l.W, "         %-20s   %s\n", "", n)
	}
}

func describe(e Event) string {
	switch e.Phase {
	case PhaseApplying:
		if len(e.Repaired) > 0 {
			return "applying; drifted: " + strings.Join(e.Repaired, "; ")
		}
		return "applying"
	case PhaseWaiting:
		return fmt.Sprintf("%s (%d s)", e.Waiting, int(time.Since(e.Since).Seconds()))
	case PhaseReady:
		what := "ready"
		switch e.Action {
		case Validated:
			what = "validated (dry run)"
		case Repaired:
			what = "repaired"
		}
		s := fmt.Sprintf("%s, revision %d (%s)", what, e.Revision, e.Elapsed.Round(100*time.Millisecond))
		if len(e.Repaired) > 0 {
			s += "; reverted " + strings.Join(e.Repaired, "; ")
		}
		return s
	case PhaseUnchanged:
		return fmt.Sprintf("unchanged, revision %d", e.Revision)
	case PhaseFailed:
		return fmt.Sprintf("FAILED after %s: %v", e.Elapsed.Round(100*time.Millisecond), e.Err)
	case PhaseSkipped:
		return fmt.Sprintf("skipped: %v", e.Err)
	case PhaseRolledBack:
		return fmt.Sprintf("rolled back to revision %d", e.Revision)
	case PhaseRemoved:
		return "removed (the new release dropped it; its Helm history is kept)"
	}
	return string(e.Phase)
}

// LiveReporter redraws a table of every component in place, for an
// interactive terminal; call Stop when the apply is over.
type LiveReporter struct {
	mu     sync.Mutex
	w      io.Writer
	start  time.Time
	order  []string
	state  map[string]Event
	since  map[string]time.Time
	lines  int
	stop   chan struct{}
	done   chan struct{}
	closed bool
}

// NewLiveReporter starts redrawing on w every half second.
func NewLiveReporter(w io.Writer) *LiveReporter {
	l := &LiveReporter{w: w, start: time.Now(), state: map[string]Event{}, since: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				l.mu.Lock()
				l.draw()
				l.mu.Unlock()
			case <-l.stop:
				return
			}
		}
	}()
	return l
}

// Report implements Reporter.
func (l *LiveReporter) Report(e Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.state[e.Component]; !ok {
		l.order = append(l.order, e.Component)
	}
	if e.Phase == PhaseApplying {
		l.since[e.Component] = time.Now()
	}
	l.state[e.Component] = e
	l.draw()
}

// Stop draws the final table and stops redrawing.
func (l *LiveReporter) Stop() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	l.mu.Unlock()
	close(l.stop)
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.draw()
	// Reasons of failures, below the table.
	names := append([]string(nil), l.order...)
	sort.Strings(names)
	for _, n := range names {
		for _, line := range l.state[n].NotReady {
			fmt.Fprintf(l.w, "  %s: %s\n", n, line)
		}
	}
}

func (l *LiveReporter) draw() {
	var b strings.Builder
	if l.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", l.lines)
	}
	for _, n := range l.order {
		e := l.state[n]
		status := describe(e)
		switch e.Phase {
		case PhaseApplying:
			status = fmt.Sprintf("applying %s", time.Since(l.since[n]).Round(time.Second))
		case PhaseWaiting:
			status = fmt.Sprintf("applying %s: %s", time.Since(l.since[n]).Round(time.Second), describe(e))
		}
		fmt.Fprintf(&b, "\x1b[2K  %-20s %s\n", n, status)
	}
	fmt.Fprintf(&b, "\x1b[2K  %s elapsed\n", time.Since(l.start).Round(time.Second))
	l.lines = len(l.order) + 1
	io.WriteString(l.w, b.String())
}
