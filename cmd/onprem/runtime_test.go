package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/gitops/gitopstest"
)

const runtimeConfig = "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n" +
	"  runtimeConfig:\n    repository: {url: https://git.example.com/platform/config.git}\n    accountId: acc-1\n"

// Bad arguments exit 2 before any cluster is reached; an unreachable
// platform cluster exits 3; the token is never taken from a flag value.
func TestRuntimeCommandsBadInput(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(runtimeConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	kc := goneKubeconfig(t, dir)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"runtime", "install", "Bad_Name"}, exitInput, `runtime name "Bad_Name"`},
		{[]string{"runtime", "install", "a", "b"}, exitInput, "accepts at most 1 arg"},
		{[]string{"runtime", "install", "--git-token", "x"}, exitInput, "--git-token: a token is never given as a value (it would land in shell history): give a file with --git-token-file, or the environment variable ONPREM_GIT_TOKEN"},
		{[]string{"runtime", "install", "--platform-token", "x"}, exitInput, "--platform-token: a token is never given as a value (it would land in shell history): give a file with --platform-token-file, or the environment variable ONPREM_PLATFORM_TOKEN"},
		{[]string{"runtime", "upgrade", "a", "--platform-token=x"}, exitInput, "never given as a value"},
		{[]string{"runtime", "install", "--platform-token-file", filepath.Join(dir, "missing"), "--kubeconfig", kc}, exitInput, "--platform-token-file: reading the platform token"},
		{[]string{"runtime", "upgrade", "a", "b", "--platform-token-file", "f"}, exitInput, "apply to one runtime"},
		{[]string{"runtime", "install", "--git-token-file", filepath.Join(dir, "missing"), "--kubeconfig", kc}, exitInput, "reading the Git token"},
		{[]string{"runtime", "install", "--namespace", "x"}, exitInput, "ambiguous"},
		{[]string{"runtime", "install", "-o", "xml"}, exitInput, "-o xml"},
		{[]string{"runtime", "upgrade"}, exitInput, "--all"},
		{[]string{"runtime", "upgrade", "a", "--all"}, exitInput, "not both"},
		{[]string{"runtime", "uninstall"}, exitInput, "accepts 1 arg"},
		{[]string{"runtime", "cluster", "add", "prod", "--platform-kubeconfig", kc}, exitInput, "say which cluster to add"},
		{[]string{"runtime", "install", "--kubeconfig", kc, "--git-token-file", filepath.Join(dir, "onprem.yaml")}, exitCluster, "gpu-site"},
		{[]string{"runtime", "list", "--kubeconfig", kc}, exitCluster, kc},
		{[]string{"runtime", "uninstall", "edge", "--kubeconfig", kc}, exitCluster, kc},
		{[]string{"runtime", "git-source", "list", "--kubeconfig", kc}, exitCluster, kc},
		{[]string{"runtime", "cluster", "list", "--platform-kubeconfig", kc}, exitCluster, kc},
	} {
		code, stdout, stderr := cli(t, dir, c.args...)
		if code != c.code || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d (want %d), stdout %q, stderr %s", c.args, code, c.code, stdout, stderr)
		}
	}
	// A runtime needs the platform account: the field and the flag are
	// named.
	noAccount := strings.Replace(runtimeConfig, "    accountId: acc-1\n", "", 1)
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(noAccount), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli(t, dir, "runtime", "install", "--kubeconfig", kc); code != exitInput || !strings.Contains(stderr, "spec.runtimeConfig.accountId: required") || !strings.Contains(stderr, "--account ID") {
		t.Errorf("without an account: %d %s", code, stderr)
	}
	if code, _, stderr := cli(t, dir, "runtime", "install", "--kubeconfig", kc, "--account", "acc-2", "--git-token-file", filepath.Join(dir, "onprem.yaml")); code != exitCluster {
		t.Errorf("--account: %d %s", code, stderr)
	}
	// Runtimes need the GitOps module.
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(runtimeConfig+"  modules:\n    gitops: {enabled: false}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli(t, dir, "runtime", "install", "--kubeconfig", kc); code != exitInput || !strings.Contains(stderr, "gitops module") {
		t.Errorf("without gitops: %d %s", code, stderr)
	}
	// The help teaches where the token comes from and which cluster each
	// flag names.
	for args, wants := range map[string][]string{
		"runtime install --help": {"--git-token-file", "ONPREM_GIT_TOKEN", "--runtime-context", "--chart-repository", "refused token leaves nothing behind",
			"--platform-token-file", "ONPREM_PLATFORM_TOKEN", "--account", "What onprem fills in", "What onprem never stores", "runtime.contract"},
		"runtime upgrade --help":     {"--platform-token-file"},
		"runtime --help":             {"designate-config", "git-source", "cluster", "one runtime per cluster"},
		"runtime cluster --help":     {"least-privilege", "--platform-context"},
		"runtime cluster add --help": {"--platform-context", "exit code 3"},
	} {
		code, stdout, _ := cli(t, dir, strings.Fields(args)...)
		for _, want := range wants {
			if code != 0 || !strings.Contains(stdout, want) {
				t.Errorf("%s lacks %q", args, want)
			}
		}
	}
}

// Through the CLI against a real cluster, Git server and chart mirror: a
// refused token exits 2 naming the refusal, an unreachable runtime cluster
// exits 3, then install, list -o json and uninstall; the token never
// reaches stdout or stderr.
func TestRuntimeCommandsAgainstACluster(t *testing.T) {
	c := testcluster.Start(t)
	const token = "cli-token-5f3a9c"
	git := testservers.StartGit(t, token)
	repoURL := git.NewRepo(t, "config")
	mirror := gitopstest.ServeOCI(t, "0.26.0")
	dir := t.TempDir()
	cfg := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n" +
		"  modules:\n    pipelines: {enabled: false}\n  runtimeConfig:\n    repository: {url: " + repoURL + "}\n    accountId: acc-1\n"
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli(t, dir, "install", "--kubeconfig", c.Kubeconfig, "--timeout", "2m"); code != 0 {
		t.Fatalf("install: %d %s", code, stderr)
	}
	good := filepath.Join(dir, "token")
	bad := filepath.Join(dir, "wrong")
	os.WriteFile(good, []byte(token+"\n"), 0o600)
	os.WriteFile(bad, []byte("not-the-token\n"), 0o600)
	const platformToken = "platform-token-8d2e41"
	ptoken := filepath.Join(dir, "platform-token")
	os.WriteFile(ptoken, []byte(platformToken+"\n"), 0o600)
	t.Setenv("ONPREM_PLATFORM_TOKEN", "")
	noPlatformToken := []string{"runtime", "install", "--kubeconfig", c.Kubeconfig, "--chart-repository", mirror, "--chart-plain-http"}
	base := append(append([]string{}, noPlatformToken...), "--platform-token-file", ptoken)
	all := ""
	run := func(args ...string) (int, string, string) {
		code, stdout, stderr := cli(t, dir, args...)
		all += stdout + stderr
		return code, stdout, stderr
	}

	code, stdout, stderr := run(append(base, "--git-token-file", bad)...)
	if code != exitInput || stdout != "" || !strings.Contains(stderr, "refused authentication") {
		t.Errorf("wrong token: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	// Without the platform token: exit 2 naming where it is given, and
	// nothing created.
	code, stdout, stderr = run(append(noPlatformToken, "--git-token-file", good)...)
	if code != exitInput || stdout != "" || !strings.Contains(stderr, "a platform token is required") || !strings.Contains(stderr, "--platform-token-file FILE") {
		t.Errorf("no platform token: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(context.Background(), "codefresh", metav1.GetOptions{}); err == nil {
		t.Error("the runtime's namespace was created without a platform token")
	}
	kc := goneKubeconfig(t, dir)
	if code, _, stderr := run(append(base, "--git-token-file", good, "--runtime-kubeconfig", kc)...); code != exitCluster || !strings.Contains(stderr, kc) {
		t.Errorf("unreachable runtime cluster: exit %d, stderr %s", code, stderr)
	}
	code, stdout, stderr = run(append(base, "--git-token-file", good)...)
	if code != 0 || !strings.Contains(stdout, "codefresh") || !strings.Contains(stdout, "installed") || !strings.Contains(stdout, "configuration repository updated") {
		t.Fatalf("install: exit %d, stdout %s, stderr %s", code, stdout, stderr)
	}
	code, stdout, _ = run("runtime", "list", "--kubeconfig", c.Kubeconfig, "-o", "json")
	var list struct {
		ConfigRuntime string
		Runtimes      []struct {
			Name   string
			Config bool
			Ready  bool
		}
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &list) != nil || list.ConfigRuntime != "codefresh" || len(list.Runtimes) != 1 || !list.Runtimes[0].Config || !list.Runtimes[0].Ready {
		t.Errorf("list -o json: %d %s", code, stdout)
	}
	if code, stdout, stderr := run("runtime", "uninstall", "codefresh", "--kubeconfig", c.Kubeconfig); code != 0 || !strings.Contains(stdout, "removed: Helm release codefresh/runtime-codefresh") {
		t.Errorf("uninstall: %d %s %s", code, stdout, stderr)
	}
	if strings.Contains(all, token) {
		t.Error("the Git token was printed")
	}
	if strings.Contains(all, platformToken) {
		t.Error("the platform token was printed")
	}
}
