// Package buildplan runs the build steps of the test rings and of 'make
// demo' as one dependency graph: each step starts as soon as the steps it
// needs are done and a slot of each resource it uses is free, the step
// with the longest chain of work behind it first, and a step whose outputs
// are current is not run again.
//
// Whether a step's outputs are current is the owning package's answer
// (Step.Fresh): e2e/kindcluster, e2e/images and e2e/testcluster stamp each
// artifact with a hash of what it was built from, its needs' stamps
// included. The plan asks when the step's needs are done, so that a
// changed input rebuilds that step and what depends on it, and nothing
// else. Measured durations are kept in Options.StateDir; they make the
// estimates: the first line of
// a run that builds anything says how long a cold run takes on this
// machine and how long this one should take, and every line after says
// what is left.
//
// It is the e2e ring's own small scheduler, in the spirit of kind's
// ordered creation actions: what a step builds, and how it caches its
// artifacts on disk, stays with the package that owns it (e2e/kindcluster,
// e2e/images, e2e/testcluster); this package only orders, limits, skips
// and reports.
package buildplan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Resource is a kind of capacity a step holds while it runs.
type Resource string

// The resources of this machine's builds.
const (
	// CPU is held by compiles: Go builds of large modules.
	CPU Resource = "cpu"
	// IO is held by work that mostly waits on the network or the disk:
	// downloads, debootstrap, apt, writing archives and images.
	IO Resource = "io"
	// Apt is held by steps that may run apt on this machine: one at a
	// time (apt's own locks make a second one fail or wait).
	Apt Resource = "apt"
)

// Step is one unit of build work.
type Step struct {
	// Name is unique in a run; by convention "owner/what", e.g.
	// "kind/rootfs" or "images/traefik".
	Name string
	// Needs are the names of the steps that must succeed first.
	Needs []string
	// Uses are the resources the step holds while it runs (one slot of
	// each); none means it only waits for its needs.
	Uses []Resource
	// Estimate is how long the step takes cold on a 2-core machine, used
	// until a run on this machine has measured it.
	Estimate time.Duration
	// Fresh reports whether the step's outputs are present and built from
	// its current inputs (the outputs of its needs included); it must be
	// cheap. It is asked once before the run (for the estimates) and again
	// when the step's needs are done. Nil: the step always runs (its Run
	// must then be cheap when there is nothing to do).
	Fresh func(ctx context.Context) bool
	// Run does the work. It must leave no half-made output behind when it
	// fails or is cancelled (write under a temporary name and rename).
	Run func(ctx context.Context) error
}

// Options configures Run.
type Options struct {
	// Slots is how many steps may hold each resource at once. Defaults:
	// CPU the number of cores (a compile's link is single-threaded, so
	// two compiles on two cores finish sooner than one after the other),
	// IO 2, any other resource 1.
	Slots map[Resource]int
	// StateDir keeps the steps' measured durations, which replace their
	// estimates. Empty: nothing is kept.
	StateDir string
	// Log receives the progress lines (printf style); nil logs through
	// slog at Info level.
	Log func(format string, args ...any)
	// Heartbeat is how often a line lists the steps still running
	// (default one minute; negative: never).
	Heartbeat time.Duration
	// Prefix starts every progress line (default "build: ").
	Prefix string
}

// State is what became of a step.
type State string

// The states of a step in a Report.
const (
	Cached  State = "cached"
	Built   State = "built"
	Failed  State = "failed"
	Skipped State = "skipped" // a step it needs failed, or the run was cancelled
)

// StepReport is one step's outcome.
type StepReport struct {
	Name  string
	State State
	// Took is how long Run took (zero when it did not run).
	Took time.Duration
	// Err is Run's error for a failed step.
	Err error
}

// Report is what a run did, the steps in the order they ended.
type Report struct {
	Steps   []StepReport
	Elapsed time.Duration
}

// Step returns the report of the named step.
func (r *Report) Step(name string) (StepReport, bool) {
	for _, s := range r.Steps {
		if s.Name == name {
			return s, true
		}
	}
	return StepReport{}, false
}

// Built lists the steps that ran, in the order they ended.
func (r *Report) Built() []string {
	var out []string
	for _, s := range r.Steps {
		if s.State == Built {
			out = append(out, s.Name)
		}
	}
	return out
}

// node is a step in the graph with what the run knows of it.
type node struct {
	Step
	needs      []*node
	dependents []*node
	estimate   time.Duration
	priority   time.Duration // the longest chain of estimated work from here on
	willBuild  bool          // at the start of the run
	checked    bool          // cached was asked when the step became ready
	skip       bool          // its answer
	pending    int           // needs not yet done
	state      State
	started    time.Time
	took       time.Duration
	err        error
}

// Validate checks that names are unique, every need names a step and the
// graph has no cycle; the error names the step and the fix.
func Validate(steps []Step) error {
	_, _, err := graph(steps)
	return err
}

func graph(steps []Step) (map[string]*node, []*node, error) {
	byName := make(map[string]*node, len(steps))
	var nodes []*node
	for i := range steps {
		s := steps[i]
		if s.Name == "" {
			return nil, nil, fmt.Errorf("buildplan: step %d has no name", i)
		}
		if s.Run == nil {
			return nil, nil, fmt.Errorf("buildplan: step %s has no Run", s.Name)
		}
		if _, dup := byName[s.Name]; dup {
			return nil, nil, fmt.Errorf("buildplan: two steps are called %s: names must be unique", s.Name)
		}
		n := &node{Step: s}
		byName[s.Name] = n
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		for _, need := range n.Needs {
			m, ok := byName[need]
			if !ok {
				return nil, nil, fmt.Errorf("buildplan: step %s needs %s, which is not in the plan", n.Name, need)
			}
			if !slices.Contains(n.needs, m) {
				n.needs = append(n.needs, m)
				m.dependents = append(m.dependents, n)
			}
		}
	}
	order, err := topological(nodes)
	if err != nil {
		return nil, nil, err
	}
	return byName, order, nil
}

// topological orders nodes so that every node comes after its needs.
func topological(nodes []*node) ([]*node, error) {
	const (
		unseen = iota
		visiting
		done
	)
	mark := map[*node]int{}
	var order []*node
	var visit func(n *node, path []string) error
	visit = func(n *node, path []string) error {
		switch mark[n] {
		case done:
			return nil
		case visiting:
			i := slices.Index(path, n.Name)
			return fmt.Errorf("buildplan: the steps need each other in a cycle: %s", strings.Join(append(path[i:], n.Name), " → "))
		}
		mark[n] = visiting
		for _, m := range n.needs {
			if err := visit(m, append(path, n.Name)); err != nil {
				return err
			}
		}
		mark[n] = done
		order = append(order, n)
		return nil
	}
	for _, n := range nodes {
		if err := visit(n, nil); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// Run runs steps: each once its needs succeeded and its resources have a
// free slot, the one with the longest chain of work behind it first,
// skipping those whose outputs are current. On the first failure
// no new step starts, the running ones finish (or see ctx cancelled with
// the run's), and the error names every step that failed. The report is
// returned in both cases.
func Run(ctx context.Context, o Options, steps ...Step) (*Report, error) {
	byName, order, err := graph(steps)
	if err != nil {
		return nil, err
	}
	r := &runner{o: o, byName: byName, order: order, t0: time.Now()}
	r.defaults()
	return r.run(ctx)
}

type runner struct {
	o      Options
	byName map[string]*node
	order  []*node
	t0     time.Time

	cold bool // estimates are of a cold run

	mu      sync.Mutex
	stored  map[string]record // from StateDir
	report  Report
	ended   int
	toBuild int
}

func (r *runner) defaults() {
	if r.o.Log == nil {
		r.o.Log = func(format string, args ...any) { slog.Info(fmt.Sprintf(format, args...)) }
	}
	if r.o.Heartbeat == 0 {
		r.o.Heartbeat = time.Minute
	}
	if r.o.Prefix == "" {
		r.o.Prefix = "build: "
	}
	slots := map[Resource]int{CPU: max(runtime.NumCPU(), 1), IO: 2}
	for k, v := range r.o.Slots {
		slots[k] = max(v, 1)
	}
	r.o.Slots = slots
}

func (r *runner) logf(format string, args ...any) { r.o.Log(r.o.Prefix+format, args...) }

func (r *runner) slots(res Resource) int {
	if n, ok := r.o.Slots[res]; ok {
		return n
	}
	return 1
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	r.load()
	for _, n := range r.order {
		n.willBuild = !r.cached(ctx, n)
		if n.willBuild && !n.always() {
			r.toBuild++
		}
	}
	if r.toBuild > 0 {
		all := func(*node) bool { return true }
		r.cold = true
		r.prioritize(all)
		cold := r.simulate(all, nil)
		r.cold = false
		r.prioritize(func(n *node) bool { return n.willBuild })
		now := r.simulate(func(n *node) bool { return n.willBuild }, nil)
		where := "on this machine"
		for _, n := range r.order {
			if r.stored[n.Name].Took == 0 {
				where = "on 2 cores (not every step measured on this machine yet)"
				break
			}
		}
		r.logf("%d of %d steps to build, about %s; a cold run takes about %s %s",
			r.toBuild, len(r.order), roundEstimate(now), roundEstimate(cold), where)
	} else {
		r.prioritize(func(n *node) bool { return n.willBuild })
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		n   *node
		err error
	}
	results := make(chan result)
	used := map[Resource]int{}
	var ready []*node
	running := map[*node]bool{}
	for _, n := range r.order {
		n.pending = len(n.needs)
		if n.pending == 0 {
			ready = append(ready, n)
		}
	}
	var failed []error
	var stopBeat func()
	if r.o.Heartbeat > 0 {
		stopBeat = r.heartbeat(running)
	}
	for {
		// Start what can start, the longest chain first, until nothing
		// more can: a cached step ends at once and may make others ready.
		for moved := true; moved && len(failed) == 0 && ctx.Err() == nil; {
			moved = false
			sort.SliceStable(ready, func(i, j int) bool { return ready[i].priority > ready[j].priority })
			var rest []*node
			for _, n := range ready {
				if !n.checked {
					n.checked, n.skip = true, r.cached(ctx, n)
				}
				if n.skip {
					r.finish(n, Cached, 0, nil)
					for _, d := range n.dependents {
						if d.pending--; d.pending == 0 {
							rest = append(rest, d)
						}
					}
					moved = true
					continue
				}
				if !r.fits(n, used) {
					rest = append(rest, n)
					continue
				}
				for _, res := range n.Uses {
					used[res]++
				}
				r.mu.Lock()
				running[n] = true
				n.started = time.Now()
				r.mu.Unlock()
				if est := r.estimate(n); est > 0 {
					r.logf("%s: building (about %s)", n.Name, roundEstimate(est))
				} else {
					r.logf("%s: running", n.Name)
				}
				go func(n *node) {
					results <- result{n, n.Run(ctx)}
				}(n)
				moved = true
			}
			ready = rest
		}
		if len(running) == 0 {
			break
		}
		res := <-results
		n := res.n
		for _, u := range n.Uses {
			used[u]--
		}
		r.mu.Lock()
		delete(running, n)
		r.mu.Unlock()
		took := time.Since(n.started)
		if res.err != nil {
			failed = append(failed, fmt.Errorf("build step %s failed: %w", n.Name, res.err))
			r.finish(n, Failed, took, res.err)
			cancel()
			continue
		}
		r.finish(n, Built, took, nil)
		for _, d := range n.dependents {
			if d.pending--; d.pending == 0 {
				ready = append(ready, d)
			}
		}
	}
	if stopBeat != nil {
		stopBeat()
	}
	// What never ran.
	for _, n := range r.order {
		if n.state == "" {
			r.finish(n, Skipped, 0, nil)
		}
	}
	r.report.Elapsed = time.Since(r.t0)
	if len(failed) > 0 {
		// What succeeded is cached: once the cause is fixed, a run
		// again starts where this one stopped.
		return &r.report, fmt.Errorf("%w\n(the steps that succeeded are cached: fix the cause and run again)", errors.Join(failed...))
	}
	if err := ctx.Err(); err != nil && r.ended < len(r.order) {
		return &r.report, fmt.Errorf("build stopped before every step ran (what was built is cached): %w", err)
	}
	if r.toBuild > 0 {
		r.logf("all %d steps done in %s (%d built)", len(r.order), r.report.Elapsed.Round(time.Second), len(r.report.Built()))
	}
	return &r.report, nil
}

func (r *runner) fits(n *node, used map[Resource]int) bool {
	for _, res := range n.Uses {
		if used[res]+1 > r.slots(res) {
			return false
		}
	}
	return true
}
