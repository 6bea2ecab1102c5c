package preflight

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
)

func TestPSALabelProblems(t *testing.T) {
	ok := map[string]string{psaPrefix + "enforce": "baseline", psaPrefix + "enforce-version": "v1.30", psaPrefix + "warn": "restricted", psaPrefix + "audit-version": "latest"}
	if p := psaLabelProblems(ok); len(p) != 0 {
		t.Errorf("valid labels reported: %v", p)
	}
	bad := map[string]string{psaPrefix + "enforce": "strict", psaPrefix + "warn-version": "1.30"}
	if p := psaLabelProblems(bad); len(p) != 2 {
		t.Errorf("problems = %v", p)
	}
}

func TestPodSecurity(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	envFor := clusterEnv(t, c)
	ctx := context.Background()
	setLabels := func(ns string, labels map[string]string) {
		t.Helper()
		n, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			n, err = c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
		}
		n.Labels = labels
		if _, err := c.Client.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("namespace not there yet", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, podSecurityCheck(), envFor(clusterBaseSpec)), Pass, "does not exist yet", "enforce=restricted")
	})
	t.Run("no enforce label", func(t *testing.T) {
		setLabels("onprem", map[string]string{psaPrefix + "warn": "baseline"})
		clusterExpect(t, clusterRun(t, podSecurityCheck(), envFor(clusterBaseSpec)), Warn, "has no pod-security.kubernetes.io/enforce label (has: warn=baseline)", "the install sets the label")
	})
	t.Run("privileged is admitted, and the change is said", func(t *testing.T) {
		setLabels("onprem", map[string]string{psaPrefix + "enforce": "privileged"})
		clusterExpect(t, clusterRun(t, podSecurityCheck(), envFor(clusterBaseSpec)), Pass, "enforce=privileged", "changes enforce to restricted")
	})
	t.Run("restricted", func(t *testing.T) {
		setLabels("onprem", map[string]string{psaPrefix + "enforce": "restricted", psaPrefix + "enforce-version": "latest"})
		clusterExpect(t, clusterRun(t, podSecurityCheck(), envFor(clusterBaseSpec)), Pass, "enforce=restricted: the platform's")
	})
	// The API server refuses invalid pod-security labels on update, so an
	// invalid label can only be met on a namespace made before PSA was
	// on; psaLabelProblems is tested above.
}
