package roll

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/topology"
)

// On a real API server and controller manager (kwok as the kubelet): a
// replicated database's OnDelete StatefulSet, its primary member 1, is
// changed; the roll evicts member 2, then 0, then the primary, each
// through the PodDisruptionBudget and only once the one before it is
// back and ready, and returns when every member is of the new revision.
func TestRollOnAPIServer(t *testing.T) {
	c := testcluster.Start(t, testcluster.WithNodes(3))
	cs := c.Client
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := "roll"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{"app.kubernetes.io/name": "postgresql"}
	three := int32(3)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "postgresql", Namespace: ns}}
	sts.Spec = appsv1.StatefulSetSpec{
		Replicas: &three, ServiceName: "postgresql-headless", Selector: &metav1.LabelSelector{MatchLabels: labels},
		PodManagementPolicy: appsv1.ParallelPodManagement,
		UpdateStrategy:      appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType},
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": "postgresql", topology.ClusterLabel: "postgresql"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "postgresql", Image: "registry.example.com/postgresql-ha:1"}}},
		},
	}
	if _, err := cs.AppsV1().StatefulSets(ns).Create(ctx, sts, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := intstr.FromInt32(1)
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "postgresql", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &one, Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	if _, err := cs.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := Options{Client: cs, Namespace: ns, Interval: 200 * time.Millisecond, Progress: func(s string) { t.Log(s) }}
	// A first roll is the wait for a new StatefulSet: every member ready.
	if err := StatefulSet(ctx, o, "postgresql"); err != nil {
		t.Fatal(err)
	}
	// Member 1 leads, as Patroni's label says.
	patch := []byte(`{"metadata":{"labels":{"` + topology.RoleLabel + `":"master"}}}`)
	if _, err := cs.CoreV1().Pods(ns).Patch(ctx, "postgresql-1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Every pod deletion, in order, and how many members were ready then.
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var deleted []string
	go func() {
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*corev1.Pod)
			if ok && (ev.Type == watch.Deleted || (ev.Type == watch.Modified && p.DeletionTimestamp != nil)) {
				mu.Lock()
				if !slices.Contains(deleted, p.Name) || deleted[len(deleted)-1] != p.Name {
					deleted = append(deleted, p.Name)
				}
				mu.Unlock()
			}
		}
	}()
	defer w.Stop()

	s, err := cs.AppsV1().StatefulSets(ns).Get(ctx, "postgresql", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old := s.Status.UpdateRevision
	s.Spec.Template.Spec.Containers[0].Image = "registry.example.com/postgresql-ha:2"
	if _, err := cs.AppsV1().StatefulSets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := StatefulSet(ctx, o, "postgresql"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := strings.Join(deleted, " ")
	mu.Unlock()
	if got != "postgresql-2 postgresql-0 postgresql-1" {
		t.Errorf("members replaced in the order %q, want postgresql-2 postgresql-0 postgresql-1 (the primary last)", got)
	}
	s, err = cs.AppsV1().StatefulSets(ns).Get(ctx, "postgresql", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Status.UpdateRevision == old || len(pods.Items) != 3 {
		t.Fatalf("revision %s (was %s), %d pods", s.Status.UpdateRevision, old, len(pods.Items))
	}
	for _, p := range pods.Items {
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != s.Status.UpdateRevision || !topology.PodReady(&p) || p.Spec.Containers[0].Image != "registry.example.com/postgresql-ha:2" {
			t.Errorf("pod %s: revision %s, ready %v, image %s", p.Name, p.Labels[appsv1.ControllerRevisionHashLabelKey], topology.PodReady(&p), p.Spec.Containers[0].Image)
		}
	}
}
