//go:build linux

package action

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/installer/state"
)

// handEdit is one change made to the platform behind onprem's back, and
// what install must say it reverted (nil: nothing, it is not onprem's).
type handEdit struct {
	name      string
	component string
	edit      func(t *testing.T, c kubernetes.Interface)
	drift     []string
}

// The hand edits of an operator, a script or another tool, each in its own
// component: install finds each, applies only those components again,
// names each object and what was reverted, and the cluster matches the
// file again; fields that onprem does not set (another manager's
// annotations, a 'kubectl rollout restart', an autoscaler's replicas) are
// left alone. Status and doctor show the drift first without changing
// anything, and the history records the repair.
func TestInstallRepairsDrift(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	src, cl := clusterConfig(t, c, smallPlatform)
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	target := Target{Cluster: cl, Namespace: "onprem"}
	// A platform just installed has no drift, whatever its controllers
	// wrote since (Deployments' revisions, a Job's defaults, Services'
	// addresses).
	wantDrift(t, target, nil)
	k := c.Client
	before := snapshotOf(t, k)

	const badImage = "quay.io/codefresh/gitops-ui:9.9.9-nope"
	const restarted = "kubectl.kubernetes.io/restartedAt"
	edits := []handEdit{
		{"an image (kubectl set image)", "gitops-ui", func(t *testing.T, c kubernetes.Interface) {
			updateDeployment(t, c, "gitops-ui", "kubectl-set", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image = badImage })
		}, []string{"Deployment/gitops-ui image"}},
		{"an environment variable (kubectl set env)", "gitops-api", func(t *testing.T, c kubernetes.Interface) {
			updateDeployment(t, c, "gitops-api", "kubectl-set", func(d *appsv1.Deployment) {
				env := d.Spec.Template.Spec.Containers[0].Env
				i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Value != "" })
				if i < 0 {
					t.Fatalf("gitops-api has no environment variable with a value: %+v", env)
				}
				env[i].Value = "changed-by-hand"
			})
		}, []string{"Deployment/gitops-api env"}},
		{"replicas, without an autoscaler (kubectl scale)", "cron-executor", func(t *testing.T, c kubernetes.Interface) {
			scale(t, c, "cron-executor", 3, "kubectl-scale")
		}, []string{"Deployment/cron-executor replicas"}},
		{"a deleted Service", "argo-hub", func(t *testing.T, c kubernetes.Interface) {
			if err := c.CoreV1().Services("onprem").Delete(ctx, "argo-hub", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, []string{"Service/argo-hub (deleted)"}},
		{"a deleted ConfigMap", "rabbitmq", func(t *testing.T, c kubernetes.Interface) {
			if err := c.CoreV1().ConfigMaps("onprem").Delete(ctx, "rabbitmq", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, []string{"ConfigMap/rabbitmq (deleted)"}},
		{"a NetworkPolicy opened to everyone (kubectl edit)", "platform", func(t *testing.T, c kubernetes.Interface) {
			np, err := c.NetworkingV1().NetworkPolicies("onprem").Get(ctx, "onprem-routed-ingress", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
			if _, err := c.NetworkingV1().NetworkPolicies("onprem").Update(ctx, np, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
				t.Fatal(err)
			}
		}, []string{"NetworkPolicy/onprem-routed-ingress ingress"}},
		{"an image of a Deployment an autoscaler scales", "audit-manager", func(t *testing.T, c kubernetes.Interface) {
			min := int32(1)
			hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "audit-manager", Namespace: "onprem"},
				Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MinReplicas: &min, MaxReplicas: 5,
					ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "audit-manager"}}}
			if _, err := c.AutoscalingV2().HorizontalPodAutoscalers("onprem").Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			scale(t, c, "audit-manager", 3, "kube-controller-manager") // as the autoscaler does
			updateDeployment(t, c, "audit-manager", "kubectl-set", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image += "-nope" })
		}, []string{"Deployment/audit-manager image"}},
		{"another manager's annotation and a rollout restart", "event-handler", func(t *testing.T, c kubernetes.Interface) {
			apply := []byte(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"event-handler","annotations":{"ops.example.com/owner":"team-a"},"labels":{"ops.example.com/tier":"gold"}}}`)
			force := true
			if _, err := c.AppsV1().Deployments("onprem").Patch(ctx, "event-handler", types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: "ops-dashboard", Force: &force}); err != nil {
				t.Fatal(err)
			}
			patch := []byte(`{"spec":{"template":{"metadata":{"annotations":{"` + restarted + `":"2026-11-25T12:00:00Z"}}}}}`)
			if _, err := c.AppsV1().Deployments("onprem").Patch(ctx, "event-handler", types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-rollout"}); err != nil {
				t.Fatal(err)
			}
		}, nil},
	}
	want := map[string][]string{}
	for _, e := range edits {
		e.edit(t, k)
		if e.drift != nil {
			want[e.component] = e.drift
		}
	}

	// Status and doctor name the drift and change nothing.
	wantDrift(t, target, want)
	rep, err := (&Doctor{Collect: Collect{Target: target, NoPreflight: true}}).Run(ctx)
	var fe *FindingsError
	if err != nil && !errors.As(err, &fe) {
		t.Fatal(err)
	}
	found := map[string]doctor.Finding{}
	for _, f := range rep.Findings {
		if f.Analyzer == "drift" {
			found[f.Component] = f
		}
	}
	for comp, objs := range want {
		f, ok := found[comp]
		if !ok || f.Severity != doctor.Warning || !strings.Contains(f.Remediation, "onprem install") || !strings.Contains(f.Title, strings.Join(objs, "; ")) {
			t.Errorf("doctor's drift finding of %s: %+v", comp, f)
		}
	}
	if len(found) != len(want) {
		t.Errorf("doctor names drift in %v, want %v", slices.Sorted(maps.Keys(found)), slices.Sorted(maps.Keys(want)))
	}
	if d := deployment(t, k, "gitops-ui"); d.Spec.Template.Spec.Containers[0].Image != badImage {
		t.Fatalf("status or doctor changed the drifted image: %s", d.Spec.Template.Spec.Containers[0].Image)
	}

	// install repairs exactly the drifted components, and names each.
	res, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Components {
		objs, drifted := want[r.Name]
		switch {
		case drifted && (r.Action != apply.Repaired || r.Revision != 2 || !slices.Equal(r.Repaired, objs)):
			t.Errorf("%s: %s, revision %d, repaired %q; want repaired %q at revision 2", r.Name, r.Action, r.Revision, r.Repaired, objs)
		case !drifted && (r.Action != apply.Unchanged || r.Revision != 1):
			t.Errorf("%s (no drift of onprem's): %s, revision %d", r.Name, r.Action, r.Revision)
		}
	}
	var named []string
	for _, objs := range want {
		named = append(named, objs...)
	}
	if got := res.Repaired(); !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(named))) {
		t.Errorf("install names %q as repaired, want %q", got, named)
	}

	// The cluster matches the file again; what is not onprem's stayed.
	after := snapshotOf(t, k)
	for _, name := range []string{"gitops-ui", "gitops-api", "cron-executor"} {
		if !equalJSON(before.deployments[name].Spec, after.deployments[name].Spec) {
			t.Errorf("Deployment %s is not as onprem applied it:\nbefore %s\nafter  %s", name, toJSON(before.deployments[name].Spec), toJSON(after.deployments[name].Spec))
		}
	}
	am := after.deployments["audit-manager"]
	if am.Spec.Template.Spec.Containers[0].Image != before.deployments["audit-manager"].Spec.Template.Spec.Containers[0].Image || am.Spec.Replicas == nil || *am.Spec.Replicas != 3 {
		t.Errorf("audit-manager: image %s (want it reverted), replicas %v (want the autoscaler's 3 kept)", am.Spec.Template.Spec.Containers[0].Image, am.Spec.Replicas)
	}
	eh := after.deployments["event-handler"]
	if eh.Annotations["ops.example.com/owner"] != "team-a" || eh.Labels["ops.example.com/tier"] != "gold" || eh.Spec.Template.Annotations[restarted] == "" {
		t.Errorf("another manager's fields were taken away: annotations %v, labels %v, pod annotations %v", eh.Annotations, eh.Labels, eh.Spec.Template.Annotations)
	}
	if _, err := k.CoreV1().Services("onprem").Get(ctx, "argo-hub", metav1.GetOptions{}); err != nil {
		t.Errorf("the deleted Service is not back: %v", err)
	}
	if _, err := k.CoreV1().ConfigMaps("onprem").Get(ctx, "rabbitmq", metav1.GetOptions{}); err != nil {
		t.Errorf("the deleted ConfigMap is not back: %v", err)
	}
	np, err := k.NetworkingV1().NetworkPolicies("onprem").Get(ctx, "onprem-routed-ingress", metav1.GetOptions{})
	if err != nil || !equalJSON(np.Spec, before.policy.Spec) {
		t.Errorf("the NetworkPolicy is not as onprem applied it: %v\nbefore %s\nafter  %s", err, toJSON(before.policy.Spec), toJSON(np.Spec))
	}

	// The history says what was reverted.
	st := loadState(t, k)
	op := lastOp(st)
	for comp, objs := range want {
		for _, o := range objs {
			if !slices.Contains(op.Repaired, comp+": "+o) {
				t.Errorf("the history's install does not record %q: %q", comp+": "+o, op.Repaired)
			}
		}
		if st.Components[comp].Status != string(apply.Repaired) || st.Components[comp].Revision != 2 {
			t.Errorf("state of %s: %+v", comp, st.Components[comp])
		}
	}
	if op.Kind != state.KindInstall || op.Outcome != state.OutcomeSucceeded || !strings.Contains(op.Message, "; repaired ") || !strings.Contains(op.Message, "Deployment/gitops-ui image") {
		t.Errorf("the install recorded: %+v", op)
	}

	// Converged again: nothing to repair, nothing applied.
	wantDrift(t, target, nil)
	res, err = (&Install{Source: src, Cluster: cl}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Components {
		if r.Action != apply.Unchanged {
			t.Errorf("the run after the repair: %s %s %q", r.Name, r.Action, r.Repaired)
		}
	}
}

// wantDrift checks status's drift of every component: want by component,
// none for the others.
func wantDrift(t *testing.T, target Target, want map[string][]string) {
	t.Helper()
	st, err := (&Status{Target: target}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Components) == 0 {
		t.Fatal("status lists no component")
	}
	for _, c := range st.Components {
		if c.DriftError != "" {
			t.Errorf("status could not compare %s: %s", c.Name, c.DriftError)
		}
		if !slices.Equal(c.Drift, want[c.Name]) {
			t.Errorf("status: %s drifted %q, want %q", c.Name, c.Drift, want[c.Name])
		}
	}
}

type platformObjects struct {
	deployments map[string]appsv1.Deployment
	policy      networkingv1.NetworkPolicy
}

func snapshotOf(t *testing.T, c kubernetes.Interface) platformObjects {
	t.Helper()
	ctx := context.Background()
	l, err := c.AppsV1().Deployments("onprem").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := platformObjects{deployments: map[string]appsv1.Deployment{}}
	for _, d := range l.Items {
		out.deployments[d.Name] = d
	}
	np, err := c.NetworkingV1().NetworkPolicies("onprem").Get(ctx, "onprem-routed-ingress", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out.policy = *np
	return out
}

func deployment(t *testing.T, c kubernetes.Interface, name string) *appsv1.Deployment {
	t.Helper()
	d, err := c.AppsV1().Deployments("onprem").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// updateDeployment changes a Deployment as kubectl's edits do (an update
// under their field manager).
func updateDeployment(t *testing.T, c kubernetes.Interface, name, manager string, change func(*appsv1.Deployment)) {
	t.Helper()
	// The Deployment controller writes the object too (its revision
	// annotation), so an edit can meet a newer version: read again and
	// repeat the edit, as an operator would after kubectl's conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d := deployment(t, c, name)
		change(d)
		_, err := c.AppsV1().Deployments("onprem").Update(context.Background(), d, metav1.UpdateOptions{FieldManager: manager})
		return err
	})
	if err != nil {
		t.Fatalf("changing %s by hand: %v", name, err)
	}
}

func scale(t *testing.T, c kubernetes.Interface, name string, replicas int32, manager string) {
	t.Helper()
	s := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem"}, Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	if _, err := c.AppsV1().Deployments("onprem").UpdateScale(context.Background(), name, s, metav1.UpdateOptions{FieldManager: manager}); err != nil {
		t.Fatalf("scaling %s: %v", name, err)
	}
}

func equalJSON(a, b any) bool { return toJSON(a) == toJSON(b) }

func toJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
