//go:build linux

package kube

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"onprem.dev/onprem/e2e/testcluster"
)

// TestAgainstTestCluster connects to a real kube-apiserver started by the
// harness.
func TestAgainstTestCluster(t *testing.T) {
	isolate(t)
	tc := testcluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	t.Run("connect", func(t *testing.T) {
		c, err := Connect(ctx, Options{Kubeconfig: tc.Kubeconfig})
		if err != nil {
			t.Fatal(err)
		}
		if c.ServerVersion != "v1.36.3" {
			t.Errorf("ServerVersion = %q, want v1.36.3", c.ServerVersion)
		}
		if c.Context != tc.Name || c.Kubeconfig != tc.Kubeconfig || c.Server != tc.RESTConfig.Host {
			t.Errorf("Context %q Kubeconfig %q Server %q; harness: %q %q %q",
				c.Context, c.Kubeconfig, c.Server, tc.Name, tc.Kubeconfig, tc.RESTConfig.Host)
		}
		if _, err := c.Client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Errorf("the client does not work: %v", err)
		}
		// The Helm getter's mapper resolves kinds and kubectl short names
		// through real discovery.
		m, err := c.Getter.ToRESTMapper()
		if err != nil {
			t.Fatal(err)
		}
		gvk, err := m.KindFor(schema.GroupVersionResource{Resource: "deploy"})
		if err != nil || gvk != (schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}) {
			t.Errorf("KindFor(deploy) = %v, %v", gvk, err)
		}
	})

	t.Run("KUBECONFIG", func(t *testing.T) {
		t.Setenv("KUBECONFIG", tc.Kubeconfig)
		c, err := Connect(ctx, Options{})
		if err != nil || c.ServerVersion != "v1.36.3" || c.Kubeconfig != tc.Kubeconfig {
			t.Fatalf("Connect via $KUBECONFIG = %+v, %v", c, err)
		}
	})

	t.Run("wrong context", func(t *testing.T) {
		_, err := Connect(ctx, Options{Kubeconfig: tc.Kubeconfig, Context: "production"})
		var u *UnreachableError
		if !errors.As(err, &u) || u.Reason != ReasonContextNotFound {
			t.Fatalf("error = %T %v, want *UnreachableError ContextNotFound", err, err)
		}
		if !slices.Contains(u.Contexts, tc.Name) {
			t.Errorf("Contexts = %v, want it to list %q", u.Contexts, tc.Name)
		}
		mustContain(t, err.Error(), `context "production"`, tc.Kubeconfig, tc.Name)
	})
}
