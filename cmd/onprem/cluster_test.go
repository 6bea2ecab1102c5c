package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"onprem.dev/onprem/e2e/testcluster"
)

func TestInstallStatusAgainstACluster(t *testing.T) {
	c := testcluster.Start(t)
	dir := t.TempDir()
	cfg := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n  modules:\n    pipelines: {enabled: false}\n"
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := cli(t, dir, "install", "--kubeconfig", c.Kubeconfig, "-o", "json", "--timeout", "2m")
	if code != 0 {
		t.Fatalf("install: %d\n%s", code, stderr)
	}
	var res struct {
		Version    string
		Components []struct{ Name, Action string }
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Version != "2.8.0" || len(res.Components) == 0 {
		t.Fatalf("stdout is not the JSON result (%v): %s", err, stdout)
	}
	// Progress went to stderr, one line per change (not a terminal).
	if !strings.Contains(stderr, "gitops-api") || !strings.Contains(stderr, "ready, revision 1") {
		t.Errorf("progress on stderr:\n%s", stderr)
	}
	code, stdout, _ = cli(t, dir, "status", "--kubeconfig", c.Kubeconfig)
	if code != 0 || !strings.Contains(stdout, "platform 2.8.0 in namespace onprem") || !strings.Contains(stdout, "deployed") {
		t.Errorf("status: %d\n%s", code, stdout)
	}
	// The self-signed CA and certificate onprem generated, with their
	// expiry, far away.
	if !strings.Contains(stdout, "certificates:\n  CA ") || !strings.Contains(stdout, "(Secret onprem-tls, tls.crt): expires ") || strings.Contains(stdout, "WARNING") {
		t.Errorf("status certificates:\n%s", stdout)
	}
	code, stdout, _ = cli(t, dir, "diff", "--kubeconfig", c.Kubeconfig)
	if code != 0 || !strings.Contains(stdout, "no differences") {
		t.Errorf("diff: %d\n%s", code, stdout)
	}
	code, _, stderr = cli(t, dir, "uninstall", "--kubeconfig", c.Kubeconfig, "--purge")
	if code != exitInput || !strings.Contains(stderr, "--yes") {
		t.Errorf("purge without --yes off a terminal: %d %s", code, stderr)
	}
}

func TestUnreachableClusterExitsThree(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	os.WriteFile(kc, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: staging, context: {cluster: c, user: u}}]\ncurrent-context: staging\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n"), 0o644)
	for _, args := range [][]string{{"install"}, {"status"}, {"diff"}, {"uninstall"}, {"upgrade", "plan"}, {"upgrade", "apply"}, {"rollback"}, {"adopt"}} {
		code, stdout, stderr := cli(t, dir, append(args, "--kubeconfig", kc)...)
		if code != exitCluster || stdout != "" || !strings.Contains(stderr, "staging") || !strings.Contains(stderr, kc) {
			t.Errorf("%v: exit %d, stdout %q, stderr %s", args, code, stdout, stderr)
		}
	}
}

func TestPreflightCommand(t *testing.T) {
	dir := t.TempDir()
	code, stdout, _ := cli(t, dir, "preflight", "--list")
	for _, id := range []string{"kubernetes.version", "permissions", "capacity", "registry", "database.postgresql", "clock.skew"} {
		if code != 0 || !strings.Contains(stdout, id) {
			t.Errorf("--list lacks %s (exit %d)", id, code)
		}
	}
	c := testcluster.Start(t)
	cfg := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n"
	os.WriteFile(filepath.Join(dir, "ok.yaml"), []byte(cfg), 0o644)
	os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(cfg+"  ingress: {mode: existing, className: nope}\n"), 0o644)
	code, stdout, _ = cli(t, dir, "preflight", "-c", "ok.yaml", "--kubeconfig", c.Kubeconfig)
	if code != 0 || !strings.Contains(stdout, "PASS") {
		t.Errorf("passing preflight: exit %d\n%s", code, stdout)
	}
	code, stdout, stderr := cli(t, dir, "preflight", "-c", "bad.yaml", "--kubeconfig", c.Kubeconfig)
	if code != exitFailure || !strings.Contains(stdout, "FAIL") || !strings.Contains(stdout, "fix:") || !strings.Contains(stderr, "ingress") {
		t.Errorf("failing preflight: exit %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, dir, "preflight", "-c", "bad.yaml", "--kubeconfig", c.Kubeconfig, "-o", "json", "--skip-check", "ingress")
	var rep struct {
		Checks  []struct{ ID, Result string }
		Skipped []string
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || len(rep.Skipped) != 1 || len(rep.Checks) < 10 {
		t.Errorf("-o json --skip-check: exit %d\n%s", code, stdout)
	}
}

func TestUpgradeCommands(t *testing.T) {
	c := testcluster.Start(t)
	dir := t.TempDir()
	write := func(version string) {
		cfg := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: " + version + "\n  domain: ci.example.com\n"
		if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kc := []string{"--kubeconfig", c.Kubeconfig}
	write("2.6.3")
	code, _, stderr := cli(t, dir, append([]string{"upgrade", "apply"}, kc...)...)
	if code != exitInput || !strings.Contains(stderr, "onprem install") || !strings.Contains(stderr, "onprem adopt") {
		t.Errorf("upgrade before install: %d %s", code, stderr)
	}
	if code, _, stderr := cli(t, dir, append([]string{"install", "--timeout", "2m"}, kc...)...); code != 0 {
		t.Fatalf("install: %d %s", code, stderr)
	}
	write("2.8.0")
	code, _, stderr = cli(t, dir, append([]string{"install"}, kc...)...)
	if code != exitInput || !strings.Contains(stderr, "upgrade") {
		t.Errorf("install of another version: %d %s", code, stderr)
	}
	code, _, stderr = cli(t, dir, append([]string{"upgrade", "plan", "--to", "3.0.0"}, kc...)...)
	if code != exitInput || !strings.Contains(stderr, "versions reachable from 2.6.3: 2.7.0, 2.7.1, 2.8.0") {
		t.Errorf("--to 3.0.0: %d %s", code, stderr)
	}
	code, stdout, stderr := cli(t, dir, append([]string{"upgrade", "plan"}, kc...)...)
	if code != 0 {
		t.Fatalf("plan: %d %s", code, stderr)
	}
	for _, want := range []string{"upgrade path for namespace onprem: 2.6.3 → 2.7.0 → 2.8.0", "(required stop)", "gitops-manager", "removed",
		"migration pipelines-build-index-v2 (pipelines-api, timeout 15m0s): backs up mongodb/pipelines-api first", "objects differ (--diff to show them)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("plan lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, _ = cli(t, dir, append([]string{"upgrade", "plan", "-o", "json"}, kc...)...)
	var plan struct {
		From, To string
		Steps    []struct {
			To         string
			Components []struct{ Name, Change string }
		}
	}
	if err := json.Unmarshal([]byte(stdout), &plan); code != 0 || err != nil || plan.From != "2.6.3" || plan.To != "2.8.0" || len(plan.Steps) != 2 {
		t.Errorf("plan -o json: %d %v %s", code, err, stdout)
	}
	code, stdout, stderr = cli(t, dir, append([]string{"upgrade", "apply", "--to", "2.7.0", "--timeout", "2m"}, kc...)...)
	if code != 0 || !strings.Contains(stdout, "step 2.6.3 → 2.7.0: succeeded") || !strings.Contains(stdout, "is at 2.7.0") {
		t.Fatalf("apply: %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "step 1/1: 2.6.3 → 2.7.0") || !strings.Contains(stderr, "running migration pipelines-build-index-v2") {
		t.Errorf("progress on stderr:\n%s", stderr)
	}
	code, stdout, stderr = cli(t, dir, append([]string{"rollback"}, kc...)...)
	if code != 0 || !strings.Contains(stdout, "rolled back 2.7.0 → 2.6.3") || !strings.Contains(stdout, "pipelines-api-mongodb.archive.gz") {
		t.Errorf("rollback: %d\n%s\n%s", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, dir, append([]string{"status"}, kc...)...)
	if code != 0 || !strings.Contains(stdout, "platform 2.6.3") {
		t.Errorf("status after rollback: %d\n%s", code, stdout)
	}
}
