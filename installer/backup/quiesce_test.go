package backup

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func deployment(name, component string, replicas *int32, annotations map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "platform", Labels: map[string]string{componentLabel: component}, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{Replicas: replicas, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}}},
	}
}

func getDeployment(t *testing.T, c *fake.Clientset, name string) *appsv1.Deployment {
	t.Helper()
	d, err := c.AppsV1().Deployments("platform").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// StopServices scales the listed components' Deployments to zero and notes
// how many replicas each had; one an interrupted run already stopped keeps
// the count that run noted, and other components are not touched.
func TestStopServicesNotesReplicas(t *testing.T) {
	c := fake.NewClientset(
		deployment("api", "pipelines-api", i32(3), nil),
		deployment("ui", "pipelines-ui", nil, nil),
		deployment("cron", "cron-executor", i32(0), map[string]string{ReplicasAnnotation: "5"}),
		deployment("other", "gitops-api", i32(2), nil),
	)
	stopped, err := StopServices(context.Background(), c, "platform", []string{"pipelines-api", "pipelines-ui", "cron-executor"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(stopped)
	if !slices.Equal(stopped, []string{"api", "cron", "ui"}) {
		t.Errorf("stopped %v", stopped)
	}
	for name, want := range map[string]string{"api": "3", "ui": "1", "cron": "5"} {
		d := getDeployment(t, c, name)
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 0 {
			t.Errorf("%s: replicas %v, want 0", name, d.Spec.Replicas)
		}
		if got := d.Annotations[ReplicasAnnotation]; got != want {
			t.Errorf("%s: noted %q replicas, want %q", name, got, want)
		}
	}
	if d := getDeployment(t, c, "other"); *d.Spec.Replicas != 2 || d.Annotations[ReplicasAnnotation] != "" {
		t.Errorf("a component not listed was touched: %v %v", *d.Spec.Replicas, d.Annotations)
	}
}

func TestStopServicesNothingToStop(t *testing.T) {
	c := fake.NewClientset(deployment("api", "pipelines-api", i32(3), nil))
	stopped, err := StopServices(context.Background(), c, "platform", nil)
	if err != nil || len(stopped) != 0 {
		t.Fatalf("StopServices of no component: %v, %v", stopped, err)
	}
	if d := getDeployment(t, c, "api"); *d.Spec.Replicas != 3 {
		t.Error("StopServices of no component stopped something")
	}
}

// StopServices returns only once the pods are gone: while one remains it
// waits (here until its context ends).
func TestStopServicesWaitsForThePods(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "api-1", Namespace: "platform", Labels: map[string]string{"app": "api"}}}
	c := fake.NewClientset(deployment("api", "pipelines-api", i32(1), nil), pod)
	ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel()
	stopped, err := StopServices(ctx, c, "platform", []string{"pipelines-api"})
	if err == nil || !strings.Contains(err.Error(), "waiting for the services' pods to stop") {
		t.Fatalf("StopServices with a pod left: %v, want a wait that failed", err)
	}
	if !slices.Equal(stopped, []string{"api"}) {
		t.Errorf("stopped = %v, want the Deployment it scaled down", stopped)
	}
}

// StartServices gives back exactly what StopServices noted, removes the
// note, and leaves Deployments it did not stop alone.
func TestStartServicesRestoresNotedReplicas(t *testing.T) {
	ready := func(d *appsv1.Deployment, n int32) *appsv1.Deployment {
		d.Status = appsv1.DeploymentStatus{UpdatedReplicas: n, AvailableReplicas: n}
		return d
	}
	c := fake.NewClientset(
		ready(deployment("api", "pipelines-api", i32(0), map[string]string{ReplicasAnnotation: "3"}), 3),
		ready(deployment("bad", "pipelines-ui", i32(0), map[string]string{ReplicasAnnotation: "many"}), 1),
		deployment("untouched", "gitops-api", i32(0), nil),
	)
	started, err := StartServices(context.Background(), c, "platform", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(started)
	if !slices.Equal(started, []string{"api", "bad"}) {
		t.Errorf("started %v", started)
	}
	for name, want := range map[string]int32{"api": 3, "bad": 1, "untouched": 0} {
		d := getDeployment(t, c, name)
		if *d.Spec.Replicas != want {
			t.Errorf("%s: replicas %d, want %d", name, *d.Spec.Replicas, want)
		}
		if _, ok := d.Annotations[ReplicasAnnotation]; ok {
			t.Errorf("%s: the note is still there", name)
		}
	}
}

func TestStartServicesNamesThoseNotAvailable(t *testing.T) {
	c := fake.NewClientset(deployment("api", "pipelines-api", i32(0), map[string]string{ReplicasAnnotation: "2"}))
	_, err := StartServices(context.Background(), c, "platform", time.Second)
	if err == nil || !strings.Contains(err.Error(), "not available again after the restore: api") {
		t.Fatalf("StartServices of a Deployment that never becomes available: %v", err)
	}
}

func TestAvailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    appsv1.Deployment
		want bool
	}{
		{"default one replica available", appsv1.Deployment{Status: appsv1.DeploymentStatus{UpdatedReplicas: 1, AvailableReplicas: 1}}, true},
		{"none available", appsv1.Deployment{Status: appsv1.DeploymentStatus{UpdatedReplicas: 1}}, false},
		{"fewer than wanted", appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: i32(3)}, Status: appsv1.DeploymentStatus{UpdatedReplicas: 3, AvailableReplicas: 2}}, false},
		{"old generation observed", appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: appsv1.DeploymentStatus{ObservedGeneration: 1, UpdatedReplicas: 1, AvailableReplicas: 1}}, false},
		{"zero wanted", appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: i32(0)}}, true},
	} {
		if got := available(&tc.d); got != tc.want {
			t.Errorf("%s: available = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func i32(n int32) *int32 { return &n }

// ReleaseServices removes StopServices' note and gives the scheduled
// backups back, but starts nothing: the Deployments stay at zero for the
// apply that follows, and those it did not stop are left alone.
func TestReleaseServicesLeavesThemAtZero(t *testing.T) {
	c := fake.NewClientset(
		deployment("api", "pipelines-api", i32(2), nil),
		deployment("untouched", "gitops-api", i32(3), nil),
		cronJob("onprem-backup", nil, nil),
	)
	if _, err := StopServices(context.Background(), c, "platform", []string{"pipelines-api"}); err != nil {
		t.Fatal(err)
	}
	released, err := ReleaseServices(context.Background(), c, "platform")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(released, []string{"api"}) {
		t.Errorf("released %v, want [api]", released)
	}
	for name, want := range map[string]int32{"api": 0, "untouched": 3} {
		d := getDeployment(t, c, name)
		if *d.Spec.Replicas != want {
			t.Errorf("%s: replicas %d, want %d", name, *d.Spec.Replicas, want)
		}
		if _, ok := d.Annotations[ReplicasAnnotation]; ok {
			t.Errorf("%s: the note is still there", name)
		}
	}
	if cj := getCronJob(t, c, "onprem-backup"); suspended(cj) {
		t.Error("the scheduled backup is still suspended")
	}
}
