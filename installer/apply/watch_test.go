package apply

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/fault"
	"onprem.dev/onprem/installer/render"
)

// stuckPlatform is a namespace where component web's current pod cannot
// pull its image: the registry said it does not exist.
func stuckPlatform() (*fake.Clientset, *render.Component) {
	const ns = "onprem"
	one := int32(1)
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, UID: "dep-uid", Generation: 2, Annotations: map[string]string{revisionAnnotation: "2"}},
		Spec:       appsv1.DeploymentSpec{Replicas: &one},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 2},
	}
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: ns, Annotations: map[string]string{revisionAnnotation: "2"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "Deployment", Name: "web", UID: "dep-uid"}}}}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-2-abcde", Namespace: ns, UID: "pod-uid",
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-2"}}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example.com/onprem/web:9.9.9"}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "web",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull",
				Message: `rpc error: code = NotFound desc = failed to pull and unpack image "registry.example.com/onprem/web:9.9.9": not found`}}}}},
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("apps/v1")
	u.SetKind("Deployment")
	u.SetName("web")
	u.SetNamespace(ns)
	return fake.NewSimpleClientset(dep, rs, pod), &render.Component{Name: "web", Objects: []*unstructured.Unstructured{u}}
}

// failPodLists makes the next n pod lists fail.
func failPodLists(c *fake.Clientset, n int32) *atomic.Int32 {
	left := &atomic.Int32{}
	left.Store(n)
	c.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		if left.Add(-1) >= 0 {
			return true, nil, errors.New("context canceled")
		}
		return false, nil, nil
	})
	return left
}

// watcherAfterFailedLists starts watching component web of stuckPlatform
// while its next n pod lists fail.
func watcherAfterFailedLists(ctx context.Context, n int32) *watcher {
	c, comp := stuckPlatform()
	failPodLists(c, n)
	return newWatcher(ctx, newObserver(c), comp, "onprem")
}

// A list that failed is not handed to the next caller: it lists again,
// even within the interval in which a good list is shared.
func TestObserverKeepsOnlyListsThatSucceeded(t *testing.T) {
	c, _ := stuckPlatform()
	failPodLists(c, 1)
	ob := newObserver(c)
	ctx := context.Background()
	if _, err := ob.objects(ctx, "onprem"); err == nil {
		t.Fatal("the first list did not fail")
	}
	objs, err := ob.objects(ctx, "onprem")
	if err != nil || len(objs.Pods) != 1 {
		t.Fatalf("the list after a failed one: %v, %v", objs, err)
	}
	// A good list is shared within the interval: no list is made.
	failPodLists(c, 1)
	if again, err := ob.objects(ctx, "onprem"); err != nil || again != objs {
		t.Fatalf("a second look within the interval listed again: %v", err)
	}
}

// A component whose first look fails is still watched: its next look
// finds the fault that waiting cannot fix.
func TestWatcherWhoseFirstLookFailedStillJudges(t *testing.T) {
	ctx := context.Background()
	w := watcherAfterFailedLists(ctx, 1)
	if w == nil {
		t.Fatal("a component with a Deployment was left unwatched after a failed first look")
	}
	p, err := w.look(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p.stuck == nil || p.stuck.Analyzer != fault.ImagePull || !p.stuck.Definitive {
		t.Fatalf("look = %+v, want the definitive image-pull fault", p)
	}
}

// While a namespace cannot be read at all, a look says so (the wait goes
// on, Helm's alone) rather than judging on nothing.
func TestWatcherThatCannotReadWaits(t *testing.T) {
	ctx := context.Background()
	w := watcherAfterFailedLists(ctx, 2)
	if _, err := w.look(ctx); !errors.Is(err, errNotPrimed) {
		t.Fatalf("look with an unreadable namespace: %v, want errNotPrimed", err)
	}
	if p, err := w.look(ctx); err != nil || p.stuck == nil {
		t.Fatalf("look once readable: %+v, %v", p, err)
	}
}
