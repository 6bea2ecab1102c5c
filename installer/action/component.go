package action

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/installer/state"
)

// ComponentInspect reads one component of the installed platform: its
// pods with their containers' state and the last lines of their logs, the
// events about them, and its Helm history. Log lines pass through the
// redaction of every generated Secret's values.
type ComponentInspect struct {
	Target
	Name string
	// LogLines is how many last lines of each container's log are read
	// (DefaultLogLines when zero).
	LogLines int64
}

// DefaultLogLines is how many log lines ComponentInspect reads.
const DefaultLogLines = 50

// ComponentDetail is what ComponentInspect read.
type ComponentDetail struct {
	Name      string              `json:"name"`
	Namespace string              `json:"namespace"`
	Pods      []PodDetail         `json:"pods"`
	Events    []EventDetail       `json:"events,omitempty"`
	History   []apply.ReleaseInfo `json:"history,omitempty"`
}

// PodDetail is one pod of a component.
type PodDetail struct {
	Name       string            `json:"name"`
	Phase      string            `json:"phase"`
	Ready      bool              `json:"ready"`
	Node       string            `json:"node,omitempty"`
	Started    time.Time         `json:"started,omitzero"`
	Containers []ContainerDetail `json:"containers"`
}

// ContainerDetail is one container of a pod.
type ContainerDetail struct {
	Name     string `json:"name"`
	Image    string `json:"image"`
	Ready    bool   `json:"ready"`
	Restarts int32  `json:"restarts"`
	// State: running, waiting: REASON, or terminated: REASON.
	State string `json:"state"`
	// Log holds the last lines of its log, redacted; LogError says why
	// there are none.
	Log      []string `json:"log,omitempty"`
	LogError string   `json:"logError,omitempty"`
}

// EventDetail is one event about the component's pods or workloads.
type EventDetail struct {
	Time    time.Time `json:"time"`
	Type    string    `json:"type"`
	Reason  string    `json:"reason"`
	Object  string    `json:"object"`
	Message string    `json:"message"`
	Count   int32     `json:"count,omitempty"`
}

// Run reads the component.
func (c *ComponentInspect) Run(ctx context.Context) (*ComponentDetail, error) {
	if c.Name == "" {
		return nil, inputErr(fmt.Errorf("name the component ('onprem status' lists them)"))
	}
	ns, err := c.Target.namespace(ctx)
	if err != nil {
		return nil, err
	}
	cl, err := connect(ctx, c.Conn, c.Cluster)
	if err != nil {
		return nil, err
	}
	st, err := state.NewStore(cl.Client, ns).Load(ctx)
	if err != nil {
		return nil, err
	}
	if _, ok := st.Components[c.Name]; !ok {
		names := make([]string, 0, len(st.Components))
		for n := range st.Components {
			names = append(names, n)
		}
		sort.Strings(names)
		return nil, inputErr(fmt.Errorf("component %q is not installed in namespace %s (installed: %s)", c.Name, ns, strings.Join(names, ", ")))
	}
	lines := c.LogLines
	if lines <= 0 {
		lines = DefaultLogLines
	}
	out := &ComponentDetail{Name: c.Name, Namespace: ns}
	pods, workloads, err := componentPods(ctx, cl.Client, ns, c.Name)
	if err != nil {
		return nil, err
	}
	names, err := generatedSecretNames(ctx, cl.Client, ns)
	if err != nil {
		return nil, err
	}
	values, err := secrets.Values(ctx, cl.Client, ns, names)
	if err != nil {
		return nil, err
	}
	red := secrets.NewRedactor(values...)
	involved := map[string]bool{}
	for i := range pods {
		p := &pods[i]
		involved[p.Name] = true
		out.Pods = append(out.Pods, podDetail(ctx, cl.Client, p, lines, red))
	}
	// Events of its pods, its workloads and their ReplicaSets.
	evs, err := cl.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the events of %s: %w", ns, err)
	}
	for _, e := range evs.Items {
		o := e.InvolvedObject
		if !involved[o.Name] && !ofWorkload(workloads, o.Name) {
			continue
		}
		out.Events = append(out.Events, EventDetail{Time: eventTime(&e), Type: e.Type, Reason: e.Reason, Object: o.Kind + "/" + o.Name,
			Message: red.Redact(e.Message), Count: e.Count})
	}
	sort.Slice(out.Events, func(i, j int) bool { return out.Events[i].Time.After(out.Events[j].Time) })
	if len(out.Events) > 50 {
		out.Events = out.Events[:50]
	}
	if out.History, err = apply.NewHelmReleases(cl.Getter, ns, nil).History(ctx, c.Name); err != nil {
		return out, fmt.Errorf("reading the Helm history of %s: %w", c.Name, err)
	}
	return out, nil
}

// componentPods finds a component's pods through its workloads (the
// Deployments, StatefulSets and Jobs labelled with it): their pod
// templates carry the workloads' own stable labels, not the component's.
// It returns the workloads' names too.
func componentPods(ctx context.Context, c kubernetes.Interface, ns, component string) ([]corev1.Pod, []string, error) {
	sel := metav1.ListOptions{LabelSelector: render.ComponentLabel + "=" + component}
	var selectors []*metav1.LabelSelector
	deps, err := c.AppsV1().Deployments(ns).List(ctx, sel)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the Deployments of %s: %w", component, err)
	}
	var names []string
	for _, d := range deps.Items {
		selectors, names = append(selectors, d.Spec.Selector), append(names, d.Name)
	}
	sts, err := c.AppsV1().StatefulSets(ns).List(ctx, sel)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the StatefulSets of %s: %w", component, err)
	}
	for _, s := range sts.Items {
		selectors, names = append(selectors, s.Spec.Selector), append(names, s.Name)
	}
	jobs, err := c.BatchV1().Jobs(ns).List(ctx, sel)
	if err != nil {
		return nil, nil, fmt.Errorf("listing the Jobs of %s: %w", component, err)
	}
	for _, j := range jobs.Items {
		selectors, names = append(selectors, j.Spec.Selector), append(names, j.Name)
	}
	seen := map[string]bool{}
	var out []corev1.Pod
	for _, ls := range selectors {
		if ls == nil {
			continue
		}
		s, err := metav1.LabelSelectorAsSelector(ls)
		if err != nil || s.Empty() {
			continue
		}
		pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: s.String()})
		if err != nil {
			return nil, nil, fmt.Errorf("listing the pods of %s: %w", component, err)
		}
		for _, p := range pods.Items {
			if !seen[p.Name] {
				seen[p.Name] = true
				out = append(out, p)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, names, nil
}

// ofWorkload reports whether an object is one of the workloads or a
// ReplicaSet of one (WORKLOAD-HASH, the hash in Kubernetes' vowel-free
// alphabet, so that "api-events" is not taken for a ReplicaSet of "api").
func ofWorkload(workloads []string, name string) bool {
	for _, w := range workloads {
		if name == w {
			return true
		}
		if hash, ok := strings.CutPrefix(name, w+"-"); ok && len(hash) >= 4 &&
			strings.Trim(hash, "bcdfghjklmnpqrstvwxz2456789") == "" {
			return true
		}
	}
	return false
}

// generatedSecretNames lists the Secrets onprem generated in ns.
func generatedSecretNames(ctx context.Context, c kubernetes.Interface, ns string) ([]string, error) {
	l, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: secrets.LabelGenerated + "=true"})
	if err != nil {
		return nil, fmt.Errorf("listing the generated Secrets of %s: %w", ns, err)
	}
	var out []string
	for _, s := range l.Items {
		out = append(out, s.Name)
	}
	return out, nil
}

func podDetail(ctx context.Context, c kubernetes.Interface, p *corev1.Pod, lines int64, red *secrets.Redactor) PodDetail {
	d := PodDetail{Name: p.Name, Phase: string(p.Status.Phase), Node: p.Spec.NodeName}
	if p.Status.StartTime != nil {
		d.Started = p.Status.StartTime.Time
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady {
			d.Ready = cond.Status == corev1.ConditionTrue
		}
	}
	status := map[string]corev1.ContainerStatus{}
	for _, cs := range p.Status.ContainerStatuses {
		status[cs.Name] = cs
	}
	for _, ct := range p.Spec.Containers {
		cs := status[ct.Name]
		cd := ContainerDetail{Name: ct.Name, Image: ct.Image, Ready: cs.Ready, Restarts: cs.RestartCount, State: containerState(cs.State)}
		cd.Log, cd.LogError = logTail(ctx, c, p, ct.Name, lines, red)
		d.Containers = append(d.Containers, cd)
	}
	return d
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting: " + s.Waiting.Reason
	case s.Terminated != nil:
		return "terminated: " + s.Terminated.Reason
	}
	return "unknown"
}

// logTail reads the last lines of a container's log, at most 64 KiB,
// redacted.
func logTail(ctx context.Context, c kubernetes.Interface, p *corev1.Pod, container string, lines int64, red *secrets.Redactor) ([]string, string) {
	limit := int64(64 << 10)
	rc, err := c.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: container, TailLines: &lines, LimitBytes: &limit}).Stream(ctx)
	if err != nil {
		return nil, err.Error()
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, limit))
	if err != nil {
		return nil, err.Error()
	}
	text := red.Redact(string(bytes.TrimRight(data, "\n")))
	if text == "" {
		return nil, ""
	}
	return strings.Split(text, "\n"), ""
}

func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}
