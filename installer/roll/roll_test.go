package roll

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/topology"
)

const ns = "onprem"

func statefulSet(strategy appsv1.StatefulSetUpdateStrategyType) *appsv1.StatefulSet {
	three := int32(3)
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "postgresql", Namespace: ns, UID: "sts-uid", Generation: 2}}
	s.Spec.Replicas = &three
	s.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "postgresql"}}
	s.Spec.UpdateStrategy.Type = strategy
	s.Status.ObservedGeneration = 2
	s.Status.UpdateRevision = "postgresql-new"
	s.Status.ReadyReplicas = three
	return s
}

// member is a ready Patroni member of revision rev, primary or not.
func member(i int, rev string, primary bool) *corev1.Pod {
	role := "replica"
	if primary {
		role = "master"
	}
	yes := true
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: fmt.Sprintf("postgresql-%d", i), Namespace: ns, UID: types.UID(fmt.Sprintf("uid-%d-%s", i, rev)),
		Labels: map[string]string{"app.kubernetes.io/name": "postgresql", topology.ClusterLabel: "postgresql",
			topology.RoleLabel: role, appsv1.ControllerRevisionHashLabelKey: rev},
		OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "postgresql", Controller: &yes}},
	}}
	p.Status.Phase = corev1.PodRunning
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	return p
}

// cluster is a fake API server whose evictions act as the StatefulSet
// controller and the members would: the pod goes, and one of the same name
// and the update revision, a replica, ready, takes its place. refuse
// evictions are refused first, as a PodDisruptionBudget would.
type cluster struct {
	*fake.Clientset
	mu      sync.Mutex
	evicted []string
	refuse  int
	// shrink, when set, is a pod whose eviction comes with the
	// StatefulSet scaled below it: it is not replaced.
	shrink string
}

func newCluster(t *testing.T, objs ...runtime.Object) *cluster {
	t.Helper()
	c := &cluster{Clientset: fake.NewClientset(objs...)}
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.refuse > 0 {
			c.refuse--
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 1)
		}
		gvr := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		old, err := c.Tracker().Get(gvr, ns, ev.Name)
		if err != nil {
			return true, nil, err
		}
		if want := ev.DeleteOptions.Preconditions.UID; want == nil || *want != old.(*corev1.Pod).UID {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, ev.Name, fmt.Errorf("UID precondition"))
		}
		if err := c.Tracker().Delete(gvr, ns, ev.Name); err != nil {
			return true, nil, err
		}
		var i int
		fmt.Sscanf(ev.Name, "postgresql-%d", &i)
		c.evicted = append(c.evicted, ev.Name)
		if ev.Name == c.shrink {
			sgvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "statefulsets"}
			obj, err := c.Tracker().Get(sgvr, ns, "postgresql")
			if err != nil {
				return true, nil, err
			}
			sts := obj.(*appsv1.StatefulSet).DeepCopy()
			two := int32(i)
			sts.Spec.Replicas = &two
			return true, nil, c.Tracker().Update(sgvr, sts, ns)
		}
		return true, nil, c.Tracker().Create(gvr, member(i, "postgresql-new", false), ns)
	})
	return c
}

func (c *cluster) order() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.evicted, " ")
}

func roll(t *testing.T, c *cluster, timeout time.Duration) ([]string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var lines []string
	err := StatefulSet(ctx, Options{Client: c, Namespace: ns, Interval: time.Millisecond,
		Progress: func(s string) { lines = append(lines, s) }}, "postgresql")
	return lines, err
}

// The replicas are replaced first, highest ordinal first, and the primary
// last, wherever it is.
func TestRollReplicasFirstPrimaryLast(t *testing.T) {
	for _, tc := range []struct {
		primary int
		want    string
	}{
		{0, "postgresql-2 postgresql-1 postgresql-0"},
		{2, "postgresql-1 postgresql-0 postgresql-2"},
		{1, "postgresql-2 postgresql-0 postgresql-1"},
	} {
		t.Run(fmt.Sprintf("primary %d", tc.primary), func(t *testing.T) {
			c := newCluster(t, statefulSet(appsv1.OnDeleteStatefulSetStrategyType),
				member(0, "old", tc.primary == 0), member(1, "old", tc.primary == 1), member(2, "old", tc.primary == 2))
			lines, err := roll(t, c, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.order(); got != tc.want {
				t.Errorf("evicted %q, want %q", got, tc.want)
			}
			last := fmt.Sprintf("replacing postgresql-%d (primary; 1 of 3 pods of the previous revision)", tc.primary)
			if !containsLine(lines, last) {
				t.Errorf("progress %q lacks %q", lines, last)
			}
		})
	}
}

// A member of the new revision is not replaced again; a refused eviction
// (the budget) is tried again.
func TestRollResumesAndWaitsForTheBudget(t *testing.T) {
	c := newCluster(t, statefulSet(appsv1.OnDeleteStatefulSetStrategyType),
		member(0, "old", true), member(1, "old", false), member(2, "postgresql-new", false))
	c.refuse = 2
	lines, err := roll(t, c, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.order(); got != "postgresql-1 postgresql-0" {
		t.Errorf("evicted %q, want postgresql-1 then postgresql-0", got)
	}
	if !containsLine(lines, "waiting: the PodDisruptionBudget allows no eviction of postgresql-1 now") {
		t.Errorf("progress %q does not name the budget", lines)
	}
}

// A member evicted while the StatefulSet shrinks below it is not waited
// for: the roll goes on with the members that remain.
func TestRollFollowsAShrink(t *testing.T) {
	c := newCluster(t, statefulSet(appsv1.OnDeleteStatefulSetStrategyType),
		member(0, "old", true), member(1, "old", false), member(2, "old", false))
	c.shrink = "postgresql-2"
	if _, err := roll(t, c, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := c.order(); got != "postgresql-2 postgresql-1 postgresql-0" {
		t.Errorf("evicted %q, want postgresql-2, postgresql-1, postgresql-0", got)
	}
}

// Nothing is evicted while a member is not ready or missing; the error at
// the deadline says what was waited for.
func TestRollWaitsForEveryMember(t *testing.T) {
	notReady := member(1, "old", false)
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	for name, objs := range map[string][]runtime.Object{
		"pod postgresql-1 is not ready": {member(0, "old", true), notReady, member(2, "old", false)},
		"2 of 3 pods exist":             {member(0, "old", true), member(2, "old", false)},
	} {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, append(objs, statefulSet(appsv1.OnDeleteStatefulSetStrategyType))...)
			_, err := roll(t, c, 200*time.Millisecond)
			if err == nil || !strings.Contains(err.Error(), "rolling StatefulSet onprem/postgresql ("+name+"; ") ||
				!strings.Contains(err.Error(), "running the same command again finishes the roll") {
				t.Errorf("error %v, want one that names %q", err, name)
			}
			if got := c.order(); got != "" {
				t.Errorf("evicted %q while a member was down", got)
			}
		})
	}
}

// Every member current and ready, but the controller has not counted
// them all yet: the roll waits for its count, evicting nothing, and says
// so at the deadline.
func TestRollWaitsForTheControllersCount(t *testing.T) {
	s := statefulSet(appsv1.OnDeleteStatefulSetStrategyType)
	s.Status.ReadyReplicas = 2
	c := newCluster(t, s, member(0, "postgresql-new", true), member(1, "postgresql-new", false), member(2, "postgresql-new", false))
	_, err := roll(t, c, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "the StatefulSet's status counts 2 of 3 pods ready") {
		t.Errorf("error %v, want one that says the StatefulSet's status counts 2 of 3", err)
	}
	if got := c.order(); got != "" {
		t.Errorf("evicted %q", got)
	}
}

// A StatefulSet that rolls itself (RollingUpdate), or that is all of the
// update revision, is left alone.
func TestRollLeavesOthersAlone(t *testing.T) {
	for name, objs := range map[string][]runtime.Object{
		"rolling update": {statefulSet(appsv1.RollingUpdateStatefulSetStrategyType), member(0, "old", true), member(1, "old", false), member(2, "old", false)},
		"rolled out":     {statefulSet(appsv1.OnDeleteStatefulSetStrategyType), member(0, "postgresql-new", true), member(1, "postgresql-new", false), member(2, "postgresql-new", false)},
		"not there":      nil,
	} {
		t.Run(name, func(t *testing.T) {
			c := newCluster(t, objs...)
			if _, err := roll(t, c, 5*time.Second); err != nil {
				t.Fatal(err)
			}
			if got := c.order(); got != "" {
				t.Errorf("evicted %q", got)
			}
		})
	}
}

func containsLine(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

// An API server that does not answer before the deadline: the error says
// so instead of an empty reason.
func TestRollSaysWhenTheAPIServerNeverAnswered(t *testing.T) {
	c := newCluster(t, statefulSet(appsv1.OnDeleteStatefulSetStrategyType))
	c.PrependReactor("get", "statefulsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		time.Sleep(300 * time.Millisecond) // past roll's deadline
		return true, nil, context.DeadlineExceeded
	})
	_, err := roll(t, c, 100*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "rolling StatefulSet onprem/postgresql (the API server had not answered its first look") {
		t.Errorf("error %v, want one that says the API server had not answered", err)
	}
}
