package attachment

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
)

func TestReadiness(t *testing.T) {
	two, zero := int32(2), int32(0)
	d := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &two}, Status: appsv1.DeploymentStatus{ReadyReplicas: 1}}
	if r := ReadinessOf(d); r != (Readiness{Ready: 1, Desired: 2}) || r.OK() {
		t.Errorf("1 of 2: %+v ok=%v", r, r.OK())
	}
	d.Status.ReadyReplicas = 2
	if !ReadinessOf(d).OK() {
		t.Error("2 of 2 is not OK")
	}
	d.Spec.Replicas = nil
	if r := ReadinessOf(d); r.Desired != 1 {
		t.Errorf("no replica count: desired %d, want 1", r.Desired)
	}
	d.Spec.Replicas = &zero
	if ReadinessOf(d).OK() {
		t.Error("a Deployment that wants no replica is OK")
	}
}

// An attachment without a namespace is refused before anything is
// touched: an empty namespace would select every namespace.
func TestRemoveNeedsANamespace(t *testing.T) {
	a := Attachment{Kind: "runner", Name: "a", Label: "onprem.dev/runner", Release: "runner-a", Namespaces: []string{"", ""}}
	if _, _, err := a.Remove(context.Background(), nil, 0, nil); err == nil || !strings.Contains(err.Error(), "runner a: no namespace recorded") {
		t.Errorf("err = %v", err)
	}
}

// WaitReady waits for every Deployment of the release in every namespace
// of the attachment, and names the ones still short when time runs out.
func TestWaitReady(t *testing.T) {
	one := int32(1)
	dep := func(ns, name, release string, ready int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{render.ComponentLabel: release}},
			Spec: appsv1.DeploymentSpec{Replicas: &one}, Status: appsv1.DeploymentStatus{ReadyReplicas: ready}}
	}
	client := fake.NewClientset(
		dep("rt", "server", "runtime-a", 1),
		dep("rt", "app-proxy", "runtime-a", 0),
		dep("rt-engine", "engine", "runtime-a", 1),
		dep("rt", "other", "runtime-b", 0), // another release's: not waited for
	)
	cl := &kube.Cluster{Client: client}
	a := Attachment{Kind: "runtime", Name: "a", Release: "runtime-a", Namespaces: []string{"rt", "rt-engine"}}

	// Still 0/1 when time runs out: named, with its namespace.
	err := a.WaitReady(context.Background(), cl, 1500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "rt/app-proxy 0/1") || strings.Contains(err.Error(), "other") || strings.Contains(err.Error(), "server") {
		t.Fatalf("WaitReady with app-proxy at 0/1: %v", err)
	}

	// Ready a moment after the wait began: WaitReady returns then.
	go func() {
		time.Sleep(1500 * time.Millisecond)
		d := dep("rt", "app-proxy", "runtime-a", 1)
		if _, err := client.AppsV1().Deployments("rt").Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	if err := a.WaitReady(context.Background(), cl, time.Minute); err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	if waited := time.Since(start); waited < time.Second || waited > 30*time.Second {
		t.Errorf("WaitReady returned after %s, want after the update (1.5 s)", waited)
	}
}

func TestRemaining(t *testing.T) {
	if r := Remaining(10*time.Minute, time.Now().Add(-time.Minute)); r < 8*time.Minute || r > 9*time.Minute {
		t.Errorf("Remaining(10m, a minute ago) = %s", r)
	}
	if r := Remaining(time.Minute, time.Now().Add(-5*time.Minute)); r != 30*time.Second {
		t.Errorf("Remaining past its timeout = %s, want the 30 s floor", r)
	}
}
