package upgrade

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
)

// fakeReleases keeps each release's revision and whether it is deployed.
// RollBack calls it from several goroutines.
type fakeReleases struct {
	mu       sync.Mutex
	last     map[string]*apply.ReleaseInfo
	rolled   []string
	failRoll string
	// during, when set, runs inside each Rollback call, unlocked.
	during func(name string)
	// waits are the timeouts each Rollback was given.
	waits map[string]time.Duration
}

func (f *fakeReleases) Last(_ context.Context, name string) (*apply.ReleaseInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last[name], nil
}

func (f *fakeReleases) Rollback(_ context.Context, name string, revision int, wait time.Duration) (int, error) {
	if f.during != nil {
		f.during(name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.waits == nil {
		f.waits = map[string]time.Duration{}
	}
	f.waits[name] = wait
	if name == f.failRoll {
		return 0, errors.New("rollback of " + name + " refused")
	}
	cur := f.last[name]
	f.last[name] = &apply.ReleaseInfo{Revision: cur.Revision + 1, Deployed: true, Status: "deployed", Digest: "d" + name}
	f.rolled = append(f.rolled, name)
	return cur.Revision + 1, nil
}

func (f *fakeReleases) Retire(_ context.Context, name string, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last[name].Status, f.last[name].Deployed = "uninstalled", false
	return nil
}

func TestRollBackReturnsOnlyWhatChangedAndNeverUninstalls(t *testing.T) {
	f := &fakeReleases{last: map[string]*apply.ReleaseInfo{
		"same":     {Revision: 3, Deployed: true},
		"upgraded": {Revision: 4, Deployed: true},
		"failed":   {Revision: 5, Status: "failed"},
		"retired":  {Revision: 2, Status: "uninstalled"},
		"new":      {Revision: 1, Deployed: true},
	}}
	st := &state.State{Components: map[string]state.Component{"upgraded": {Chart: "service", Revision: 4}}}
	before := map[string]int{"same": 3, "upgraded": 3, "failed": 4, "retired": 2, "new": 0, "never-installed": 0}
	rolled, kept, err := RollBack(context.Background(), f, st, before, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"failed", "retired", "upgraded"}; !slices.Equal(rolled, want) || !slices.Equal(slices.Sorted(slices.Values(f.rolled)), want) {
		t.Errorf("rolled back %v (calls %v), want %v", rolled, f.rolled, want)
	}
	if !slices.Equal(kept, []string{"new"}) {
		t.Errorf("kept %v, want [new]", kept)
	}
	if c := st.Components["upgraded"]; c.Revision != 5 || c.Chart != "service" || !strings.Contains(c.Status, "revision 3") || c.Digest != "dupgraded" {
		t.Errorf("record of upgraded = %+v", c)
	}
}

func TestRollBackReportsEveryFailureAndGoesOn(t *testing.T) {
	f := &fakeReleases{failRoll: "a", last: map[string]*apply.ReleaseInfo{
		"a": {Revision: 2, Deployed: true}, "b": {Revision: 2, Deployed: true},
	}}
	rolled, _, err := RollBack(context.Background(), f, &state.State{}, map[string]int{"a": 1, "b": 1}, time.Minute, nil)
	if err == nil || !strings.Contains(err.Error(), "rollback of a refused") || !slices.Equal(rolled, []string{"b"}) {
		t.Errorf("rolled %v, err %v", rolled, err)
	}
}

func TestFailedErrorSaysWhatHappened(t *testing.T) {
	e := &FailedError{Step: "2.7.0 → 2.8.0", Cause: errors.New("component x did not become ready"),
		RolledBack: []string{"x", "y"}, Kept: []string{"z"}, Version: "2.7.0"}
	for _, want := range []string{"2.7.0 → 2.8.0 failed", "x did not become ready", "rolled back x, y", "left installed: z", "at 2.7.0"} {
		if !strings.Contains(e.Error(), want) {
			t.Errorf("%q lacks %q", e.Error(), want)
		}
	}
	e.RollbackErr = errors.New("boom")
	if !strings.Contains(e.Error(), "rolling back FAILED: boom") || !strings.Contains(e.Error(), "onprem rollback") {
		t.Errorf("%q", e.Error())
	}
}

// A service is rolled back after the database it connects to: the
// database's rollback restarts it, and a service restored before would be
// left unready behind it (the kind e2e saw exactly that, with the
// components rolled back in name order).
func TestRollBackRestoresDependenciesFirst(t *testing.T) {
	last := map[string]*apply.ReleaseInfo{}
	before := map[string]int{}
	for _, n := range []string{"api-events", "gitops-api", "rabbitmq", "mongodb", "db-provision", "ingress"} {
		last[n] = &apply.ReleaseInfo{Revision: 4, Deployed: true}
		before[n] = 3
	}
	f := &fakeReleases{last: last}
	st := &state.State{Components: map[string]state.Component{
		"mongodb":      {DependsOn: []string{"ingress"}},
		"rabbitmq":     {DependsOn: []string{"ingress"}},
		"db-provision": {DependsOn: []string{"mongodb"}},
		"gitops-api":   {DependsOn: []string{"db-provision", "rabbitmq", "not-in-this-step"}},
		"api-events":   {DependsOn: []string{"gitops-api"}},
	}}
	rolled, _, err := RollBack(context.Background(), f, st, before, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Levels: ingress; mongodb and rabbitmq; db-provision; gitops-api;
	// api-events. Within a level the calls may come in any order.
	want := []string{"ingress", "mongodb", "rabbitmq", "db-provision", "gitops-api", "api-events"}
	if !slices.Equal(rolled, want) {
		t.Errorf("rolled back %v, want %v", rolled, want)
	}
	at := map[string]int{}
	for i, n := range f.rolled {
		at[n] = i
	}
	if len(at) != len(want) {
		t.Fatalf("rollback calls %v", f.rolled)
	}
	for n, c := range st.Components {
		for _, d := range c.DependsOn {
			if pos, ok := at[d]; ok && pos > at[n] {
				t.Errorf("%s was rolled back before %s, which it depends on (calls %v)", n, d, f.rolled)
			}
		}
	}
}

// The components of one dependency level are rolled back at once, as an
// install applies them: each call here waits until every member of its
// level has begun, which only happens if they run side by side; the
// dependent waits for its level to finish.
func TestRollBackRollsOneLevelBackAtOnce(t *testing.T) {
	level := []string{"audit-manager", "gitops-api", "pipelines-api"}
	last := map[string]*apply.ReleaseInfo{"pipelines-ui": {Revision: 4, Deployed: true}}
	before := map[string]int{"pipelines-ui": 3}
	st := &state.State{Components: map[string]state.Component{"pipelines-ui": {DependsOn: level}}}
	for _, n := range level {
		last[n] = &apply.ReleaseInfo{Revision: 4, Deployed: true}
		before[n] = 3
	}
	var mu sync.Mutex
	started := map[string]bool{}
	all := make(chan struct{})
	f := &fakeReleases{last: last, during: func(name string) {
		if name == "pipelines-ui" {
			mu.Lock()
			defer mu.Unlock()
			if len(started) != len(level) {
				t.Errorf("pipelines-ui began with only %v of its dependencies", started)
			}
			return
		}
		mu.Lock()
		started[name] = true
		if len(started) == len(level) {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: the rest of its level never began alongside it", name)
		}
	}}
	rolled, _, err := RollBack(context.Background(), f, st, before, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(level), "pipelines-ui"); !slices.Equal(rolled, want) {
		t.Errorf("rolled %v, want %v", rolled, want)
	}
}

// Only a component whose objects stop its pods before replacing them (a
// database's StatefulSet) orders a rollback: the provisioning Job and the
// stateless services are passed through to the databases they reach, so
// once the databases are back every service, its UI and the Job go back
// in one level, not in three.
func TestRollBackWaitsOnlyForWhatHoldsDependents(t *testing.T) {
	// A Deployment whose ConfigMap mentions a StatefulSet in its data.
	const deployment = deploymentManifest + "---\napiVersion: v1\nkind: ConfigMap\ndata:\n  note: |\n    kind: StatefulSet\n"
	const statefulSet, job = statefulSetManifest, jobManifest
	manifests := map[string]string{
		"mongodb": statefulSet, "rabbitmq": statefulSet, "db-provision": job,
		"gitops-api": deployment, "gitops-ui": deployment, "broadcaster": deployment,
	}
	last, before := releasesAt(manifests)
	st := &state.State{Components: map[string]state.Component{
		"db-provision": {DependsOn: []string{"mongodb"}},
		"gitops-api":   {DependsOn: []string{"db-provision", "rabbitmq"}},
		"gitops-ui":    {DependsOn: []string{"gitops-api"}},
		// redis is not rolled back: broadcaster passes through it to
		// what it depends on.
		"broadcaster": {DependsOn: []string{"redis"}},
		"redis":       {DependsOn: []string{"rabbitmq"}},
	}}
	holds := map[string]bool{}
	for n, m := range manifests {
		holds[n], _ = rollbackShape(m)
	}
	names := slices.Sorted(maps.Keys(manifests))
	got := dependencyLevels(names, holderDeps(names, st, holds))
	want := [][]string{{"mongodb", "rabbitmq"}, {"broadcaster", "db-provision", "gitops-api", "gitops-ui"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("levels %v, want %v", got, want)
	}

	var progress strings.Builder
	f := &fakeReleases{last: last}
	rolled, _, err := RollBack(context.Background(), f, st, before, time.Minute, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if w := slices.Concat(want...); !slices.Equal(rolled, w) {
		t.Errorf("rolled back %v, want %v", rolled, w)
	}
	for _, n := range names {
		if !strings.Contains(progress.String(), n+" is back at revision 3, ready after ") {
			t.Errorf("the progress does not say when %s was back:\n%s", n, progress.String())
		}
	}
	// A release whose manifest is unknown holds, as before.
	for m, want := range map[string][2]bool{"": {true, false}, job: {false, true}, statefulSet: {true, false}, deployment: {false, false}} {
		if h, o := rollbackShape(m); h != want[0] || o != want[1] {
			t.Errorf("rollbackShape(%q) = holds %v, once %v; want %v", m, h, o, want)
		}
	}
}

func TestDependencyLevelsPutsACycleLastOneByOne(t *testing.T) {
	got := dependencyLevels([]string{"b", "a", "c"}, map[string][]string{"a": {"b"}, "b": {"a"}})
	if want := [][]string{{"c"}, {"a"}, {"b"}}; !reflect.DeepEqual(got, want) {
		t.Errorf("levels %v, want %v", got, want)
	}
}

// A rollback waits for a component about as long as the state says its
// last apply took (half again, at least RollbackFloor), never longer than
// the timeout, and the whole timeout when nothing was recorded. Record
// keeps the time of the last apply that made the component ready.
func TestRollbackWaitsAboutAsLongAsTheApplyTook(t *testing.T) {
	for _, c := range []struct{ took, timeout, want time.Duration }{
		{0, 10 * time.Minute, 10 * time.Minute},
		{2 * time.Second, 10 * time.Minute, RollbackFloor},
		{time.Minute, 10 * time.Minute, 90 * time.Second},
		{time.Minute, 40 * time.Second, 40 * time.Second},
		{time.Second, 10 * time.Second, 10 * time.Second},
	} {
		if got := RollbackTimeout(c.took, c.timeout); got != c.want {
			t.Errorf("RollbackTimeout(%s, %s) = %s, want %s", c.took, c.timeout, got, c.want)
		}
	}

	f := &fakeReleases{last: map[string]*apply.ReleaseInfo{"fast": {Revision: 2, Deployed: true}, "slow": {Revision: 2, Deployed: true}, "unknown": {Revision: 2, Deployed: true}}}
	st := &state.State{Components: map[string]state.Component{"fast": {Took: 3 * time.Second}, "slow": {Took: 2 * time.Minute}}}
	if _, _, err := RollBack(context.Background(), f, st, map[string]int{"fast": 1, "slow": 1, "unknown": 1}, 5*time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if want := map[string]time.Duration{"fast": RollbackFloor, "slow": 3 * time.Minute, "unknown": 5 * time.Minute}; !reflect.DeepEqual(f.waits, want) {
		t.Errorf("rollback waits %v, want %v", f.waits, want)
	}
	if st.Components["fast"].Took != 3*time.Second {
		t.Errorf("a rollback changed the recorded apply time: %+v", st.Components["fast"])
	}

	res := &render.Result{Components: []*render.Component{{Name: "up"}, {Name: "down"}, {Name: "same"}}}
	st = &state.State{Components: map[string]state.Component{"up": {Took: time.Minute}, "down": {Took: 20 * time.Second}, "same": {Took: 5 * time.Second}}}
	Record(st, res, &apply.Report{Components: []apply.ComponentResult{
		{Name: "up", Action: apply.Upgraded, Elapsed: 7 * time.Second},
		{Name: "down", Action: apply.Failed, Elapsed: 3 * time.Second, Error: "stuck"},
		{Name: "same", Action: apply.Unchanged, Elapsed: time.Millisecond}}})
	for name, want := range map[string]time.Duration{"up": 7 * time.Second, "down": 20 * time.Second, "same": 5 * time.Second} {
		if got := st.Components[name].Took; got != want {
			t.Errorf("recorded apply time of %s = %s, want %s", name, got, want)
		}
	}
}

// A task Job whose pod cannot pull its image (the registry says it does
// not exist) fails at once, named as doctor names it, not at its deadline.
func TestRunJobFailsAtOnceOnAnImageTheRegistryDoesNotHave(t *testing.T) {
	c := fake.NewClientset()
	job := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "onprem-migration-x"},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{"restartPolicy": "Never",
			"containers": []any{map[string]any{"name": "migrate", "image": "registry.example.com/onprem/migrate:9.9.9"}}}}}}}
	go func() {
		time.Sleep(300 * time.Millisecond)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "onprem-migration-x-abcde", Namespace: "onprem", Labels: map[string]string{batchv1.JobNameLabel: "onprem-migration-x"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "migrate", Image: "registry.example.com/onprem/migrate:9.9.9"}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "migrate", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
				Reason: "ErrImagePull", Message: "rpc error: code = NotFound desc = failed to pull and unpack image: not found"}}}}}}
		if _, err := c.CoreV1().Pods("onprem").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	err := RunJob(context.Background(), c, "onprem", job, time.Hour)
	var jf *JobFailedError
	if !errors.As(err, &jf) || !strings.Contains(err.Error(), "the registry says it does not exist") || !strings.Contains(err.Error(), "fix: push the image") {
		t.Fatalf("err = %v", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("failed after %s", took)
	}
}

// Manifests of one object each, for a release's last revision.
const (
	statefulSetManifest = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: x\n"
	jobManifest         = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: x\n"
	deploymentManifest  = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\n"
)

// releasesAt makes each release deployed at revision 4 with its manifest,
// and before (what a rollback returns to) at 3.
func releasesAt(manifests map[string]string) (map[string]*apply.ReleaseInfo, map[string]int) {
	last := map[string]*apply.ReleaseInfo{}
	before := map[string]int{}
	for n, m := range manifests {
		last[n] = &apply.ReleaseInfo{Revision: 4, Deployed: true, Manifest: m}
		before[n] = 3
	}
	return last, before
}

// settlingReleases can also wait for a component to be ready again.
type settlingReleases struct {
	*fakeReleases
	mu       sync.Mutex
	settled  []string
	failWith error
}

func (s *settlingReleases) Ready(_ context.Context, name string, _ time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settled = append(s.settled, name)
	return s.failWith
}

// With releases that can wait again, a service goes back beside the
// database it reaches (its Rollback begins before the database's ends),
// with the database's bound on top of its own; the provisioning Job still
// starts only once the database is back; and the service, ready before
// the database was, is waited for once more, so the rollback ends with
// it ready.
func TestRollBackTakesServicesBackBesideTheirDatabases(t *testing.T) {
	manifests := map[string]string{"mongodb": statefulSetManifest, "db-provision": jobManifest, "gitops-api": deploymentManifest, "broadcaster": deploymentManifest}
	newFixture := func() (*settlingReleases, *state.State, map[string]int, *sync.Map) {
		last, before := releasesAt(manifests)
		st := &state.State{Components: map[string]state.Component{
			"mongodb":      {Took: 40 * time.Second},
			"db-provision": {DependsOn: []string{"mongodb"}},
			"gitops-api":   {DependsOn: []string{"db-provision"}, Took: 20 * time.Second},
		}}
		var events sync.Map // name+":began" / name+":ended" -> struct{}
		gitopsBegan := make(chan struct{})
		f := &fakeReleases{last: last, during: func(name string) {
			events.Store(name+":began", struct{}{})
			switch name {
			case "gitops-api":
				close(gitopsBegan)
			case "mongodb":
				select {
				case <-gitopsBegan:
				case <-time.After(10 * time.Second):
					t.Error("gitops-api's rollback did not begin while MongoDB's was under way")
				}
				time.Sleep(50 * time.Millisecond) // gitops-api is ready first
				events.Store("mongodb:ended", struct{}{})
			case "db-provision":
				if _, ok := events.Load("mongodb:ended"); !ok {
					t.Error("the provisioning Job began before MongoDB was back")
				}
			}
		}}
		return &settlingReleases{fakeReleases: f}, st, before, &events
	}

	rel, st, before, _ := newFixture()
	var progress strings.Builder
	rolled, _, err := RollBack(context.Background(), rel, st, before, 5*time.Minute, &progress)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"broadcaster", "mongodb", "db-provision", "gitops-api"}; !slices.Equal(rolled, want) {
		t.Errorf("rolled back %v, want %v", rolled, want)
	}
	// gitops-api's own bound (the floor) and MongoDB's (60 s).
	if w, want := rel.waits["gitops-api"], RollbackFloor+60*time.Second; w != want {
		t.Errorf("gitops-api waited up to %s, want %s (its own %s, the floor, and MongoDB's 60s)", w, want, RollbackFloor)
	}
	if !slices.Equal(rel.settled, []string{"gitops-api"}) {
		t.Errorf("waited again for %v, want gitops-api alone (broadcaster reaches no database of this rollback; the Job ran after MongoDB)", rel.settled)
	}
	if !strings.Contains(progress.String(), "gitops-api is ready again since mongodb is back") {
		t.Errorf("the progress does not say gitops-api was waited for again:\n%s", progress.String())
	}

	// Not ready again: the rollback says so, naming the component and
	// the database.
	rel, st, before, _ = newFixture()
	rel.failWith = errors.New("context deadline exceeded")
	rolled, _, err = RollBack(context.Background(), rel, st, before, 5*time.Minute, nil)
	if err == nil || !strings.Contains(err.Error(), "gitops-api is back at revision 3 but not ready again since mongodb is back") {
		t.Errorf("err = %v", err)
	}
	if !slices.Contains(rolled, "gitops-api") {
		t.Errorf("gitops-api is back at its revision and must be listed as rolled back: %v", rolled)
	}
}
