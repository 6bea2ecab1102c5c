package preflight

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/render"
)

const capacityID = "capacity"

// capacityCheck compares what the platform's pods request with what the
// schedulable nodes have free.
func capacityCheck() Check {
	return Check{
		ID:       capacityID,
		Title:    "the schedulable nodes have the CPU and memory that the platform's pods request",
		Severity: Blocking,
		Run:      runCapacity,
	}
}

// requests is an amount of CPU (millicores) and memory (bytes).
type requests struct {
	MilliCPU int64
	Memory   int64
}

func (r requests) add(o requests) requests {
	return requests{r.MilliCPU + o.MilliCPU, r.Memory + o.Memory}
}

func (r requests) times(n int64) requests { return requests{r.MilliCPU * n, r.Memory * n} }

func maxRequests(a, b requests) requests {
	return requests{max(a.MilliCPU, b.MilliCPU), max(a.Memory, b.Memory)}
}

func (r requests) fits(in requests) bool { return r.MilliCPU <= in.MilliCPU && r.Memory <= in.Memory }

// String is "6.2 CPU and 11.5 GiB".
func (r requests) String() string {
	return fmt.Sprintf("%s CPU and %s", cpuString(r.MilliCPU), gibString(r.Memory))
}

// cpuString is "6.2" for whole tenths of a CPU, else millicores ("480m"):
// rounding made "short by 0 CPU" of a platform 30m short.
func cpuString(milli int64) string {
	if milli%100 != 0 {
		return fmt.Sprintf("%dm", milli)
	}
	s := fmt.Sprintf("%.1f", float64(milli)/1000)
	return strings.TrimSuffix(s, ".0")
}

// gibString is "11.5 GiB", or MiB (rounded up) for less than a GiB that
// is not a whole tenth of one: a shortfall never reads "0 GiB".
func gibString(bytes int64) string {
	tenths := float64(bytes) / (1 << 30) * 10
	if bytes > 0 && bytes < 1<<30 && tenths != float64(int64(tenths)) {
		return fmt.Sprintf("%d MiB", (bytes+(1<<20)-1)>>20)
	}
	s := fmt.Sprintf("%.1f", float64(bytes)/(1<<30))
	return strings.TrimSuffix(s, ".0") + " GiB"
}

// shortfall names only what is short: "40m CPU", "300 MiB of memory",
// or both.
func shortfall(need, free requests) string {
	var parts []string
	if d := need.MilliCPU - free.MilliCPU; d > 0 {
		parts = append(parts, cpuString(d)+" CPU")
	}
	if d := need.Memory - free.Memory; d > 0 {
		parts = append(parts, gibString(d)+" of memory")
	}
	return strings.Join(parts, " and ")
}

func containerRequests(c corev1.Container) requests {
	return requests{c.Resources.Requests.Cpu().MilliValue(), c.Resources.Requests.Memory().Value()}
}

// podRequests is what the scheduler reserves for a pod: the sum of its
// containers and restartable (sidecar) init containers, or the largest
// ordinary init container if that is more (init containers run one at a
// time, before the others). Pod overhead is left out.
func podRequests(spec *corev1.PodSpec) requests {
	var sum, initMax requests
	for _, c := range spec.Containers {
		sum = sum.add(containerRequests(c))
	}
	for _, c := range spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sum = sum.add(containerRequests(c))
			continue
		}
		initMax = maxRequests(initMax, containerRequests(c))
	}
	return maxRequests(sum, initMax)
}

// workload is one rendered object that runs pods.
type workload struct {
	Name     string // Kind/name
	Replicas int64  // pods at once; -1 for one per node (DaemonSet)
	Pod      requests
}

// workloadOf returns the pods an object runs, if it runs any.
func workloadOf(o *unstructured.Unstructured) (workload, bool) {
	var path []string
	replicas := int64(1)
	kind := o.GetKind()
	switch kind {
	case "Deployment", "StatefulSet", "ReplicaSet":
		path = []string{"spec", "template", "spec"}
		if r, found, _ := unstructured.NestedInt64(o.Object, "spec", "replicas"); found {
			replicas = r
		}
	case "Job":
		path = []string{"spec", "template", "spec"}
		if p, found, _ := unstructured.NestedInt64(o.Object, "spec", "parallelism"); found {
			replicas = p
		}
	case "CronJob":
		path = []string{"spec", "jobTemplate", "spec", "template", "spec"}
		if p, found, _ := unstructured.NestedInt64(o.Object, "spec", "jobTemplate", "spec", "parallelism"); found {
			replicas = p
		}
	case "DaemonSet":
		path = []string{"spec", "template", "spec"}
		replicas = -1
	case "Pod":
		path = []string{"spec"}
	default:
		return workload{}, false
	}
	m, found, err := unstructured.NestedMap(o.Object, path...)
	if err != nil || !found {
		return workload{}, false
	}
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
		return workload{}, false
	}
	return workload{Name: kind + "/" + o.GetName(), Replicas: replicas, Pod: podRequests(&spec)}, true
}

// demand is what the platform's pods request in all.
type demand struct {
	Total requests
	// Largest is the largest single pod, which must fit on one node.
	Largest     requests
	LargestName string
	// MaxReplicas is the largest replica count of any workload.
	MaxReplicas     int64
	MaxReplicasName string
	Pods            int64
}

// platformDemand sums the requests of every pod the rendered platform runs:
// replicas × pod requests, DaemonSets once per node.
func platformDemand(res *render.Result, nodes int) demand {
	var d demand
	for _, c := range res.Components {
		for _, o := range c.Objects {
			w, ok := workloadOf(o)
			if !ok {
				continue
			}
			n := w.Replicas
			if n < 0 {
				n = int64(nodes)
			}
			d.Total = d.Total.add(w.Pod.times(n))
			d.Pods += n
			if n > 0 && (w.Pod.MilliCPU > d.Largest.MilliCPU || w.Pod.Memory > d.Largest.Memory) {
				d.Largest = maxRequests(d.Largest, w.Pod)
				d.LargestName = w.Name
			}
			if w.Replicas > d.MaxReplicas {
				d.MaxReplicas, d.MaxReplicasName = w.Replicas, w.Name
			}
		}
	}
	return d
}

// nodeExclusion says why the platform's pods cannot run on a node ("" if
// they can).
func nodeExclusion(n *corev1.Node, p config.Placement) string {
	if n.Spec.Unschedulable {
		return "cordoned"
	}
	ready := false
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return "not Ready"
	}
	for k, v := range p.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return fmt.Sprintf("does not match spec.placement.nodeSelector %s=%s", k, v)
		}
	}
	for _, t := range n.Spec.Taints {
		if t.Effect != corev1.TaintEffectNoSchedule && t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !tolerated(t, p.Tolerations) {
			return fmt.Sprintf("has taint %s not tolerated by spec.placement.tolerations", taintString(t))
		}
	}
	return ""
}

func taintString(t corev1.Taint) string {
	s := t.Key
	if t.Value != "" {
		s += "=" + t.Value
	}
	return s + ":" + string(t.Effect)
}

// tolerated reports whether one of the tolerations matches the taint (the
// scheduler's rules, without numeric operators).
func tolerated(t corev1.Taint, tols []config.Toleration) bool {
	for _, tol := range tols {
		if tol.Effect != "" && tol.Effect != string(t.Effect) {
			continue
		}
		if tol.Key == "" && tol.Operator == config.TolerationOpExists {
			return true
		}
		if tol.Key != t.Key {
			continue
		}
		switch tol.Operator {
		case config.TolerationOpExists:
			return true
		case "", config.TolerationOpEqual:
			if tol.Value == t.Value {
				return true
			}
		}
	}
	return false
}

// nodeFree is a schedulable node and what is free on it.
type nodeFree struct {
	Name string
	Free requests
}

func runCapacity(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Blocking, "cluster", "rendered", "installation"); !ok {
		return out
	}
	cs := env.Cluster.Client
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return cannotRun(Blocking, capacityID, "list nodes", err)
	}
	ns := platformNamespace(env)
	placement := env.Installation.Spec.Placement
	var usable []*corev1.Node
	var excluded []string
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if why := nodeExclusion(n, placement); why != "" {
			excluded = append(excluded, n.Name+" ("+why+")")
			continue
		}
		usable = append(usable, n)
	}
	sort.Strings(excluded)
	d := platformDemand(env.Rendered, len(usable))
	if len(usable) == 0 {
		msg := fmt.Sprintf("no node can run the platform's pods (%d pods requesting %s): ", d.Pods, d.Total)
		if len(nodes.Items) == 0 {
			msg += "the cluster has no nodes"
		} else {
			msg += clusterList(excluded, 5)
		}
		return Outcome{Result: Fail, Message: msg, Details: excluded,
			Remediation: "add nodes, uncordon them (kubectl uncordon NODE), or change spec.placement (nodeSelector, tolerations) in onprem.yaml to match the nodes the platform may use"}
	}

	// What the pods already on those nodes request. The platform's own
	// pods (a re-run or an upgrade) are left out: the install replaces them.
	used := map[string]requests{}
	onNode := map[string]bool{}
	for _, n := range usable {
		onNode[n.Name] = true
	}
	opts := metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed", Limit: 500}
	for {
		pods, err := cs.CoreV1().Pods("").List(ctx, opts)
		if err != nil {
			return cannotRun(Blocking, capacityID, "list pods in all namespaces", err)
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.Namespace == ns || !onNode[p.Spec.NodeName] {
				continue
			}
			used[p.Spec.NodeName] = used[p.Spec.NodeName].add(podRequests(&p.Spec))
		}
		if pods.Continue == "" {
			break
		}
		opts.Continue = pods.Continue
	}
	var free requests
	var frees []nodeFree
	largestFits := false
	for _, n := range usable {
		alloc := requests{n.Status.Allocatable.Cpu().MilliValue(), n.Status.Allocatable.Memory().Value()}
		u := used[n.Name]
		f := requests{max(0, alloc.MilliCPU-u.MilliCPU), max(0, alloc.Memory-u.Memory)}
		free = free.add(f)
		frees = append(frees, nodeFree{n.Name, f})
		if d.Largest.fits(f) {
			largestFits = true
		}
	}
	where := fmt.Sprintf("%d schedulable node%s", len(usable), clusterPlural(len(usable)))
	var details []string
	for _, f := range frees {
		details = append(details, fmt.Sprintf("node %s: %s free", f.Name, f.Free))
	}
	for _, e := range excluded {
		details = append(details, "node "+e+": not used")
	}
	note := "requests are replicas × the pod's containers (or its largest init container, if more)"
	if !d.Total.fits(free) {
		return Outcome{Result: Fail,
			Message: fmt.Sprintf("the platform needs %s for %d pods, %s free on %s; short by %s",
				d.Total, d.Pods, free, where, shortfall(d.Total, free)),
			Remediation: "add nodes or larger ones, free capacity on the existing ones, choose a smaller spec.profile, or lower requests with spec.components.NAME.values.resources; " +
				"nodes excluded by cordons, taints or spec.placement are listed in the details (" + note + ")",
			Details: details}
	}
	if !largestFits {
		return Outcome{Result: Fail,
			Message: fmt.Sprintf("the largest pod, of %s, requests %s, more than any single schedulable node has free (most: %s)",
				d.LargestName, d.Largest, mostFree(frees)),
			Remediation: "add a node large enough for it, free capacity on one, or lower that component's requests with spec.components.NAME.values.resources",
			Details:     details}
	}
	profile := env.Installation.Spec.Profile
	if (profile == config.ProfileMedium || profile == config.ProfileLarge) && int64(len(usable)) < d.MaxReplicas {
		return Outcome{Result: Warn,
			Message: fmt.Sprintf("profile %s runs up to %d replicas (%s) but only %s can run them: replicas share nodes, so losing one node takes several down (capacity is enough: needs %s, %s free)",
				profile, d.MaxReplicas, d.MaxReplicasName, where, d.Total, free),
			Remediation: fmt.Sprintf("add nodes (at least %d) so replicas spread, or accept the reduced availability", d.MaxReplicas),
			Details:     details}
	}
	out := Passed("the platform needs %s for %d pods; %s free on %s", d.Total, d.Pods, free, where)
	out.Details = details
	return out
}

func mostFree(fs []nodeFree) string {
	best := fs[0]
	for _, f := range fs[1:] {
		if f.Free.MilliCPU+f.Free.Memory/(1<<20) > best.Free.MilliCPU+best.Free.Memory/(1<<20) {
			best = f
		}
	}
	return best.Free.String() + " on " + best.Name
}

func clusterPlural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
