package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
)

const runnerConfig = "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n"

func goneKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	kc := filepath.Join(dir, "gone.kubeconfig")
	if err := os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: gpu-site, context: {cluster: c, user: u}}]\ncurrent-context: gpu-site\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// Bad arguments exit 2 before any cluster is reached; an unreachable
// platform cluster exits 3 naming its kubeconfig and context.
func TestRunnerCommandsBadInput(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(runnerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	kc := goneKubeconfig(t, dir)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"runner", "install"}, exitInput, "name the runner"},
		{[]string{"runner", "install", "a", "b"}, exitInput, "one runner at a time"},
		{[]string{"runner", "install", "Bad_Name"}, exitInput, `runner name "Bad_Name"`},
		{[]string{"runner", "install", "gpu", "--runner-namespace", strings.Repeat("n", 60)}, exitInput, "at most 56"},
		{[]string{"runner", "install", "gpu", "--concurrency", "1000"}, exitInput, "concurrency 1000"},
		{[]string{"runner", "install", "gpu", "--namespace", "ci"}, exitInput, "--runner-namespace"},
		{[]string{"runner", "install", "gpu", "-o", "xml"}, exitInput, "-o xml"},
		{[]string{"runner", "upgrade"}, exitInput, "--all"},
		{[]string{"runner", "upgrade", "a", "--all"}, exitInput, "not both"},
		{[]string{"runner", "upgrade", "--all", "--runner-context", "gpu-site"}, exitInput, "apply to one runner"},
		{[]string{"runner", "upgrade", "a", "b", "--runner-context", "gpu-site"}, exitInput, "apply to one runner"},
		{[]string{"runner", "uninstall"}, exitInput, "name the runner"},
		{[]string{"runner", "list", "--namespace", "x"}, exitInput, "ambiguous"},
		{[]string{"runner", "install", "gpu", "--kubeconfig", kc}, exitCluster, "gpu-site"},
		{[]string{"runner", "list", "--kubeconfig", kc}, exitCluster, kc},
		{[]string{"runner", "uninstall", "gpu", "--kubeconfig", kc}, exitCluster, kc},
		{[]string{"runner", "upgrade", "--all", "--kubeconfig", kc}, exitCluster, kc},
	} {
		code, stdout, stderr := cli(t, dir, c.args...)
		if code != c.code || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d (want %d), stdout %q, stderr %s", c.args, code, c.code, stdout, stderr)
		}
	}
	// Runners need the pipelines module.
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(runnerConfig+"  modules:\n    pipelines: {enabled: false}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli(t, dir, "runner", "install", "gpu", "--kubeconfig", kc); code != exitInput || !strings.Contains(stderr, "pipelines module") {
		t.Errorf("without pipelines: %d %s", code, stderr)
	}
	// The help teaches which cluster each flag names.
	code, stdout, _ := cli(t, dir, "runner", "install", "--help")
	for _, want := range []string{"--runner-kubeconfig", "--runner-context", "--runner-namespace", "the platform's cluster", "privileged"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("runner install --help lacks %q", want)
		}
	}
}

// Against a cluster: an unreachable runner cluster exits 3 naming its
// kubeconfig (before the platform is even looked at); with no platform
// installed, install exits 2 saying so; list shows none.
func TestRunnerCommandsAgainstACluster(t *testing.T) {
	c := testcluster.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(runnerConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	kc := goneKubeconfig(t, dir)
	code, stdout, stderr := cli(t, dir, "runner", "install", "gpu", "--kubeconfig", c.Kubeconfig, "--runner-kubeconfig", kc)
	if code != exitCluster || stdout != "" || !strings.Contains(stderr, kc) || !strings.Contains(stderr, "runner gpu") {
		t.Errorf("unreachable runner cluster: exit %d, stderr %s", code, stderr)
	}
	code, _, stderr = cli(t, dir, "runner", "install", "gpu", "--kubeconfig", c.Kubeconfig)
	if code != exitInput || !strings.Contains(stderr, "no platform is installed") || !strings.Contains(stderr, "--runner-kubeconfig") {
		t.Errorf("no platform: exit %d, stderr %s", code, stderr)
	}
	code, stdout, _ = cli(t, dir, "runner", "list", "--kubeconfig", c.Kubeconfig)
	if code != 0 || !strings.Contains(stdout, "no runners") {
		t.Errorf("list: %d %s", code, stdout)
	}
	code, stdout, _ = cli(t, dir, "runner", "list", "--kubeconfig", c.Kubeconfig, "-o", "json")
	var res struct {
		Namespace string
		Runners   []any
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || res.Namespace != "onprem" || res.Runners == nil {
		t.Errorf("list -o json: %d %s", code, stdout)
	}
	code, _, stderr = cli(t, dir, "runner", "uninstall", "gpu", "--kubeconfig", c.Kubeconfig)
	if code != exitInput || !strings.Contains(stderr, `no runner "gpu"`) {
		t.Errorf("uninstall of an unknown runner: %d %s", code, stderr)
	}
	// Nothing was done: not even the platform's namespace (which taking
	// the lock would create).
	if _, err := c.Client.CoreV1().Namespaces().Get(context.Background(), "onprem", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused runner command created the platform namespace (%v)", err)
	}
}
