// Package buildplan runs the build steps of the test rings and of 'make
// demo' as one dependency graph: each step starts as soon as the steps it
// needs are done and a slot of each resource it uses is free, the step
// with the longest chain of work behind it first, and a step whose inputs
// did not change since it last succeeded is not run again.
//
// A step's cache key is the hash of its own inputs (Step.Inputs) and of the
// keys of the steps it needs, so that a changed input rebuilds that step and
// what depends on it, and nothing else. Keys and measured durations are kept
// in Options.StateDir; the durations make the estimates: the first line of
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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// CacheRoot is the folder of every cache of the rings' builds:
// $ONPREM_CACHE, default /var/cache/onprem.
func CacheRoot() string {
	if root := os.Getenv("ONPREM_CACHE"); root != "" {
		return root
	}
	return "/var/cache/onprem"
}

// StateDir is where the rings keep their build state:
// $ONPREM_CACHE/buildplan.
func StateDir() string { return filepath.Join(CacheRoot(), "buildplan") }

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
	// Inputs returns a digest of everything the step is built from, apart
	// from the steps it needs (their keys are added). It must be cheap.
	// Nil: the step has no key and Fresh alone decides.
	Inputs func(ctx context.Context) (string, error)
	// Fresh reports whether the step's outputs are present and current.
	// Nil: outputs are taken as present when the key matches. A step with
	// neither Inputs nor Fresh always runs (its Run must then be cheap
	// when there is nothing to do).
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
	// StateDir keeps the keys of the steps that succeeded and their
	// measured durations. Empty: nothing is kept, and only Fresh can
	// skip a step.
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
	key        string // "" when the step has no key
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
// skipping those whose key and outputs are current. On the first failure
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

// record is what StateDir keeps of a step.
type record struct {
	Key string `json:"key,omitempty"`
	// Took is the last measured duration of the step's Run when it built;
	// for a step that always runs, the longest (its cold run).
	Took time.Duration `json:"took,omitempty"`
	When time.Time     `json:"when,omitzero"`
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

func (r *runner) stateFile() string { return filepath.Join(r.o.StateDir, "buildplan.json") }

func (r *runner) load() {
	r.stored = map[string]record{}
	if r.o.StateDir == "" {
		return
	}
	b, err := os.ReadFile(r.stateFile())
	if err != nil {
		return
	}
	if err := json.Unmarshal(b, &r.stored); err != nil {
		// A damaged state file costs a rebuild, never a wrong skip.
		r.logf("ignoring the damaged %s (%v): every step is checked again", r.stateFile(), err)
		r.stored = map[string]record{}
	}
}

// save merges what this run learned into the state file (other runs with
// other steps share it). Called under r.mu.
func (r *runner) save(n *node) {
	if r.o.StateDir == "" {
		return
	}
	if n.key == "" && n.state != Built {
		return // nothing to remember
	}
	rec := r.stored[n.Name]
	rec.Key = n.key
	if n.state == Built {
		if n.always() {
			rec.Took = max(rec.Took, n.took)
		} else {
			rec.Took = n.took
		}
		rec.When = time.Now().UTC()
	}
	r.stored[n.Name] = rec
	if err := os.MkdirAll(r.o.StateDir, 0o755); err != nil {
		r.logf("cannot keep the build state in %s: %v", r.o.StateDir, err)
		return
	}
	onDisk := map[string]record{}
	if b, err := os.ReadFile(r.stateFile()); err == nil {
		_ = json.Unmarshal(b, &onDisk)
	}
	onDisk[n.Name] = rec
	b, err := json.MarshalIndent(onDisk, "", "  ")
	if err != nil {
		return
	}
	tmp := fmt.Sprintf("%s.tmp-%d", r.stateFile(), os.Getpid())
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		r.logf("cannot keep the build state in %s: %v", r.o.StateDir, err)
		return
	}
	if err := os.Rename(tmp, r.stateFile()); err != nil {
		_ = os.Remove(tmp)
		r.logf("cannot keep the build state in %s: %v", r.o.StateDir, err)
	}
}

// keys computes every keyed step's key, needs first.
func (r *runner) keys(ctx context.Context) error {
	for _, n := range r.order {
		if n.Inputs == nil {
			continue
		}
		own, err := n.Inputs(ctx)
		if err != nil {
			return fmt.Errorf("buildplan: %s: reading its inputs: %w", n.Name, err)
		}
		h := sha256.New()
		fmt.Fprintf(h, "%d:%s;%d:%s;", len(n.Name), n.Name, len(own), own)
		for _, m := range n.needs {
			fmt.Fprintf(h, "%d:%s=%s;", len(m.Name), m.Name, m.key)
		}
		n.key = hex.EncodeToString(h.Sum(nil))[:24]
	}
	return nil
}

// cached reports whether n may be skipped: its key is the one stored
// and its outputs are present.
func (r *runner) cached(ctx context.Context, n *node) bool {
	if n.Inputs == nil && n.Fresh == nil {
		return false
	}
	if n.Inputs != nil && r.stored[n.Name].Key != n.key {
		return false
	}
	return n.Fresh == nil || n.Fresh(ctx)
}

// always reports whether n runs every time (no key, no Fresh).
func (n *node) always() bool { return n.Inputs == nil && n.Fresh == nil }

// coldEstimate is the measured cold duration of n on this machine, or its
// own estimate.
func (r *runner) coldEstimate(n *node) time.Duration {
	if d := r.stored[n.Name].Took; d > 0 {
		return d
	}
	return n.Estimate
}

// estimate is how long n should take in this run: its cold estimate, but
// nothing for a step that always runs and has run here before (its Run is
// cheap when there is nothing to do).
func (r *runner) estimate(n *node) time.Duration {
	if r.cold {
		return r.coldEstimate(n)
	}
	if n.always() && !r.stored[n.Name].When.IsZero() {
		return 0
	}
	return r.coldEstimate(n)
}

// prioritize gives every node the longest chain of estimated work from it
// to the end of the graph, counting only the steps in build.
func (r *runner) prioritize(build func(*node) bool) {
	for i := len(r.order) - 1; i >= 0; i-- {
		n := r.order[i]
		var longest time.Duration
		for _, d := range n.dependents {
			longest = max(longest, d.priority)
		}
		n.priority = longest
		if build(n) {
			n.priority += r.estimate(n)
		}
	}
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	r.load()
	if err := r.keys(ctx); err != nil {
		return nil, err
	}
	for _, n := range r.order {
		n.willBuild = !r.cached(ctx, n)
		if n.willBuild && (n.Inputs != nil || n.Fresh != nil) {
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
			failed = append(failed, fmt.Errorf("%s: %w", n.Name, res.err))
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
		return &r.report, fmt.Errorf("buildplan: %w", errors.Join(failed...))
	}
	if err := ctx.Err(); err != nil && r.ended < len(r.order) {
		return &r.report, fmt.Errorf("buildplan: %w", err)
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

// simulate estimates how long the steps in build take from now with the
// run's slots, the longest chain first; running maps the steps already
// running to how long they have run. Steps outside build take no time.
func (r *runner) simulate(build func(*node) bool, running map[*node]time.Duration) time.Duration {
	type job struct {
		n   *node
		end time.Duration
	}
	pending := map[*node]int{}
	var ready []*node
	var jobs []job
	used := map[Resource]int{}
	doneSet := map[*node]bool{}
	for _, n := range r.order {
		if d, ok := running[n]; ok {
			jobs = append(jobs, job{n, max(r.estimate(n)-d, 0)})
			for _, res := range n.Uses {
				used[res]++
			}
			continue
		}
		if !build(n) {
			doneSet[n] = true
			continue
		}
	}
	for _, n := range r.order {
		if doneSet[n] {
			continue
		}
		if _, ok := running[n]; ok {
			continue
		}
		c := 0
		for _, m := range n.needs {
			if !doneSet[m] {
				c++
			}
		}
		pending[n] = c
		if c == 0 {
			ready = append(ready, n)
		}
	}
	var now time.Duration
	for {
		sort.SliceStable(ready, func(i, j int) bool { return ready[i].priority > ready[j].priority })
		var rest []*node
		for _, n := range ready {
			if !r.fits(n, used) {
				rest = append(rest, n)
				continue
			}
			for _, res := range n.Uses {
				used[res]++
			}
			jobs = append(jobs, job{n, now + r.estimate(n)})
		}
		ready = rest
		if len(jobs) == 0 {
			return now
		}
		// The next job to end.
		sort.Slice(jobs, func(i, j int) bool { return jobs[i].end < jobs[j].end })
		j := jobs[0]
		jobs = jobs[1:]
		now = max(now, j.end)
		for _, res := range j.n.Uses {
			used[res]--
		}
		doneSet[j.n] = true
		for _, d := range j.n.dependents {
			if _, ok := pending[d]; !ok {
				continue
			}
			if pending[d]--; pending[d] == 0 {
				ready = append(ready, d)
			}
		}
	}
}

// roundEstimate rounds an estimate to what a person reads: seconds under
// a minute, whole minutes after.
func roundEstimate(d time.Duration) string {
	switch {
	case d <= 0:
		return "no time"
	case d < time.Minute:
		return d.Round(time.Second).String()
	default:
		return fmt.Sprintf("%d min", int((d+30*time.Second)/time.Minute))
	}
}
