package buildplan

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// finish records n's outcome and logs it when the run builds anything.
func (r *runner) finish(n *node, s State, took time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n.state, n.took, n.err = s, took, err
	r.ended++
	r.report.Steps = append(r.report.Steps, StepReport{Name: n.Name, State: s, Took: took, Err: err})
	if s == Built || s == Cached {
		r.save(n)
	}
	if r.toBuild == 0 && s != Failed {
		return
	}
	progress := fmt.Sprintf("[%d/%d] ", r.ended, len(r.order))
	switch s {
	case Cached:
		r.logf("%s%s: cached", progress, n.Name)
	case Built:
		left := r.simulate(func(m *node) bool { return m.state == "" && m.willBuild }, r.runningLocked())
		tail := ""
		if left > 0 {
			tail = fmt.Sprintf("; about %s left", roundEstimate(left))
		}
		r.logf("%s%s: done in %s%s", progress, n.Name, took.Round(100*time.Millisecond), tail)
	case Failed:
		r.logf("%s%s: FAILED after %s: %v", progress, n.Name, took.Round(100*time.Millisecond), err)
	case Skipped:
		r.logf("%s%s: not run", progress, n.Name)
	}
}

// runningLocked lists the running steps with how long they have run.
func (r *runner) runningLocked() map[*node]time.Duration {
	out := map[*node]time.Duration{}
	for _, n := range r.order {
		if n.state == "" && !n.started.IsZero() {
			out[n] = time.Since(n.started)
		}
	}
	return out
}

// heartbeat logs the running steps every Heartbeat until stopped.
func (r *runner) heartbeat(running map[*node]bool) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(r.o.Heartbeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			r.mu.Lock()
			var parts []string
			for _, n := range r.order {
				if running[n] {
					parts = append(parts, fmt.Sprintf("%s (%s)", n.Name, time.Since(n.started).Round(time.Second)))
				}
			}
			left := r.simulate(func(m *node) bool { return m.state == "" && m.willBuild }, r.runningLocked())
			r.mu.Unlock()
			if len(parts) > 0 {
				r.logf("running %s; about %s left", strings.Join(parts, ", "), roundEstimate(left))
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
