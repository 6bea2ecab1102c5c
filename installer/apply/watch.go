package apply

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/fault"
	"onprem.dev/onprem/installer/render"
)

// While Helm waits for a component (kstatus: "not ready yet"), onprem
// looks at the component's pods, their controllers and their events every
// watchEvery and judges them with installer/fault, the classification
// 'onprem doctor' reports with. A fault that waiting cannot fix ends the
// wait at once (the component fails with the cause and its fix; an
// upgrade rolls back); a transient one is what the progress line says the
// component waits for.
const (
	watchEvery = time.Second
	// waitingEvery repeats an unchanged waiting line this often.
	waitingEvery = 15 * time.Second
)

// StuckError says that a component cannot become ready by waiting: the
// fault (as 'onprem doctor' names it under the same analyzer) and its fix.
type StuckError struct {
	Component string
	Fault     fault.Fault
}

func (e *StuckError) Error() string {
	var b strings.Builder
	b.WriteString(e.Fault.Title)
	if len(e.Fault.Evidence) > 0 {
		fmt.Fprintf(&b, " (%s)", e.Fault.Evidence[0])
	}
	fmt.Fprintf(&b, "; waiting cannot fix this, so onprem stopped waiting ('onprem doctor' reports it under %s, with all its evidence); fix: %s", e.Fault.Analyzer, e.Fault.Remediation)
	return b.String()
}

// observer lists the objects of the namespaces components wait in: each
// kind once per namespace and interval, however many components wait
// there (an install waits for up to DefaultConcurrency at once).
type observer struct {
	client kubernetes.Interface
	every  time.Duration
	mu     sync.Mutex
	spaces map[string]*nsLook
}

type nsLook struct {
	mu   sync.Mutex
	at   time.Time
	objs *nsObjects
}

// nsObjects are one namespace's objects as last listed.
type nsObjects struct {
	fault.Objects
	Deployments []appsv1.Deployment
}

func newObserver(c kubernetes.Interface) *observer {
	return &observer{client: c, every: watchEvery, spaces: map[string]*nsLook{}}
}

// objects returns the namespace's objects, listed at most every ago. Only
// a list that succeeded is kept: a failed one (a caller's wait that ended
// mid-list cancels its own list; the API server busy for a moment) is
// tried again by the next caller, never handed to the other components
// waiting in the namespace. (Kept, one component's end cancelled the list
// that a component starting beside it then read as its first look, and
// that component was waited on with no watcher: the kind e2e saw an image
// the registry refused waited on for the whole timeout.)
func (ob *observer) objects(ctx context.Context, ns string) (*nsObjects, error) {
	ob.mu.Lock()
	l := ob.spaces[ns]
	if l == nil {
		l = &nsLook{}
		ob.spaces[ns] = l
	}
	ob.mu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.objs != nil && time.Since(l.at) < ob.every {
		return l.objs, nil
	}
	objs, err := listNamespace(ctx, ob.client, ns)
	if err != nil {
		return nil, err
	}
	l.objs, l.at = objs, time.Now()
	return objs, nil
}

// refresh makes the next objects call of every namespace list anew.
func (ob *observer) refresh() {
	ob.mu.Lock()
	defer ob.mu.Unlock()
	for _, l := range ob.spaces {
		l.mu.Lock()
		l.at = time.Time{}
		l.mu.Unlock()
	}
}

// listNamespace reads what the watch judges, from the API server's cache
// (resourceVersion 0): cheap, and at most a moment old.
func listNamespace(ctx context.Context, c kubernetes.Interface, ns string) (*nsObjects, error) {
	lo := metav1.ListOptions{ResourceVersion: "0"}
	o := &nsObjects{Objects: fault.Objects{Namespace: ns}}
	pods, err := c.CoreV1().Pods(ns).List(ctx, lo)
	if err != nil {
		return nil, fmt.Errorf("listing pods: %w", err)
	}
	o.Pods = pods.Items
	rs, err := c.AppsV1().ReplicaSets(ns).List(ctx, lo)
	if err != nil {
		return nil, fmt.Errorf("listing replicasets: %w", err)
	}
	o.ReplicaSets = rs.Items
	deps, err := c.AppsV1().Deployments(ns).List(ctx, lo)
	if err != nil {
		return nil, fmt.Errorf("listing deployments: %w", err)
	}
	o.Deployments = deps.Items
	sts, err := c.AppsV1().StatefulSets(ns).List(ctx, lo)
	if err != nil {
		return nil, fmt.Errorf("listing statefulsets: %w", err)
	}
	o.StatefulSets = sts.Items
	ds, err := c.AppsV1().DaemonSets(ns).List(ctx, lo)
	if err != nil {
		return nil, fmt.Errorf("listing daemonsets: %w", err)
	}
	o.DaemonSets = ds.Items
	jobs, err := c.BatchV1().Jobs(ns).List(ctx, lo)
	if err != nil {
		return nil, fmt.Errorf("listing jobs: %w", err)
	}
	o.Jobs = jobs.Items
	ev, err := c.CoreV1().Events(ns).List(ctx, lo)
	if err != nil {
		return nil, fmt.Errorf("listing events: %w", err)
	}
	o.Events = ev.Items
	return o, nil
}

// workload is one pod controller of a component.
type workload struct{ kind, namespace, name string }

// workloads returns the pod controllers among a component's objects.
func workloads(c *render.Component, namespace string) []workload {
	var out []workload
	for _, o := range c.Objects {
		kind, group := o.GetKind(), o.GroupVersionKind().Group
		if !(group == "apps" && (kind == "Deployment" || kind == "StatefulSet" || kind == "DaemonSet")) && !(group == "batch" && kind == "Job") {
			continue
		}
		ns := o.GetNamespace()
		if ns == "" {
			ns = namespace
		}
		out = append(out, workload{kind: kind, namespace: ns, name: o.GetName()})
	}
	return out
}

// eventMark is what an event looked like when the wait began.
type eventMark struct {
	count int32
	last  time.Time
}

// watcher follows one component while Helm waits for it.
type watcher struct {
	component string
	work      []workload
	ob        *observer
	restarts  fault.Restarts
	// configAtRunTime: the component's pods may wait for Secrets its own
	// components make (render.Component.ConfigAtRunTime).
	configAtRunTime bool
	// before holds the events of the namespaces as they were when the
	// apply began: an event counts when it is new or happened again. It
	// is nil until a first look succeeded (prime).
	before map[types.UID]eventMark
}

// newWatcher looks at the component's namespaces once, before anything is
// applied, to know which events are old. It returns nil when the component
// has no pods to watch (the wait then is Helm's alone). A first look that
// fails does not leave the component unwatched: the watcher takes its
// first successful look instead (events up to then count as old, which
// only hides a repeated event's evidence: a pod's own status still tells
// its fault).
func newWatcher(ctx context.Context, ob *observer, c *render.Component, namespace string) *watcher {
	w := &watcher{component: c.Name, work: workloads(c, namespace), ob: ob, configAtRunTime: c.ConfigAtRunTime}
	if len(w.work) == 0 {
		return nil
	}
	w.prime(ctx)
	return w
}

// prime records the events of the component's namespaces as old; it
// returns false (and records nothing) when a namespace cannot be read.
func (w *watcher) prime(ctx context.Context) bool {
	before := map[types.UID]eventMark{}
	for _, ns := range w.namespaces() {
		objs, err := w.ob.objects(ctx, ns)
		if err != nil {
			return false
		}
		for i := range objs.Events {
			e := &objs.Events[i]
			before[e.UID] = mark(e)
		}
	}
	w.before = before
	return true
}

func mark(e *corev1.Event) eventMark {
	n := e.Count
	if e.Series != nil {
		n += e.Series.Count
	}
	return eventMark{count: n, last: fault.EventTime(e)}
}

func (w *watcher) fresh(e *corev1.Event) bool {
	m, ok := w.before[e.UID]
	return !ok || m != mark(e)
}

// errNotPrimed: the watcher could not yet read its namespaces.
var errNotPrimed = errors.New("the component's namespaces could not be read yet")

func (w *watcher) namespaces() []string {
	var out []string
	for _, x := range w.work {
		if !contains(out, x.namespace) {
			out = append(out, x.namespace)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// progress is what a look found: the definitive fault, if any, and
// otherwise how far the component is and what it waits for.
type progress struct {
	stuck          *fault.Fault
	ready, desired int
	waiting        string
	since          time.Time
}

// line is the waiting line: "0/1 ready, pulling image".
func (p progress) line() string {
	s := fmt.Sprintf("%d/%d ready", p.ready, p.desired)
	if p.waiting != "" {
		s += ", " + p.waiting
	}
	return s
}

// look judges the component's current pods and controllers.
func (w *watcher) look(ctx context.Context) (progress, error) {
	var p progress
	if w.before == nil && !w.prime(ctx) {
		return p, errNotPrimed
	}
	for _, ns := range w.namespaces() {
		objs, err := w.ob.objects(ctx, ns)
		if err != nil {
			return p, err
		}
		mine := w.pick(objs, ns, &p)
		faults := fault.Analyze(mine, fault.Input{
			Component:       func(string, metav1.Object) string { return w.component },
			Fresh:           w.fresh,
			Restarts:        &w.restarts,
			ConfigAtRunTime: w.configAtRunTime,
		})
		for i := range faults {
			f := faults[i]
			if f.Definitive && p.stuck == nil {
				p.stuck = &f
			}
			if !f.Definitive && p.waiting == "" && f.Waiting != "" {
				p.waiting, p.since = f.Waiting, f.Since
			}
		}
	}
	return p, nil
}

// pick returns the objects of the component's current revision in ns
// (the pods of the Deployments' newest ReplicaSets, of the StatefulSets'
// update revision, of the DaemonSets' generation, of the Jobs), and counts
// their ready pods. Pods of an earlier revision on their way out are not
// judged: a re-run that fixes a broken component must not fail on them.
func (w *watcher) pick(objs *nsObjects, ns string, p *progress) *fault.Objects {
	out := &fault.Objects{Namespace: ns}
	names := map[string]bool{} // Kind/name of every object whose events count
	pods := map[types.UID]bool{}
	owned := func(pod *corev1.Pod, kind, name string) bool {
		for _, r := range pod.OwnerReferences {
			if r.Kind == kind && r.Name == name {
				return true
			}
		}
		return false
	}
	addPods := func(match func(*corev1.Pod) bool, desired int) {
		p.desired += desired
		for i := range objs.Pods {
			pod := &objs.Pods[i]
			if pods[pod.UID] || !match(pod) {
				continue
			}
			pods[pod.UID] = true
			out.Pods = append(out.Pods, *pod)
			names["Pod/"+pod.Name] = true
			if podReady(pod) {
				p.ready++
			}
		}
	}
	for _, x := range w.work {
		if x.namespace != ns {
			continue
		}
		names[x.kind+"/"+x.name] = true
		switch x.kind {
		case "Deployment":
			d := find(objs.Deployments, x.name, func(d *appsv1.Deployment) string { return d.Name })
			if d == nil {
				continue
			}
			want := replicas(d.Spec.Replicas)
			rs := currentReplicaSet(objs.ReplicaSets, d)
			if rs == nil {
				p.desired += want
				continue
			}
			out.ReplicaSets = append(out.ReplicaSets, *rs)
			names["ReplicaSet/"+rs.Name] = true
			addPods(func(pod *corev1.Pod) bool { return owned(pod, "ReplicaSet", rs.Name) }, want)
		case "StatefulSet":
			s := find(objs.StatefulSets, x.name, func(s *appsv1.StatefulSet) string { return s.Name })
			if s == nil {
				continue
			}
			out.StatefulSets = append(out.StatefulSets, *s)
			want := replicas(s.Spec.Replicas)
			if s.Status.ObservedGeneration < s.Generation {
				p.desired += want
				continue
			}
			rev := s.Status.UpdateRevision
			addPods(func(pod *corev1.Pod) bool {
				return owned(pod, "StatefulSet", s.Name) && (rev == "" || pod.Labels[appsv1.ControllerRevisionHashLabelKey] == rev)
			}, want)
		case "DaemonSet":
			d := find(objs.DaemonSets, x.name, func(d *appsv1.DaemonSet) string { return d.Name })
			if d == nil {
				continue
			}
			out.DaemonSets = append(out.DaemonSets, *d)
			want := int(d.Status.DesiredNumberScheduled)
			if d.Status.ObservedGeneration < d.Generation {
				p.desired += want
				continue
			}
			gen := strconv.FormatInt(d.Generation, 10)
			addPods(func(pod *corev1.Pod) bool {
				g, ok := pod.Labels[daemonSetGenerationLabel]
				return owned(pod, "DaemonSet", d.Name) && (!ok || g == gen)
			}, want)
		case "Job":
			j := find(objs.Jobs, x.name, func(j *batchv1.Job) string { return j.Name })
			if j == nil {
				continue
			}
			out.Jobs = append(out.Jobs, *j)
			want := 1
			if j.Spec.Completions != nil {
				want = int(*j.Spec.Completions)
			}
			p.desired += want
			p.ready += int(j.Status.Succeeded)
			for i := range objs.Pods {
				pod := &objs.Pods[i]
				for _, r := range pod.OwnerReferences {
					if r.UID == j.UID && !pods[pod.UID] {
						pods[pod.UID] = true
						out.Pods = append(out.Pods, *pod)
						names["Pod/"+pod.Name] = true
					}
				}
			}
		}
	}
	for _, e := range objs.Events {
		if names[e.InvolvedObject.Kind+"/"+e.InvolvedObject.Name] {
			out.Events = append(out.Events, e)
		}
	}
	return out
}

func find[T any](list []T, name string, nameOf func(*T) string) *T {
	for i := range list {
		if nameOf(&list[i]) == name {
			return &list[i]
		}
	}
	return nil
}

func replicas(n *int32) int {
	if n == nil {
		return 1
	}
	return int(*n)
}

// daemonSetGenerationLabel is the DaemonSet controller's label of the
// generation a pod was made from.
const daemonSetGenerationLabel = "pod-template-generation"

// revisionAnnotation numbers a Deployment's rollouts, on it and on each
// of its ReplicaSets.
const revisionAnnotation = "deployment.kubernetes.io/revision"

// currentReplicaSet returns the ReplicaSet of a Deployment's current
// rollout, or nil while the Deployment controller has not made it yet.
func currentReplicaSet(all []appsv1.ReplicaSet, d *appsv1.Deployment) *appsv1.ReplicaSet {
	if d.Status.ObservedGeneration < d.Generation {
		return nil
	}
	rev := d.Annotations[revisionAnnotation]
	for i := range all {
		rs := &all[i]
		if rs.Annotations[revisionAnnotation] != rev {
			continue
		}
		for _, r := range rs.OwnerReferences {
			if r.Kind == "Deployment" && r.Name == d.Name && r.UID == d.UID {
				return rs
			}
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// run looks every watchEvery until ctx ends: it cancels stop with a
// *StuckError at the first fault that waiting cannot fix, and reports
// what the component waits for when that changes (and every
// waitingEvery). It returns the last progress line.
func (w *watcher) run(ctx context.Context, stop context.CancelCauseFunc, report func(progress)) {
	t := time.NewTicker(watchEvery)
	defer t.Stop()
	var said string
	var saidAt time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p, err := w.look(ctx)
		if err != nil {
			continue // a failed list is tried again; Helm's wait goes on
		}
		if p.stuck != nil {
			stop(&StuckError{Component: w.component, Fault: *p.stuck})
			return
		}
		if p.desired == 0 || p.ready >= p.desired && p.waiting == "" {
			continue
		}
		if l := p.line(); l != said || time.Since(saidAt) >= waitingEvery {
			said, saidAt = l, time.Now()
			report(p)
		}
	}
}
