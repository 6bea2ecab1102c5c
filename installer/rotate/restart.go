package rotate

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/roll"
)

// fieldManager owns the annotation a rotation puts on pod templates, so
// that the installer's own server-side apply leaves it alone.
const fieldManager = "onprem-rotate"

// workload is a Deployment or StatefulSet whose pods read some of the
// rotated Secrets.
type workload struct {
	kind, name string
	template   *corev1.PodTemplateSpec
	secrets    []string
}

func (w workload) String() string { return w.kind + "/" + w.name }

// consumers lists the workloads ("Deployment/name") whose pods read any
// of the Secrets names, but those of skip.
func consumers(ctx context.Context, c kubernetes.Interface, ns string, names, skip []string) ([]string, error) {
	ws, err := workloads(ctx, c, ns, names, skip)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, w := range ws {
		out = append(out, w.String())
	}
	return out, nil
}

// workloads lists the Deployments and StatefulSets whose pods read any of
// the Secrets names, but those of skip ("StatefulSet/name").
func workloads(ctx context.Context, c kubernetes.Interface, ns string, names, skip []string) ([]workload, error) {
	var out []workload
	deps, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the Deployments of %s: %w", ns, err)
	}
	for i := range deps.Items {
		d := &deps.Items[i]
		out = appendIfReads(out, "Deployment", d.Name, &d.Spec.Template, names)
	}
	sets, err := c.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the StatefulSets of %s: %w", ns, err)
	}
	for i := range sets.Items {
		s := &sets.Items[i]
		out = appendIfReads(out, "StatefulSet", s.Name, &s.Spec.Template, names)
	}
	out = slices.DeleteFunc(out, func(w workload) bool { return slices.Contains(skip, w.String()) })
	slices.SortFunc(out, func(a, b workload) int { return strings.Compare(a.String(), b.String()) })
	return out, nil
}

// appendIfReads appends to out the workload kind/name, whose pods are
// made from template, when those pods read any of the Secrets names
// (secretsRead); else it returns out as it is.
func appendIfReads(out []workload, kind, name string, template *corev1.PodTemplateSpec, names []string) []workload {
	if used := secretsRead(&template.Spec, names); len(used) > 0 {
		out = append(out, workload{kind: kind, name: name, template: template, secrets: used})
	}
	return out
}

// secretsRead lists which of names a pod reads: through its containers'
// environment, or a volume.
func secretsRead(p *corev1.PodSpec, names []string) []string {
	read := map[string]bool{}
	for _, cs := range [][]corev1.Container{p.InitContainers, p.Containers} {
		for _, c := range cs {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					read[e.ValueFrom.SecretKeyRef.Name] = true
				}
			}
			for _, e := range c.EnvFrom {
				if e.SecretRef != nil {
					read[e.SecretRef.Name] = true
				}
			}
		}
	}
	for _, v := range p.Volumes {
		if v.Secret != nil {
			read[v.Secret.SecretName] = true
		}
		if v.Projected != nil {
			for _, s := range v.Projected.Sources {
				if s.Secret != nil {
					read[s.Secret.Name] = true
				}
			}
		}
	}
	var out []string
	for _, n := range names {
		if read[n] {
			out = append(out, n)
		}
	}
	return out
}

// restartFor rolls every workload that reads any of the Secrets names,
// but those of skip ("StatefulSet/name"), onto their current values (why
// says what they are), and waits until each has only new pods, ready. A
// workload whose annotation has the Secrets' digest already is not rolled
// again (a resumed rotation).
func restartFor(ctx context.Context, c kubernetes.Interface, ns string, names, skip []string, timeout time.Duration, why string, say func(string, ...any)) ([]string, error) {
	ws, err := workloads(ctx, c, ns, names, skip)
	if err != nil {
		return nil, err
	}
	var done []string
	for _, w := range ws {
		digest, err := secretsDigest(ctx, c, ns, w.secrets)
		if err != nil {
			return done, err
		}
		if w.template.Annotations[AnnotationCredentials] != digest {
			patch, _ := json.Marshal(map[string]any{
				"apiVersion": "apps/v1", "kind": w.kind,
				"metadata": map[string]any{"name": w.name, "namespace": ns},
				"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
					"annotations": map[string]string{AnnotationCredentials: digest}}}},
			})
			opts := metav1.PatchOptions{FieldManager: fieldManager}
			switch w.kind {
			case "Deployment":
				_, err = c.AppsV1().Deployments(ns).Patch(ctx, w.name, types.ApplyPatchType, patch, opts)
			default:
				_, err = c.AppsV1().StatefulSets(ns).Patch(ctx, w.name, types.ApplyPatchType, patch, opts)
			}
			if err != nil {
				return done, fmt.Errorf("restarting %s: %w", w, err)
			}
			say("restarting %s: %s", w, why)
		}
		done = append(done, w.String())
	}
	for _, w := range ws {
		if err := waitRolledOut(ctx, c, ns, w, timeout); err != nil {
			return done, err
		}
		say("%s rolled out: %s", w, why)
	}
	return done, nil
}

// waitRolledOut waits until w's pods are all of its current template,
// and ready, and its replaced pods are gone: one still terminating may be
// finishing a request with the old login.
func waitRolledOut(ctx context.Context, c kubernetes.Interface, ns string, w workload, timeout time.Duration) error {
	if w.kind == "StatefulSet" {
		// A StatefulSet that onprem rolls itself (OnDelete: a replicated
		// database) is rolled here, replicas first.
		s, err := c.AppsV1().StatefulSets(ns).Get(ctx, w.name, metav1.GetOptions{})
		if err == nil && s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
			rctx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			return roll.StatefulSet(rctx, roll.Options{Client: c, Namespace: ns}, w.name)
		}
	}
	var why string
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		var err error
		var selector *metav1.LabelSelector
		switch w.kind {
		case "Deployment":
			var d *appsv1.Deployment
			if d, err = c.AppsV1().Deployments(ns).Get(ctx, w.name, metav1.GetOptions{}); err == nil {
				why, selector = deploymentPending(d), d.Spec.Selector
			}
		default:
			var s *appsv1.StatefulSet
			if s, err = c.AppsV1().StatefulSets(ns).Get(ctx, w.name, metav1.GetOptions{}); err == nil {
				why, selector = statefulSetPending(s), s.Spec.Selector
			}
		}
		if err == nil && why == "" {
			why, err = terminating(ctx, c, ns, selector)
		}
		if err != nil {
			why = err.Error()
			return false, nil
		}
		return why == "", nil
	})
	if err != nil {
		if ctx.Err() != nil {
			// Stopped from outside (an interrupt, a lost lock): say
			// why, not the last poll's "context canceled".
			return fmt.Errorf("waiting for %s to roll out: %w", w, context.Cause(ctx))
		}
		return fmt.Errorf("%s did not roll out within %s (%s): 'onprem status' and 'kubectl -n %s describe %s' show why",
			w, timeout, why, ns, strings.ToLower(w.kind)+"/"+w.name)
	}
	return nil
}

// terminating says how many of the selected pods are still terminating
// ("" when none).
func terminating(ctx context.Context, c kubernetes.Interface, ns string, selector *metav1.LabelSelector) (string, error) {
	sel, err := metav1.LabelSelectorAsSelector(selector)
	if err != nil {
		return "", err
	}
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return "", err
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			n++
		}
	}
	if n > 0 {
		return fmt.Sprintf("%d replaced pods still terminating", n), nil
	}
	return "", nil
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}

// deploymentPending says why a Deployment's rollout is not over ("" when
// it is): kubectl rollout status's rules.
func deploymentPending(d *appsv1.Deployment) string {
	want := replicas(d.Spec.Replicas)
	st := d.Status
	switch {
	case st.ObservedGeneration < d.Generation:
		return "its controller has not seen the change yet"
	case st.UpdatedReplicas < want:
		return fmt.Sprintf("%d of %d pods updated", st.UpdatedReplicas, want)
	case st.Replicas > st.UpdatedReplicas:
		return fmt.Sprintf("%d old pods still running", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < st.UpdatedReplicas:
		return fmt.Sprintf("%d of %d updated pods available", st.AvailableReplicas, st.UpdatedReplicas)
	}
	return ""
}

func statefulSetPending(s *appsv1.StatefulSet) string {
	want := replicas(s.Spec.Replicas)
	st := s.Status
	switch {
	case st.ObservedGeneration < s.Generation:
		return "its controller has not seen the change yet"
	case st.UpdatedReplicas < want:
		return fmt.Sprintf("%d of %d pods updated", st.UpdatedReplicas, want)
	case st.UpdateRevision != "" && st.CurrentRevision != st.UpdateRevision:
		return "pods of the previous revision still running"
	case st.ReadyReplicas < want:
		return fmt.Sprintf("%d of %d pods ready", st.ReadyReplicas, want)
	}
	return ""
}

// AnnotationSecretsRefreshed, on a database's pod, is set when a rotation
// needs the pod's mounted Secret to catch up with the Secret: a change
// of the pod makes the kubelet sync it, and remount its Secrets, at once,
// instead of at its next periodic sync (a minute or more). It restarts
// nothing.
const AnnotationSecretsRefreshed = "onprem.dev/secrets-refreshed"

// refreshMounts asks the kubelet to bring the Secrets mounted in the
// engine's pod up to date now (AnnotationSecretsRefreshed). A failure
// only means waiting for the periodic sync.
func refreshMounts(ctx context.Context, c kubernetes.Interface, ns, engine string, now time.Time) {
	target, err := dbdump.Pod(ctx, c, ns, engine)
	if err != nil {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		AnnotationSecretsRefreshed: now.UTC().Format(time.RFC3339Nano)}}})
	_, _ = c.CoreV1().Pods(target.Namespace).Patch(ctx, target.Pod, types.MergePatchType, patch, metav1.PatchOptions{})
}
