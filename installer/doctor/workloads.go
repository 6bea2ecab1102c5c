package doctor

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/fault"
	"onprem.dev/onprem/installer/snapshot"
)

// owners maps each pod (namespace/name) to its component: the component
// label of the Deployment (through its ReplicaSet), StatefulSet, DaemonSet
// or Job that owns it, or of the pod itself.
func owners(s *snapshot.Snapshot) map[string]string {
	out := map[string]string{}
	for ns, o := range s.Namespaces {
		byKind := map[string]map[string]string{"ReplicaSet": {}, "StatefulSet": {}, "DaemonSet": {}, "Job": {}, "Deployment": {}}
		for _, d := range o.Deployments {
			byKind["Deployment"][d.Name] = componentOf(d.Labels, d.Name)
		}
		for _, rs := range o.ReplicaSets {
			c := componentOf(rs.Labels, "")
			for _, ref := range rs.OwnerReferences {
				if ref.Kind == "Deployment" {
					c = byKind["Deployment"][ref.Name]
				}
			}
			byKind["ReplicaSet"][rs.Name] = c
		}
		for _, x := range o.StatefulSets {
			byKind["StatefulSet"][x.Name] = componentOf(x.Labels, x.Name)
		}
		for _, x := range o.DaemonSets {
			byKind["DaemonSet"][x.Name] = componentOf(x.Labels, x.Name)
		}
		for _, x := range o.Jobs {
			byKind["Job"][x.Name] = componentOf(x.Labels, x.Name)
		}
		for _, p := range o.Pods {
			c := componentOf(p.Labels, "")
			for _, ref := range p.OwnerReferences {
				if m := byKind[ref.Kind]; m != nil && m[ref.Name] != "" {
					c = m[ref.Name]
				}
			}
			out[ns+"/"+p.Name] = c
		}
	}
	return out
}

func componentOf(l map[string]string, fallback string) string { return fault.ComponentOf(l, fallback) }

// component returns the component of a pod.
func (in *Input) component(ns, pod string) string { return in.owners[ns+"/"+pod] }

// eachPod calls f for every pod of every collected namespace.
func (in *Input) eachPod(f func(ns string, p *corev1.Pod)) {
	for _, ns := range in.S.Meta.Namespaces {
		o := in.S.Objects(ns)
		for i := range o.Pods {
			f(ns, &o.Pods[i])
		}
	}
}

// events returns the messages of the events about an object, newest last.
func (in *Input) events(ns, kind, name string) []string {
	var out []string
	for _, e := range in.S.Objects(ns).Events {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Type != corev1.EventTypeNormal {
			out = append(out, fmt.Sprintf("event %s: %s", e.Reason, strings.TrimSpace(e.Message)))
		}
	}
	if len(out) > 5 {
		out = out[len(out)-5:]
	}
	return slices.Compact(out)
}

func statuses(p *corev1.Pod) []corev1.ContainerStatus {
	return append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
}

// faults returns what installer/fault finds in the collected namespaces:
// the one classification of pods, their controllers and events that
// every apply's wait reads too. Computed once per analysis.
func (in *Input) faults() []fault.Fault {
	if in.found != nil {
		return *in.found
	}
	var out []fault.Fault
	for _, ns := range in.S.Meta.Namespaces {
		o := in.S.Objects(ns)
		objs := &fault.Objects{Namespace: ns, Pods: o.Pods, ReplicaSets: o.ReplicaSets, StatefulSets: o.StatefulSets,
			DaemonSets: o.DaemonSets, Jobs: o.Jobs, Events: o.Events}
		out = append(out, fault.Analyze(objs, fault.Input{
			Now: in.Now,
			Component: func(kind string, obj metav1.Object) string {
				if kind == "Pod" {
					return in.component(ns, obj.GetName())
				}
				return componentOf(obj.GetLabels(), "")
			},
			Log: func(pod, container string, previous bool) (string, error) {
				l := in.S.LogOf(ns, pod, container, previous)
				switch {
				case l == nil:
					return "", fault.ErrNotCollected
				case l.Error != "":
					return "", errors.New(l.Error)
				}
				return l.Text, nil
			},
		})...)
	}
	in.found = &out
	return out
}

// faultAnalyzer reports the faults installer/fault gives to analyzer id.
func faultAnalyzer(id, description string) Analyzer {
	return Analyzer{ID: id, Description: description, Run: func(in *Input) []Finding {
		var out []Finding
		for _, f := range in.faults() {
			if f.Analyzer == id {
				out = append(out, Finding{Severity: Error, Title: f.Title, Object: f.Object, Component: f.Component,
					Evidence: f.Evidence, Remediation: f.Remediation, Definitive: f.Definitive})
			}
		}
		return out
	}}
}

var (
	imagePull        = faultAnalyzer(fault.ImagePull, "a container's image cannot be pulled: names the image, its registry, the component, and whether the registry answered (not found, access refused) or cannot be reached")
	crashLoop        = faultAnalyzer(fault.CrashLoop, "a container keeps crashing (CrashLoopBackOff): its exit and the last lines it logged")
	oomKilled        = faultAnalyzer(fault.OOMKilled, "a container was killed for using more memory than its limit: names the limit")
	podPending       = faultAnalyzer(fault.PodPending, "a pod cannot be scheduled: the scheduler's reason")
	configError      = faultAnalyzer(fault.ConfigError, "a container cannot start because its configuration names a Secret, ConfigMap or key that is not there")
	admissionRefused = faultAnalyzer(fault.AdmissionRefused, "the API server refuses a workload's pods (pod security, a resource quota, a limit range, an admission webhook)")
	jobFailed        = faultAnalyzer(fault.JobFailed, "a Job failed (database provisioning, migration, backup, scheduled backup): its reason and last log lines")
)

var pvcPending = Analyzer{
	ID:          "pvc-pending",
	Description: "a PersistentVolumeClaim is not bound: its StorageClass and the provisioner's events",
	Run: func(in *Input) []Finding {
		var out []Finding
		classes := map[string]bool{}
		def := ""
		for _, sc := range in.S.Cluster.StorageClasses {
			classes[sc.Name] = true
			if sc.Annotations["storageclass.kubernetes.io/is-default-class"] == "true" {
				def = sc.Name
			}
		}
		for _, ns := range in.S.Meta.Namespaces {
			for _, pvc := range in.S.Objects(ns).PersistentVolumeClaims {
				if pvc.Status.Phase != corev1.ClaimPending {
					continue
				}
				class := ""
				if pvc.Spec.StorageClassName != nil {
					class = *pvc.Spec.StorageClassName
				}
				ev := []string{fmt.Sprintf("claim %s: Pending for %s, StorageClass %q", pvc.Name, since(in.Now, pvc.CreationTimestamp.Time), class)}
				fix := "check the StorageClass's provisioner (its events above) and that it can make a volume of this size"
				switch {
				case class == "" && def == "":
					ev = append(ev, "the claim names no StorageClass and the cluster has no default one")
					fix = "set spec.storage.className to a StorageClass of the cluster, or mark one as default"
				case class != "" && len(in.S.Cluster.StorageClasses) > 0 && !classes[class]:
					ev = append(ev, fmt.Sprintf("the cluster has no StorageClass %q", class))
					fix = fmt.Sprintf("set spec.storage.className (or the database's storageClass under spec.databases) to one of the cluster's StorageClasses (%s), or create %q", strings.Join(sortedKeys(classes), ", "), class)
				}
				ev = append(ev, in.events(ns, "PersistentVolumeClaim", pvc.Name)...)
				out = append(out, Finding{Severity: Error, Component: componentOf(pvc.Labels, ""), Object: object("PersistentVolumeClaim", ns, pvc.Name),
					Title: fmt.Sprintf("volume claim %s is not bound", pvc.Name), Evidence: ev, Remediation: fix})
			}
		}
		return out
	},
}

var volumeFullLine = regexp.MustCompile(`(?i)no space left on device|ENOSPC|disk (is )?full|database or disk is full|could not extend file`)

var volumeFull = Analyzer{
	ID:          "volume-full",
	Description: "a container's logs say its volume is full",
	Run: func(in *Input) []Finding {
		var out []Finding
		for _, l := range in.S.Logs {
			var hits []string
			for _, line := range strings.Split(l.Text, "\n") {
				if volumeFullLine.MatchString(line) {
					hits = append(hits, "log: "+strings.TrimSpace(line))
				}
			}
			if len(hits) == 0 {
				continue
			}
			if len(hits) > 3 {
				hits = hits[len(hits)-3:]
			}
			comp := in.component(l.Namespace, l.Pod)
			out = append(out, Finding{Severity: Error, Component: comp, Object: object("Pod", l.Namespace, l.Pod),
				Title:       fmt.Sprintf("container %s of component %s has run out of disk space", l.Container, orUnknown(comp)),
				Evidence:    hits,
				Remediation: fmt.Sprintf("grow its volume: a larger size (the database's size under spec.databases) for %s (if the StorageClass allows expansion), or free space in it; the node's disk is in node-pressure", orUnknown(comp))})
		}
		return out
	},
}

var componentUnavailable = Analyzer{
	ID:          "component-unavailable",
	Description: "a Deployment or StatefulSet has fewer ready replicas than it wants (an error when none is ready, a warning while some serve)",
	Run: func(in *Input) []Finding {
		var out []Finding
		for _, ns := range in.S.Meta.Namespaces {
			o := in.S.Objects(ns)
			for _, d := range o.Deployments {
				want := int32(1)
				if d.Spec.Replicas != nil {
					want = *d.Spec.Replicas
				}
				if f, ok := unavailable(in, ns, "Deployment", d.Name, componentOf(d.Labels, d.Name), d.Status.ReadyReplicas, want, deploymentMessage(d)); ok {
					out = append(out, f)
				}
			}
			for _, x := range o.StatefulSets {
				want := int32(1)
				if x.Spec.Replicas != nil {
					want = *x.Spec.Replicas
				}
				if f, ok := unavailable(in, ns, "StatefulSet", x.Name, componentOf(x.Labels, x.Name), x.Status.ReadyReplicas, want, ""); ok {
					out = append(out, f)
				}
			}
		}
		return out
	},
}

// rollUnfinished: a replicated database's StatefulSet that onprem rolls
// itself (OnDelete, installer/roll) still runs members of its previous
// revision: a roll under way, or one that was interrupted (the process
// stopped, a timeout). Nothing else replaces them.
var rollUnfinished = Analyzer{
	ID:          "roll-unfinished",
	Description: "a replicated database still runs members of its previous revision (its roll is under way or was interrupted)",
	Run: func(in *Input) []Finding {
		var out []Finding
		for _, ns := range in.S.Meta.Namespaces {
			o := in.S.Objects(ns)
			for _, x := range o.StatefulSets {
				rev := x.Status.UpdateRevision
				if x.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || rev == "" || x.Status.ObservedGeneration < x.Generation {
					continue
				}
				var old []string
				members := 0
				for _, p := range o.Pods {
					if !controlledBy(&p, "StatefulSet", x.Name) || p.DeletionTimestamp != nil {
						continue
					}
					members++
					if p.Labels[appsv1.ControllerRevisionHashLabelKey] != rev {
						old = append(old, fmt.Sprintf("member %s: revision %s, not %s", p.Name, p.Labels[appsv1.ControllerRevisionHashLabelKey], rev))
					}
				}
				if len(old) == 0 {
					continue
				}
				slices.Sort(old)
				comp := componentOf(x.Labels, x.Name)
				out = append(out, Finding{Severity: Warning, Component: comp, Object: object("StatefulSet", ns, x.Name),
					Title:       fmt.Sprintf("%s runs %d of %d members of its previous revision: its roll is under way or was interrupted", comp, len(old), members),
					Evidence:    old,
					Remediation: "if no install or upgrade is running, run the last one again (onprem install at the installed version, or onprem upgrade apply to the same version): it replaces them one at a time, replicas first and the primary last (docs/availability.md)"})
			}
		}
		return out
	},
}

// controlledBy says whether kind name is p's controller.
func controlledBy(p *corev1.Pod, kind, name string) bool {
	ref := metav1.GetControllerOf(p)
	return ref != nil && ref.Kind == kind && ref.Name == name
}

func deploymentMessage(d appsv1.Deployment) string {
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}

func unavailable(in *Input, ns, kind, name, comp string, ready, want int32, msg string) (Finding, bool) {
	if want == 0 || ready >= want {
		return Finding{}, false
	}
	ev := []string{fmt.Sprintf("%s %s: %d/%d ready", kind, name, ready, want)}
	if msg != "" {
		ev = append(ev, msg)
	}
	// The pods' own state, in a line each.
	for _, p := range in.S.Objects(ns).Pods {
		if in.component(ns, p.Name) != comp {
			continue
		}
		for _, cs := range statuses(&p) {
			switch {
			case cs.State.Waiting != nil:
				ev = append(ev, fmt.Sprintf("pod %s container %s waiting: %s", p.Name, cs.Name, cs.State.Waiting.Reason))
			case !cs.Ready:
				ev = append(ev, fmt.Sprintf("pod %s container %s not ready", p.Name, cs.Name))
			}
		}
	}
	if len(ev) > 8 {
		ev = ev[:8]
	}
	fix := "the findings about its pods above say why (image-pull, crash-loop, oom-killed, pod-pending); a container that runs but is never ready usually cannot reach a dependency (database-down). 'onprem status' shows it too"
	if ready > 0 {
		// Its Service still sends requests to the ready ones (a node lost
		// with spec.availability high, a roll): a degradation, not an
		// outage.
		return Finding{Severity: Warning, Component: comp, Object: object(kind, ns, name),
			Title:       fmt.Sprintf("component %s runs short: %d of %d replicas ready (it still serves)", comp, ready, want),
			Evidence:    ev,
			Remediation: fix + "; a replica on a lost node comes back with the node, or is scheduled elsewhere once the node is drained or deleted"}, true
	}
	return Finding{Severity: Error, Component: comp, Object: object(kind, ns, name),
		Title:       fmt.Sprintf("component %s is not available: %d of %d replicas ready", comp, ready, want),
		Evidence:    ev,
		Remediation: fix}, true
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
