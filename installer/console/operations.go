package console

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/support"
)

// Outcomes of an operation.
const (
	OpRunning   = "running"
	OpSucceeded = "succeeded"
	OpFailed    = "failed"
)

// Operation is a long action started from the console (an upgrade, an
// install of an edited configuration): it runs in the console's process,
// not in the request, and its pages show its progress as it goes. What it
// changes is the library's, recorded in the installation's state like the
// CLI's.
type Operation struct {
	ID    string
	Kind  string
	Title string

	mu         sync.Mutex
	started    time.Time
	finished   time.Time
	outcome    string
	err        string
	lines      []OpLine
	components []ComponentProgress
	redact     *support.Redactor
}

// OpLine is one line of an operation's progress.
type OpLine struct {
	At   time.Time
	Text string
}

// ComponentProgress is the last state change of one component.
type ComponentProgress struct {
	Name     string
	Phase    apply.Phase
	Action   apply.Action
	Revision int
	Elapsed  time.Duration
	Error    string
	NotReady []string
	// Waiting says what a waiting component waits for.
	Waiting string
	At      time.Time
}

// maxOpLines bounds the lines an operation keeps (the first ones go).
const maxOpLines = 2000

// Line records a line (redacted: an error may quote anything).
func (o *Operation) Line(text string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lines = append(o.lines, OpLine{At: time.Now(), Text: o.redact.Redact(text)})
	if len(o.lines) > maxOpLines {
		o.lines = slices.Delete(o.lines, 0, len(o.lines)-maxOpLines)
	}
}

// Component records a component's state change.
func (o *Operation) Component(e apply.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	c := ComponentProgress{Name: e.Component, Phase: e.Phase, Action: e.Action, Revision: e.Revision, Elapsed: e.Elapsed,
		NotReady: e.NotReady, At: time.Now()}
	if e.Err != nil {
		c.Error = o.redact.Redact(e.Err.Error())
	}
	if e.Phase == apply.PhaseWaiting {
		c.Waiting = o.redact.Redact(e.Waiting)
	}
	for i := range o.components {
		if o.components[i].Name == e.Component {
			o.components[i] = c
			return
		}
	}
	o.components = append(o.components, c)
}

// OpView is a copy of an operation's state, for a page.
type OpView struct {
	ID, Kind, Title   string
	Started, Finished time.Time
	Outcome, Error    string
	Lines             []OpLine
	Components        []ComponentProgress
	Done              bool
	Elapsed           time.Duration
	ComponentsByPhase map[apply.Phase]int
}

// View copies the operation's state.
func (o *Operation) View() OpView {
	o.mu.Lock()
	defer o.mu.Unlock()
	v := OpView{ID: o.ID, Kind: o.Kind, Title: o.Title, Started: o.started, Finished: o.finished, Outcome: o.outcome, Error: o.err,
		Lines: slices.Clone(o.lines), Components: slices.Clone(o.components), Done: o.outcome != OpRunning}
	end := o.finished
	if end.IsZero() {
		end = time.Now()
	}
	v.Elapsed = end.Sub(o.started).Round(time.Second)
	return v
}

// BusyError: an operation of this console is running; one runs at a time.
type BusyError struct{ Running *Operation }

func (e *BusyError) Error() string {
	return fmt.Sprintf("%s is running (started from this console): wait for it to end", e.Running.Title)
}

// operations runs and keeps the console's operations.
type operations struct {
	base   context.Context
	wg     sync.WaitGroup
	mu     sync.Mutex
	all    []*Operation // newest last
	nextID int
}

// start runs fn as a new operation in the background, unless one runs.
func (ops *operations) start(kind, title string, fn func(context.Context, Progress) error) (*Operation, error) {
	ops.mu.Lock()
	defer ops.mu.Unlock()
	for _, o := range ops.all {
		if o.View().Outcome == OpRunning {
			return nil, &BusyError{Running: o}
		}
	}
	ops.nextID++
	o := &Operation{ID: fmt.Sprint(ops.nextID), Kind: kind, Title: title, started: time.Now(), outcome: OpRunning, redact: support.NewRedactor(nil)}
	ops.all = append(ops.all, o)
	ops.wg.Add(1)
	go func() {
		defer ops.wg.Done()
		o.Line(title + ": started")
		err := fn(ops.base, o)
		o.mu.Lock()
		o.finished = time.Now()
		if err != nil {
			o.outcome, o.err = OpFailed, o.redact.Redact(err.Error())
		} else {
			o.outcome = OpSucceeded
		}
		o.mu.Unlock()
		if err != nil {
			o.Line(title + ": failed")
		} else {
			o.Line(title + ": done")
		}
	}()
	return o, nil
}

// get returns the operation of an ID.
func (ops *operations) get(id string) (*Operation, error) {
	ops.mu.Lock()
	defer ops.mu.Unlock()
	for _, o := range ops.all {
		if o.ID == id {
			return o, nil
		}
	}
	return nil, errors.New("no such operation in this console")
}

// list returns the operations, newest first.
func (ops *operations) list() []OpView {
	ops.mu.Lock()
	defer ops.mu.Unlock()
	out := make([]OpView, 0, len(ops.all))
	for i := len(ops.all) - 1; i >= 0; i-- {
		out = append(out, ops.all[i].View())
	}
	return out
}

// wait waits for the running operations (their context has ended), at
// most d.
func (ops *operations) wait(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		ops.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
