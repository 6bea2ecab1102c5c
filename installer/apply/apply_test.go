package apply

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/diff"
	"onprem.dev/onprem/installer/render"
)

// fakeReleaser records the order and overlap of applies.
type fakeReleaser struct {
	mu       sync.Mutex
	releases map[string]*ReleaseInfo
	order    []string
	running  int
	peak     int
	fail     map[string]bool
	delay    time.Duration
	// manifests are the manifests applied, by component.
	manifests map[string]string
}

func (f *fakeReleaser) Last(_ context.Context, name string) (*ReleaseInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.releases[name]; ok {
		cp := *r
		return &cp, nil
	}
	return nil, nil
}

func (f *fakeReleaser) Apply(_ context.Context, req Request) (int, error) {
	f.mu.Lock()
	f.running++
	if f.running > f.peak {
		f.peak = f.running
	}
	f.order = append(f.order, req.Component.Name)
	if f.manifests == nil {
		f.manifests = map[string]string{}
	}
	f.manifests[req.Component.Name] = req.Manifest
	f.mu.Unlock()
	time.Sleep(f.delay)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running--
	if f.fail[req.Component.Name] {
		return 0, errors.New("timed out waiting for the condition")
	}
	r := f.releases[req.Component.Name]
	if r == nil {
		r = &ReleaseInfo{}
		f.releases[req.Component.Name] = r
	}
	r.Revision++
	r.Deployed, r.Digest = true, req.Digest
	return r.Revision, nil
}

func comp(name string, deps ...string) *render.Component {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("v1")
	o.SetKind("ConfigMap")
	o.SetName(name)
	return &render.Component{Name: name, Chart: "c", ChartVersion: "1.0.0", DependsOn: deps, Objects: []*unstructured.Unstructured{o}}
}

// platform -> a, b, c (independent) -> d (needs a and b)
func testResult() *render.Result {
	return &render.Result{Namespace: "onprem", Components: []*render.Component{
		comp("platform"), comp("a", "platform"), comp("b", "platform"), comp("c", "platform"), comp("d", "a", "b"),
	}}
}

type recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *recorder) Report(e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func TestApplyOrdersByDependenciesAndBoundsConcurrency(t *testing.T) {
	f := &fakeReleaser{releases: map[string]*ReleaseInfo{}, delay: 30 * time.Millisecond}
	rec := &recorder{}
	rep, err := Apply(context.Background(), Options{Result: testResult(), Releases: f, Concurrency: 2, Reporter: rec})
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, n := range f.order {
		pos[n] = i
	}
	if pos["platform"] != 0 || pos["d"] < pos["a"] || pos["d"] < pos["b"] {
		t.Errorf("order = %v", f.order)
	}
	if f.peak != 2 {
		t.Errorf("peak concurrency = %d, want 2 (three independent components, bound 2)", f.peak)
	}
	for _, c := range rep.Components {
		if c.Action != Installed || c.Revision != 1 {
			t.Errorf("%s: %s rev %d", c.Name, c.Action, c.Revision)
		}
	}
	if len(rec.events) == 0 {
		t.Error("no progress reported")
	}
}

func TestConvergedRerunChangesNothingAndAChangeTouchesOnlyItsComponent(t *testing.T) {
	f := &fakeReleaser{releases: map[string]*ReleaseInfo{}}
	if _, err := Apply(context.Background(), Options{Result: testResult(), Releases: f}); err != nil {
		t.Fatal(err)
	}
	f.order = nil
	rep, err := Apply(context.Background(), Options{Result: testResult(), Releases: f})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.order) != 0 {
		t.Errorf("re-run applied %v", f.order)
	}
	for _, c := range rep.Components {
		if c.Action != Unchanged || c.Revision != 1 {
			t.Errorf("%s: %s rev %d", c.Name, c.Action, c.Revision)
		}
	}
	changed := testResult()
	changed.Components[2].Objects[0].SetLabels(map[string]string{"x": "y"}) // b
	rep, err = Apply(context.Background(), Options{Result: changed, Releases: f})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.order, ",") != "b" {
		t.Errorf("applied %v, want only b", f.order)
	}
	if r, _ := rep.Component("b"); r.Action != Upgraded || r.Revision != 2 {
		t.Errorf("b = %+v", r)
	}
}

// fakeDrift reports drift of the named components, and gives component
// "scaled" its live replicas.
type fakeDrift struct {
	drift map[string][]diff.Drift
	err   map[string]error
}

func (f fakeDrift) Drift(_ context.Context, c *render.Component) ([]diff.Drift, error) {
	return f.drift[c.Name], f.err[c.Name]
}

func (f fakeDrift) ForCluster(_ context.Context, c *render.Component) (*render.Component, error) {
	if c.Name != "scaled" {
		return c, nil
	}
	cp := *c
	o := c.Objects[0].DeepCopy()
	o.SetAnnotations(map[string]string{"live": "kept"})
	cp.Objects = []*unstructured.Unstructured{o}
	return &cp, nil
}

// A component whose configuration did not change but whose live objects
// drifted is applied again, alone, and named with what drifted; a
// comparison that fails fails the component; the objects applied are those
// ForCluster gives.
func TestDriftedComponentIsRepairedAlone(t *testing.T) {
	f := &fakeReleaser{releases: map[string]*ReleaseInfo{}}
	if _, err := Apply(context.Background(), Options{Result: testResult(), Releases: f}); err != nil {
		t.Fatal(err)
	}
	f.order = nil
	rec := &recorder{}
	d := fakeDrift{drift: map[string][]diff.Drift{"c": {{Kind: "Deployment", Name: "c", Fields: []string{"image"}}, {Kind: "Service", Name: "c", Deleted: true}}}}
	rep, err := Apply(context.Background(), Options{Result: testResult(), Releases: f, Drift: d, Reporter: rec})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.order, ",") != "c" {
		t.Errorf("applied %v, want only c", f.order)
	}
	for _, c := range rep.Components {
		switch {
		case c.Name == "c":
			if c.Action != Repaired || c.Revision != 2 || strings.Join(c.Repaired, "; ") != "Deployment/c image; Service/c (deleted)" {
				t.Errorf("c = %+v", c)
			}
		case c.Action != Unchanged || c.Revision != 1:
			t.Errorf("%s: %s rev %d", c.Name, c.Action, c.Revision)
		}
	}
	var lines []string
	for _, e := range rec.events {
		if e.Component == "c" {
			lines = append(lines, describe(e))
		}
	}
	if !strings.Contains(strings.Join(lines, "\n"), "repaired, revision 2") || !strings.Contains(strings.Join(lines, "\n"), "reverted Deployment/c image; Service/c (deleted)") {
		t.Errorf("progress of c: %q", lines)
	}

	f.order = nil
	_, err = Apply(context.Background(), Options{Result: testResult(), Releases: f, Drift: fakeDrift{err: map[string]error{"b": errors.New("forbidden")}}})
	var fe *FailedError
	if !errors.As(err, &fe) || strings.Join(fe.Components, ",") != "b" || len(f.order) != 0 {
		t.Errorf("a comparison that fails: %v, applied %v", err, f.order)
	}

	res := testResult()
	res.Components = append(res.Components, comp("scaled", "platform"))
	if _, err := Apply(context.Background(), Options{Result: res, Releases: f, Drift: fakeDrift{}}); err != nil {
		t.Fatal(err)
	}
	if m := f.manifests["scaled"]; !strings.Contains(m, "live: kept") {
		t.Errorf("the manifest applied is not ForCluster's:\n%s", m)
	}
	if r := f.releases["scaled"]; r.Digest != Digest(comp("scaled"), mustManifest(t, comp("scaled"))) {
		t.Error("the digest is not the rendered component's")
	}
}

func mustManifest(t *testing.T, c *render.Component) string {
	t.Helper()
	m, err := Manifest(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestFailureSkipsDependentsAndStopsNewWork(t *testing.T) {
	f := &fakeReleaser{releases: map[string]*ReleaseInfo{}, fail: map[string]bool{"a": true}}
	rep, err := Apply(context.Background(), Options{Result: testResult(), Releases: f, Concurrency: 1})
	var fe *FailedError
	if !errors.As(err, &fe) || len(fe.Components) != 1 || fe.Components[0] != "a" {
		t.Fatalf("err = %v", err)
	}
	a, _ := rep.Component("a")
	d, _ := rep.Component("d")
	if a.Action != Failed || !strings.Contains(a.Error, "timed out") {
		t.Errorf("a = %+v", a)
	}
	if d.Action != Skipped || !strings.Contains(d.Error, "dependency a") {
		t.Errorf("d = %+v", d)
	}
	// platform was applied before the failure and stays: nothing is
	// removed to recover.
	if p, _ := rep.Component("platform"); p.Action != Installed {
		t.Errorf("platform = %+v", p)
	}
}

func TestManifestLeavesTheNamespaceOut(t *testing.T) {
	c := comp("platform")
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName("onprem")
	c.Objects = append(c.Objects, ns)
	m, err := Manifest(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(m, "kind: Namespace") || !strings.Contains(m, "kind: ConfigMap") {
		t.Errorf("manifest:\n%s", m)
	}
	other := comp("platform")
	other.ChartVersion = "1.0.1"
	if Digest(c, m) == Digest(other, m) {
		t.Error("digest ignores the chart version")
	}
}

// waitReleaser fails "bad" once "slow" has begun applying (so that slow
// is in flight, not merely queued, when bad fails) and waits for the
// others until their wait context ends (or a minute).
type waitReleaser struct {
	fakeReleaser
	slowStarted chan struct{}
}

func (f *waitReleaser) Apply(ctx context.Context, req Request) (int, error) {
	if req.Component.Name == "bad" {
		select {
		case <-f.slowStarted:
		case <-time.After(time.Minute):
		}
		return 0, errors.New("bad: not ready")
	}
	if req.Component.Name == "platform" {
		return f.fakeReleaser.Apply(ctx, req)
	}
	if req.Component.Name == "slow" {
		close(f.slowStarted)
	}
	select {
	case <-req.Wait.Done():
		return 0, errors.New("context canceled")
	case <-time.After(time.Minute):
		return 1, nil
	}
}

// With StopOnFailure (an upgrade), the components still waiting when one
// fails stop waiting at once and say why.
func TestStopOnFailureEndsTheOtherWaits(t *testing.T) {
	res := &render.Result{Namespace: "onprem", Components: []*render.Component{comp("platform"), comp("bad", "platform"), comp("slow", "platform")}}
	f := &waitReleaser{fakeReleaser: fakeReleaser{releases: map[string]*ReleaseInfo{}}, slowStarted: make(chan struct{})}
	start := time.Now()
	rep, err := Apply(context.Background(), Options{Result: res, Releases: f, StopOnFailure: true, Timeout: time.Hour})
	var fe *FailedError
	var other *OtherFailedError
	if !errors.As(err, &fe) || !errors.As(err, &other) || other.Component != "bad" || time.Since(start) > 30*time.Second {
		t.Fatalf("err = %v after %s", err, time.Since(start))
	}
	if slow, _ := rep.Component("slow"); slow.Action != Failed || !strings.Contains(slow.Error, "component bad failed") {
		t.Errorf("slow = %+v", slow)
	}
	if !strings.Contains(err.Error(), "bad: bad: not ready") {
		t.Errorf("the error does not carry the cause: %v", err)
	}
}
