package doctor

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"onprem.dev/onprem/installer/render"
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

func componentOf(l map[string]string, fallback string) string {
	if c := l[render.ComponentLabel]; c != "" {
		return c
	}
	if c := l["app.kubernetes.io/instance"]; c != "" {
		return c
	}
	return fallback
}

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

func container(p *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// registryOf returns the registry host of an image reference (docker.io
// when the reference names none).
func registryOf(image string) string {
	first, _, found := strings.Cut(image, "/")
	if !found || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		return "docker.io"
	}
	return first
}

var imagePull = Analyzer{
	ID:          "image-pull",
	Description: "a container's image cannot be pulled: names the image, its registry and the component",
	Run: func(in *Input) []Finding {
		type key struct{ component, image string }
		seen := map[key]*Finding{}
		var out []*Finding
		in.eachPod(func(ns string, p *corev1.Pod) {
			for _, cs := range statuses(p) {
				w := cs.State.Waiting
				if w == nil || !slices.Contains([]string{"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"}, w.Reason) {
					continue
				}
				image := cs.Image
				if ct := container(p, cs.Name); ct != nil {
					image = ct.Image
				}
				comp := in.component(ns, p.Name)
				k := key{comp, image}
				if f := seen[k]; f != nil {
					f.Evidence = append(f.Evidence, fmt.Sprintf("pod %s container %s: %s", p.Name, cs.Name, w.Reason))
					continue
				}
				reg := registryOf(image)
				f := &Finding{Severity: Error, Component: comp, Object: object("Pod", ns, p.Name),
					Title: fmt.Sprintf("image %s of component %s cannot be pulled from %s", image, orUnknown(comp), reg),
					Evidence: append([]string{fmt.Sprintf("pod %s container %s: %s: %s", p.Name, cs.Name, w.Reason, strings.TrimSpace(w.Message))},
						in.events(ns, "Pod", p.Name)...),
					Remediation: fmt.Sprintf("make the image reachable: push it to %s (air-gapped: 'onprem bundle push' pushes every image of the release), or fix the registry in spec.registry/spec.images; if %s needs credentials, give the pull secret in spec.registry and check that the nodes trust its certificate", reg, reg)}
				seen[k] = f
				out = append(out, f)
			}
		})
		return deref(out)
	},
}

func deref(fs []*Finding) []Finding {
	out := make([]Finding, len(fs))
	for i, f := range fs {
		out[i] = *f
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

var crashLoop = Analyzer{
	ID:          "crash-loop",
	Description: "a container keeps crashing (CrashLoopBackOff): its exit and the last lines it logged",
	Run: func(in *Input) []Finding {
		var out []Finding
		in.eachPod(func(ns string, p *corev1.Pod) {
			for _, cs := range statuses(p) {
				if w := cs.State.Waiting; w == nil || w.Reason != "CrashLoopBackOff" {
					continue
				}
				if t := cs.LastTerminationState.Terminated; t != nil && t.Reason == "OOMKilled" {
					continue // oom-killed says why
				}
				comp := in.component(ns, p.Name)
				ev := []string{fmt.Sprintf("pod %s container %s restarted %d times", p.Name, cs.Name, cs.RestartCount)}
				if t := cs.LastTerminationState.Terminated; t != nil {
					ev = append(ev, fmt.Sprintf("last exit: code %d, %s %s", t.ExitCode, t.Reason, strings.TrimSpace(t.Message)))
				}
				if l := in.S.LogOf(ns, p.Name, cs.Name, true); l != nil && l.Error == "" {
					for _, line := range tail(l.Text, 10) {
						ev = append(ev, "log: "+line)
					}
				} else if l != nil {
					ev = append(ev, "its previous log could not be read: "+l.Error)
				} else {
					ev = append(ev, "its previous log was not collected")
				}
				out = append(out, Finding{Severity: Error, Component: comp, Object: object("Pod", ns, p.Name),
					Title:       fmt.Sprintf("container %s of component %s keeps crashing", cs.Name, orUnknown(comp)),
					Evidence:    ev,
					Remediation: "read the last log lines above: a database it cannot reach shows in database-down, a bad setting in its Helm values (spec.components." + orUnknown(comp) + ".values); after fixing the cause run 'onprem install' again, or send a support bundle"})
			}
		})
		return out
	},
}

var oomKilled = Analyzer{
	ID:          "oom-killed",
	Description: "a container was killed for using more memory than its limit: names the limit",
	Run: func(in *Input) []Finding {
		var out []Finding
		in.eachPod(func(ns string, p *corev1.Pod) {
			for _, cs := range statuses(p) {
				var t *corev1.ContainerStateTerminated
				if x := cs.State.Terminated; x != nil && x.Reason == "OOMKilled" {
					t = x
				} else if x := cs.LastTerminationState.Terminated; x != nil && x.Reason == "OOMKilled" {
					t = x
				}
				if t == nil {
					continue
				}
				limit := "no memory limit"
				if ct := container(p, cs.Name); ct != nil {
					if q, ok := ct.Resources.Limits[corev1.ResourceMemory]; ok {
						limit = "memory limit " + q.String()
					}
				}
				comp := in.component(ns, p.Name)
				out = append(out, Finding{Severity: Error, Component: comp, Object: object("Pod", ns, p.Name),
					Title:    fmt.Sprintf("container %s of component %s was killed for running out of memory (%s)", cs.Name, orUnknown(comp), limit),
					Evidence: []string{fmt.Sprintf("pod %s container %s: OOMKilled at %s, restarted %d times, %s", p.Name, cs.Name, t.FinishedAt.UTC().Format("2006-01-02 15:04:05Z"), cs.RestartCount, limit)},
					Remediation: fmt.Sprintf("give it more memory: a larger sizing profile (spec.profile: medium or large), or spec.components.%s.values with a higher resources.limits.memory; then run 'onprem install' again. Check the node's allocatable memory (node-pressure, cluster/nodes.json)",
						orUnknown(comp))})
			}
		})
		return out
	},
}

var podPending = Analyzer{
	ID:          "pod-pending",
	Description: "a pod cannot be scheduled: the scheduler's reason",
	Run: func(in *Input) []Finding {
		var out []Finding
		in.eachPod(func(ns string, p *corev1.Pod) {
			if p.Status.Phase != corev1.PodPending || p.DeletionTimestamp != nil {
				return
			}
			for _, c := range p.Status.Conditions {
				if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse {
					continue
				}
				comp := in.component(ns, p.Name)
				out = append(out, Finding{Severity: Error, Component: comp, Object: object("Pod", ns, p.Name),
					Title:       fmt.Sprintf("pod %s of component %s cannot be scheduled: %s", p.Name, orUnknown(comp), c.Reason),
					Evidence:    append([]string{fmt.Sprintf("PodScheduled=False for %s: %s", since(in.Now, c.LastTransitionTime.Time), c.Message)}, in.events(ns, "Pod", p.Name)...),
					Remediation: "read the scheduler's message: insufficient cpu or memory needs more or larger nodes or a smaller sizing profile (spec.profile); a node selector, affinity or taint that no node satisfies needs spec.placement fixed; an unbound volume is in pvc-pending"})
			}
		})
		return out
	},
}

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
	Description: "a Deployment or StatefulSet has fewer ready replicas than it wants",
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
	return Finding{Severity: Error, Component: comp, Object: object(kind, ns, name),
		Title:       fmt.Sprintf("component %s is not available: %d of %d replicas ready", comp, ready, want),
		Evidence:    ev,
		Remediation: "the findings about its pods above say why (image-pull, crash-loop, oom-killed, pod-pending); a container that runs but is never ready usually cannot reach a dependency (database-down). 'onprem status' shows it too"}, true
}
