package buildplan

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// world is a fake build that caches as e2e/kindcluster and e2e/images do:
// each output carries a stamp of what it was built from (its own inputs
// and the stamps of its needs' outputs), and a step is fresh when its
// output's stamp is the one its current inputs give. It records what ran
// in which order and how many ran at once per resource.
type world struct {
	mu      sync.Mutex
	inputs  map[string]string
	needs   map[string][]string
	outputs map[string]string // the stamp of each present output
	ran     []string
	started []string
	events  []string // "start x", "end x" in time order
	busy    map[Resource]int
	peak    map[Resource]int
	fail    map[string]error
}

func newWorld() *world {
	return &world{inputs: map[string]string{}, needs: map[string][]string{}, outputs: map[string]string{}, busy: map[Resource]int{}, peak: map[Resource]int{}, fail: map[string]error{}}
}

// stamp is what name's output would carry if built now. Called under mu.
func (w *world) stamp(name string) string {
	s := name + "(" + w.inputs[name]
	for _, n := range w.needs[name] {
		s += "," + w.outputs[n]
	}
	return s + ")"
}

func (w *world) step(name string, uses []Resource, needs ...string) Step {
	w.needs[name] = needs
	return Step{
		Name:  name,
		Needs: needs,
		Uses:  uses,
		Fresh: func(context.Context) bool {
			w.mu.Lock()
			defer w.mu.Unlock()
			out, ok := w.outputs[name]
			return ok && out == w.stamp(name)
		},
		Run: func(ctx context.Context) error {
			w.mu.Lock()
			w.started = append(w.started, name)
			w.events = append(w.events, "start "+name)
			for _, u := range uses {
				w.busy[u]++
				w.peak[u] = max(w.peak[u], w.busy[u])
			}
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, u := range uses {
				w.busy[u]--
			}
			w.events = append(w.events, "end "+name)
			if err := w.fail[name]; err != nil {
				return err
			}
			w.outputs[name] = w.stamp(name)
			w.ran = append(w.ran, name)
			return nil
		},
	}
}

// diamond: a → b, a → c, b and c → d, and e apart.
func (w *world) diamond() []Step {
	cpu := []Resource{CPU}
	return []Step{
		w.step("d", cpu, "b", "c"),
		w.step("b", cpu, "a"),
		w.step("c", []Resource{IO}, "a"),
		w.step("a", cpu),
		w.step("e", []Resource{IO}),
	}
}

func quiet(t *testing.T) func(string, ...any) {
	return func(format string, args ...any) { t.Logf(format, args...) }
}

func TestNeedsComeFirstAndSlotsAreRespected(t *testing.T) {
	w := newWorld()
	rep, err := Run(context.Background(), Options{Slots: map[Resource]int{CPU: 1, IO: 1}, Log: quiet(t)}, w.diamond()...)
	if err != nil {
		t.Fatal(err)
	}
	for _, edge := range [][2]string{{"a", "b"}, {"a", "c"}, {"b", "d"}, {"c", "d"}} {
		end, start := slices.Index(w.events, "end "+edge[0]), slices.Index(w.events, "start "+edge[1])
		if end < 0 || start < 0 || end > start {
			t.Errorf("%s must end before %s starts: %v", edge[0], edge[1], w.events)
		}
	}
	if w.peak[CPU] > 1 || w.peak[IO] > 1 {
		t.Errorf("slots exceeded: peak %v with one slot each", w.peak)
	}
	if got := len(rep.Built()); got != 5 {
		t.Errorf("built %v, want all 5", rep.Built())
	}
}

func TestCPUAndIOOverlap(t *testing.T) {
	// A compile and a download start together: each waits until it sees
	// the other running, which it never would if they ran one after the
	// other.
	var cpuUp, ioUp = make(chan struct{}), make(chan struct{})
	meet := func(mine, theirs chan struct{}) func(context.Context) error {
		return func(ctx context.Context) error {
			close(mine)
			select {
			case <-theirs:
				return nil
			case <-time.After(10 * time.Second):
				return errors.New("the other step never started alongside")
			}
		}
	}
	_, err := Run(context.Background(), Options{Slots: map[Resource]int{CPU: 1, IO: 1}, Log: quiet(t)},
		Step{Name: "compile", Uses: []Resource{CPU}, Run: meet(cpuUp, ioUp)},
		Step{Name: "debootstrap", Uses: []Resource{IO}, Run: meet(ioUp, cpuUp)},
	)
	if err != nil {
		t.Fatal(err)
	}
}

func TestLongestChainStartsFirst(t *testing.T) {
	for _, tc := range []struct {
		name  string
		state map[string]time.Duration // measured durations on record
		first string
	}{
		// By the steps' own estimates, head → tail is the longer chain.
		{name: "estimates", first: "head"},
		// What this machine measured overrides them: "lone" took longer.
		{name: "measured", state: map[string]time.Duration{"lone": time.Hour}, first: "lone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.state != nil {
				writeState(t, dir, tc.state)
			}
			var mu sync.Mutex
			var order []string
			run := func(name string) func(context.Context) error {
				return func(context.Context) error {
					mu.Lock()
					defer mu.Unlock()
					order = append(order, name)
					return nil
				}
			}
			_, err := Run(context.Background(), Options{Slots: map[Resource]int{CPU: 1}, StateDir: dir, Log: quiet(t)},
				Step{Name: "lone", Uses: []Resource{CPU}, Estimate: 5 * time.Minute, Run: run("lone")},
				Step{Name: "head", Uses: []Resource{CPU}, Estimate: time.Minute, Run: run("head")},
				Step{Name: "tail", Needs: []string{"head"}, Uses: []Resource{CPU}, Estimate: 10 * time.Minute, Run: run("tail")},
			)
			if err != nil {
				t.Fatal(err)
			}
			if order[0] != tc.first {
				t.Errorf("ran %v, want %s first", order, tc.first)
			}
		})
	}
}

func writeState(t *testing.T, dir string, took map[string]time.Duration) {
	t.Helper()
	var parts []string
	for name, d := range took {
		parts = append(parts, fmt.Sprintf("%q: {\"took\": %d}", name, int64(d)))
	}
	if err := os.WriteFile(filepath.Join(dir, "buildplan.json"), []byte("{"+strings.Join(parts, ",")+"}"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestUnchangedStepsAreNotRebuilt(t *testing.T) {
	dir := t.TempDir()
	w := newWorld()
	for _, s := range []string{"a", "b", "c", "d", "e"} {
		w.inputs[s] = s + "-v1"
	}
	o := Options{StateDir: dir, Log: quiet(t)}
	if _, err := Run(context.Background(), o, w.diamond()...); err != nil {
		t.Fatal(err)
	}

	// Nothing changed: nothing runs.
	w.ran = nil
	rep, err := Run(context.Background(), o, w.diamond()...)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.ran) != 0 {
		t.Errorf("a run with nothing changed built %v", w.ran)
	}
	for _, s := range rep.Steps {
		if s.State != Cached {
			t.Errorf("%s: %s, want cached", s.Name, s.State)
		}
	}

	// b's input changed: b and what needs it (d) run, nothing else.
	w.ran = nil
	w.inputs["b"] = "b-v2"
	if _, err := Run(context.Background(), o, w.diamond()...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(w.ran)
	if !slices.Equal(w.ran, []string{"b", "d"}) {
		t.Errorf("after changing b's input, built %v, want [b d]", w.ran)
	}

	// a's input changed: everything downstream of a, not e.
	w.ran = nil
	w.inputs["a"] = "a-v2"
	if _, err := Run(context.Background(), o, w.diamond()...); err != nil {
		t.Fatal(err)
	}
	slices.Sort(w.ran)
	if !slices.Equal(w.ran, []string{"a", "b", "c", "d"}) {
		t.Errorf("after changing a's input, built %v, want [a b c d]", w.ran)
	}

	// c's output went missing: c alone is made again, with the same
	// stamp, so d (whose stamp holds c's) is still fresh.
	w.ran = nil
	delete(w.outputs, "c")
	if _, err := Run(context.Background(), o, w.diamond()...); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(w.ran, []string{"c"}) {
		t.Errorf("after losing c's output, built %v, want [c]", w.ran)
	}
}

// A step whose Fresh says so is skipped; a step without Fresh always runs.
func TestFreshStepsAreSkippedOthersAlwaysRun(t *testing.T) {
	runs := 0
	rep, err := Run(context.Background(), Options{Log: quiet(t)}, Step{
		Name: "host-packages",
		Run:  func(context.Context) error { runs++; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := rep.Step("host-packages"); runs != 1 || s.State != Built {
		t.Errorf("a step without Fresh: ran %d times, %s; want once, built", runs, s.State)
	}
	// A step with only Fresh is skipped when it says so.
	ran := false
	rep, err = Run(context.Background(), Options{Log: quiet(t)}, Step{
		Name:  "dockerd",
		Fresh: func(context.Context) bool { return true },
		Run:   func(context.Context) error { ran = true; return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if ran {
		t.Error("a fresh step ran")
	}
	if s, _ := rep.Step("dockerd"); s.State != Cached {
		t.Errorf("dockerd: %s, want cached", s.State)
	}
}

func TestFailureStopsDependentsAndIsRetried(t *testing.T) {
	dir := t.TempDir()
	w := newWorld()
	w.fail["b"] = errors.New("compiler exited 2")
	o := Options{StateDir: dir, Log: quiet(t)}
	rep, err := Run(context.Background(), o, w.diamond()...)
	if err == nil || !strings.Contains(err.Error(), "build step b failed: compiler exited 2") || !strings.Contains(err.Error(), "run again") {
		t.Fatalf("error %v, want it to name step b and its cause", err)
	}
	if slices.Contains(w.started, "d") {
		t.Error("d started although b, which it needs, failed")
	}
	if s, _ := rep.Step("d"); s.State != Skipped {
		t.Errorf("d: %s, want skipped", s.State)
	}
	if s, _ := rep.Step("b"); s.State != Failed || s.Err == nil {
		t.Errorf("b: %s (%v), want failed with its error", s.State, s.Err)
	}

	// Fixed: the next run builds b and d; what succeeded before is cached.
	delete(w.fail, "b")
	w.ran = nil
	rep, err = Run(context.Background(), o, w.diamond()...)
	if err != nil {
		t.Fatal(err)
	}
	if a, _ := rep.Step("a"); a.State != Cached {
		t.Errorf("a: %s, want cached (it succeeded in the failed run)", a.State)
	}
	for _, want := range []string{"b", "d"} {
		if !slices.Contains(w.ran, want) {
			t.Errorf("%s did not run after the failure was fixed (ran %v)", want, w.ran)
		}
	}
}

func TestCancelledRunStopsAndReports(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	rep, err := Run(ctx, Options{Log: quiet(t)},
		Step{Name: "long", Uses: []Resource{CPU}, Run: func(ctx context.Context) error {
			close(started)
			<-ctx.Done()
			return ctx.Err()
		}},
		Step{Name: "after", Needs: []string{"long"}, Run: func(context.Context) error {
			t.Error("a step ran after its need was cancelled")
			return nil
		}},
		Step{Name: "canceller", Run: func(context.Context) error {
			<-started
			cancel()
			return nil
		}},
	)
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if s, _ := rep.Step("after"); s.State != Skipped {
		t.Errorf("after: %s, want skipped", s.State)
	}
}

func TestInvalidPlans(t *testing.T) {
	noop := func(context.Context) error { return nil }
	for _, tc := range []struct {
		name  string
		steps []Step
		want  string
	}{
		{"unknown need", []Step{{Name: "node-image", Needs: []string{"rootfs"}, Run: noop}}, "node-image needs rootfs, which is not in the plan"},
		{"duplicate", []Step{{Name: "kind", Run: noop}, {Name: "kind", Run: noop}}, "two steps are called kind"},
		{"cycle", []Step{{Name: "a", Needs: []string{"b"}, Run: noop}, {Name: "b", Needs: []string{"a"}, Run: noop}}, "cycle: a → b → a"},
		{"no run", []Step{{Name: "a"}}, "step a has no Run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.steps)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to say %q", err, tc.want)
			}
			if _, err := Run(context.Background(), Options{Log: quiet(t)}, tc.steps...); err == nil {
				t.Fatal("Run accepted an invalid plan")
			}
		})
	}
}

func TestProgressLines(t *testing.T) {
	dir := t.TempDir()
	// This machine measured the steps before: a cold run of a then b takes
	// 30 min, and now only b is to build (a is fresh and keyed).
	writeState(t, dir, map[string]time.Duration{"a": 20 * time.Minute, "b": 10 * time.Minute})
	var mu sync.Mutex
	var lines []string
	log := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, fmt.Sprintf(format, args...))
	}
	steps := []Step{
		{Name: "a", Uses: []Resource{CPU}, Fresh: func(context.Context) bool { return true }, Run: func(context.Context) error { return nil }},
		{Name: "b", Needs: []string{"a"}, Uses: []Resource{CPU}, Fresh: func(context.Context) bool { return false }, Run: func(context.Context) error { return nil }},
	}
	if _, err := Run(context.Background(), Options{StateDir: dir, Log: log}, steps...); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"build: 1 of 2 steps to build, about 10 min; a cold run takes about 30 min on this machine",
		"build: [1/2] a: cached",
		"build: b: building (about 10 min)",
	}
	if len(lines) < len(want)+2 {
		t.Fatalf("lines:\n%s", strings.Join(lines, "\n"))
	}
	for i, w := range want {
		if lines[i] != w {
			t.Errorf("line %d: %q, want %q", i, lines[i], w)
		}
	}
	if !strings.HasPrefix(lines[3], "build: [2/2] b: done in ") {
		t.Errorf("line 3: %q, want b's end with its time", lines[3])
	}
	if !strings.HasPrefix(lines[4], "build: all 2 steps done in ") {
		t.Errorf("line 4: %q, want the summary", lines[4])
	}

	// Warm: nothing to build, nothing said.
	lines = nil
	steps[1].Fresh = func(context.Context) bool { return true }
	if _, err := Run(context.Background(), Options{StateDir: dir, Log: log}, steps...); err != nil {
		t.Fatal(err)
	}
	if len(lines) != 0 {
		t.Errorf("a warm run logged:\n%s", strings.Join(lines, "\n"))
	}
}

func TestEstimateFollowsSlots(t *testing.T) {
	r := &runner{o: Options{Slots: map[Resource]int{CPU: 1, IO: 1}}, stored: map[string]record{}}
	r.defaults()
	steps := []Step{
		{Name: "k1", Uses: []Resource{CPU}, Estimate: 10 * time.Minute},
		{Name: "k2", Uses: []Resource{CPU}, Estimate: 10 * time.Minute},
		{Name: "deb", Uses: []Resource{IO}, Estimate: 15 * time.Minute},
		{Name: "img", Needs: []string{"k1", "deb"}, Uses: []Resource{IO}, Estimate: time.Minute},
	}
	for i := range steps {
		steps[i].Run = func(context.Context) error { return nil }
	}
	_, order, err := graph(steps)
	if err != nil {
		t.Fatal(err)
	}
	r.order = order
	all := func(*node) bool { return true }
	r.prioritize(all)
	// One CPU slot: k1 and k2 one after the other (20 min); deb alongside
	// (15); img after k1 (the longer chain starts first, so k1 ends at
	// 10) and deb (15): 16. The whole: 20 min.
	if got := r.simulate(all, nil); got != 20*time.Minute {
		t.Errorf("estimate %s, want 20m", got)
	}
	r.o.Slots[CPU] = 2
	if got := r.simulate(all, nil); got != 16*time.Minute {
		t.Errorf("with two CPU slots: estimate %s, want 16m", got)
	}
}
