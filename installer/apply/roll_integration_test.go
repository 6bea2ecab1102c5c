package apply

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/topology"
)

// only keeps the named component and what it depends on.
func only(res *render.Result, name string) *render.Result {
	keep := map[string]bool{}
	var add func(string)
	add = func(n string) {
		if keep[n] {
			return
		}
		keep[n] = true
		if c := res.Component(n); c != nil {
			for _, d := range c.DependsOn {
				add(d)
			}
		}
	}
	add(name)
	out := *res
	out.Components = slices.DeleteFunc(slices.Clone(res.Components), func(c *render.Component) bool { return !keep[c.Name] })
	return &out
}

// The replicated PostgreSQL on a real API server and controller manager
// (kwok as the kubelet, three nodes): install waits for its three members
// although Helm counts an OnDelete StatefulSet ready at once; a change
// then replaces them through apply, the replicas first and the primary
// (member 1, as Patroni's label says) last, and the progress names each.
func TestApplyRollsTheReplicatedPostgreSQL(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t, testcluster.WithNodes(3))
	ctx := context.Background()
	body := platform + "  availability: high\n"
	res := only(renderFile(t, body), "postgresql")
	if _, err := Apply(ctx, Options{Getter: getter(c), Client: c.Client, Result: res, Timeout: 3 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	s, err := c.Client.AppsV1().StatefulSets("onprem").Get(ctx, "postgresql", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType || s.Status.ReadyReplicas != 3 {
		t.Fatalf("after install: update strategy %s, %d members ready; want OnDelete and 3 (apply waits for them)", s.Spec.UpdateStrategy.Type, s.Status.ReadyReplicas)
	}
	first := s.Status.UpdateRevision
	patch := []byte(`{"metadata":{"labels":{"` + topology.RoleLabel + `":"master"}}}`)
	if _, err := c.Client.CoreV1().Pods("onprem").Patch(ctx, "postgresql-1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// A change of the members' template (as an upgrade's new image).
	res = only(renderFile(t, body), "postgresql")
	for _, o := range res.Component("postgresql").Objects {
		if o.GetKind() == "StatefulSet" {
			if err := unstructured.SetNestedField(o.Object, "2", "spec", "template", "metadata", "annotations", "onprem.dev/test-change"); err != nil {
				t.Fatal(err)
			}
		}
	}
	rec := &recorder{}
	rep, err := Apply(ctx, Options{Getter: getter(c), Client: c.Client, Result: res, Timeout: 3 * time.Minute, Reporter: rec})
	if err != nil {
		t.Fatal(err)
	}
	if pg, _ := rep.Component("postgresql"); pg.Action != Upgraded {
		t.Errorf("postgresql: %+v, want upgraded", pg)
	}
	var replaced []string
	rec.mu.Lock()
	for _, e := range rec.events {
		if e.Component == "postgresql" && e.Phase == PhaseWaiting && strings.HasPrefix(e.Waiting, "replacing ") {
			replaced = append(replaced, strings.Fields(e.Waiting)[1]+" "+strings.Trim(strings.Fields(e.Waiting)[2], "(;"))
		}
	}
	rec.mu.Unlock()
	if got, want := strings.Join(replaced, ", "), "postgresql-2 replica, postgresql-0 replica, postgresql-1 primary"; got != want {
		t.Errorf("replaced %q, want %q", got, want)
	}
	s, err = c.Client.AppsV1().StatefulSets("onprem").Get(ctx, "postgresql", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := c.Client.CoreV1().Pods("onprem").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=postgresql"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Status.UpdateRevision == first || len(pods.Items) != 3 {
		t.Fatalf("revision %s (first %s), %d members", s.Status.UpdateRevision, first, len(pods.Items))
	}
	for _, p := range pods.Items {
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != s.Status.UpdateRevision || !topology.PodReady(&p) {
			t.Errorf("member %s: revision %s, ready %v; want %s and ready", p.Name, p.Labels[appsv1.ControllerRevisionHashLabelKey], topology.PodReady(&p), s.Status.UpdateRevision)
		}
	}
}
