package preflight

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
)

// helmReleaseSecret is a Helm release record as Helm's Secret driver
// stores it: base64 of gzipped JSON under data.release.
func helmReleaseSecret(t testing.TB, name string, chart map[string]any, labels map[string]string) *corev1.Secret {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"name": name, "version": 1, "chart": map[string]any{"metadata": chart}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(raw)
	zw.Close()
	l := map[string]string{"owner": "helm", "name": name, "status": "deployed", "version": "1"}
	for k, v := range labels {
		l[k] = v
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1." + name + ".v1", Labels: l},
		Type:       "helm.sh/release.v1",
		Data:       map[string][]byte{"release": []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))},
	}
}

func TestNamespaceConflicts(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	envFor := clusterEnv(t, c)
	ctx := context.Background()
	ns := "onprem"
	clusterEnsureNamespace(t, c, ns)

	t.Run("empty namespace", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, namespaceConflictsCheck(), envFor(clusterBaseSpec)), Pass, "none of the")
	})

	// Ours from an earlier install: a release of our chart and objects
	// annotated with its name.
	create := func(s *corev1.Secret) {
		t.Helper()
		if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(helmReleaseSecret(t, "mongodb", map[string]any{"name": "mongodb", "version": "1.0.0"}, map[string]string{digestLabel: "abc"}))
	create(helmReleaseSecret(t, "platform", map[string]any{"name": "onprem-platform", "version": "1.0.0"}, map[string]string{digestLabel: "abc"}))
	svc := func(name string, annotations map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, svc("mongodb", map[string]string{helmReleaseNameAnnotation: "mongodb", helmReleaseNamespaceAnnotation: ns}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("our own release and objects", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, namespaceConflictsCheck(), envFor(clusterBaseSpec)), Pass)
	})

	// Someone else's: a Bitnami redis release, a hand-made Service of a
	// component's name, a ServiceAccount of another release.
	create(helmReleaseSecret(t, "redis", map[string]any{"name": "redis", "version": "19.6.2", "keywords": []string{"redis", "keyvalue"}}, nil))
	create(helmReleaseSecret(t, "rabbitmq", map[string]any{"name": "rabbitmq-ha", "version": "1.2.3"}, nil))
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, svc("redis", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "gitops-api",
		Annotations: map[string]string{helmReleaseNameAnnotation: "argo", helmReleaseNamespaceAnnotation: ns}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("foreign releases and objects", func(t *testing.T) {
		out := clusterRun(t, namespaceConflictsCheck(), envFor(clusterBaseSpec))
		clusterExpect(t, out, Fail,
			"4 objects or Helm releases",
			"Helm release redis is of a chart named redis 19.6.2 that is not onprem's",
			"Helm release rabbitmq is of chart rabbitmq-ha 1.2.3, not onprem's chart rabbitmq",
			"Service onprem/redis exists, not managed by Helm (component redis would take it over)",
			"ServiceAccount onprem/gitops-api exists, managed by Helm release argo in namespace onprem",
			"spec.namespace", "helm -n onprem uninstall")
		if len(out.Details) != 4 {
			t.Errorf("details: %q", out.Details)
		}
	})
	t.Run("another namespace has no conflict", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, namespaceConflictsCheck(), envFor(clusterBaseSpec+"  namespace: platform\n")), Pass)
	})
	t.Run("forbidden to list", func(t *testing.T) {
		env := clusterLoadEnv(t, clusterBaseSpec)
		env.Cluster = clusterConnect(t, serviceAccountKubeconfig(t, c, "default", "blind"))
		clusterExpect(t, clusterRun(t, namespaceConflictsCheck(), env), Fail, "could not run: list Helm release Secrets in namespace onprem", "forbidden")
	})
}
