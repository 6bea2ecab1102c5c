package preflight

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/state"
)

func TestRuntimes(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	envFor := clusterEnv(t, c)
	ctx := context.Background()
	const local = "  runtimes:\n    - name: main\n      gitToken: {env: GIT_TOKEN}\n  runtimeConfig:\n    repository: {url: https://git.example.com/platform/config.git}\n    accountId: acc-1\n    platformToken: {env: PLATFORM_TOKEN}\n"
	const remote = "  runtimes:\n    - name: main\n      gitToken: {env: GIT_TOKEN}\n    - name: edge\n      gitToken: {env: GIT_TOKEN}\n      cluster: {context: edge-cluster}\n  runtimeConfig:\n    repository: {url: https://git.example.com/platform/config.git}\n    accountId: acc-1\n    platformToken: {env: PLATFORM_TOKEN}\n"

	t.Run("no runtimes", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec)), Pass, "no GitOps runtime is configured")
	})
	t.Run("no Argo CD yet", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+local)), Pass, "runtime main: the platform's cluster has no Argo CD yet", "names are unique")
	})
	t.Run("other clusters are not connected to", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+remote)), Warn, "runtime edge (cluster edge-cluster) runs on other clusters", "checked when the runtimes are installed")
	})

	// Runtimes the installation already records.
	clusterEnsureNamespace(t, c, "onprem")
	store := state.NewStore(c.Client, "onprem")
	record := func(rts map[string]state.Runtime) {
		t.Helper()
		st, err := store.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st.Installation, st.Version, st.Runtimes = "onprem", "2.8.0", rts
		if err := store.Save(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("a second runtime on the platform's cluster", func(t *testing.T) {
		record(map[string]state.Runtime{"other": {Server: c.RESTConfig.Host, Namespace: "other", Status: "deployed"}})
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+local)), Fail,
			"spec.runtimes[0]: the cluster of runtime main already runs runtime other", "a cluster runs one runtime", "onprem runtime uninstall other")
	})
	t.Run("a name installed on another cluster", func(t *testing.T) {
		record(map[string]state.Runtime{"main": {Server: "https://10.9.9.9:6443", Context: "far", Namespace: "main", Status: "deployed"}})
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+local)), Fail,
			"runtime main is already installed on the cluster at https://10.9.9.9:6443", "names are unique", "give this runtime another name")
	})
	t.Run("the recorded runtime, where it runs", func(t *testing.T) {
		record(map[string]state.Runtime{"main": {Server: c.RESTConfig.Host, Namespace: "main", Status: "deployed"}})
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+local)), Pass, "agree with the configuration")
	})
	t.Run("a second runtime on a recorded remote cluster", func(t *testing.T) {
		record(map[string]state.Runtime{"far": {Server: "https://10.9.9.9:6443", Context: "edge-cluster", Namespace: "far", Status: "deployed"}})
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+remote)), Fail, "the cluster of runtime edge already runs runtime far")
	})
	record(nil)

	dc, err := dynamic.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": argoApplicationsCRD, "labels": map[string]any{
			"app.kubernetes.io/name": argoApplicationsCRD, partOfLabel: "argocd"}},
		"spec": map[string]any{
			"group": "argoproj.io", "scope": "Namespaced",
			"names": map[string]any{"kind": "Application", "plural": "applications", "singular": "application", "listKind": "ApplicationList"},
			"versions": []any{map[string]any{"name": "v1alpha1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	crds := dc.Resource(crdResource)
	if _, err := crds.Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("Argo CD of another installation", func(t *testing.T) {
		out := clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+local))
		clusterExpect(t, out, Fail, "Argo CD CRDs from another installation are present", "applications.argoproj.io: part-of argocd", "runtime main",
			"use that Argo CD for the runtime: not supported yet", "remove that Argo CD", "another cluster")
	})
	t.Run("no runtime on the platform's cluster: not our business here", func(t *testing.T) {
		only := "  runtimes:\n    - name: edge\n      gitToken: {env: GIT_TOKEN}\n      cluster: {context: edge-cluster}\n  runtimeConfig:\n    repository: {url: https://git.example.com/platform/config.git}\n    accountId: acc-1\n    platformToken: {env: PLATFORM_TOKEN}\n"
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+only)), Warn, "runtime edge (cluster edge-cluster)")
	})
	setLabels := func(t *testing.T, l map[string]string) {
		t.Helper()
		for i := 0; ; i++ {
			cur, err := crds.Get(ctx, argoApplicationsCRD, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cur.SetLabels(l)
			if _, err = crds.Update(ctx, cur, metav1.UpdateOptions{}); err == nil {
				break
			} else if i > 20 {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // the CRD's status is being written
		}
	}
	t.Run("our own Argo CD", func(t *testing.T) {
		setLabels(t, map[string]string{partOfLabel: "onprem", installationLabel: "onprem"})
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+local)), Pass, "are this installation's")
	})
	// A runtime's objects keep the upstream chart's part-of label and get
	// this installation's label.
	t.Run("our runtime's Argo CD", func(t *testing.T) {
		setLabels(t, map[string]string{partOfLabel: "argocd", installationLabel: "onprem"})
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+local)), Pass, "are this installation's")
	})
	t.Run("another installation's runtime", func(t *testing.T) {
		setLabels(t, map[string]string{partOfLabel: "argocd", installationLabel: "other"})
		clusterExpect(t, clusterRun(t, runtimesCheck(), envFor(clusterBaseSpec+local)), Fail, "Argo CD CRDs from another installation are present")
	})
}
