package attachment

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
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
