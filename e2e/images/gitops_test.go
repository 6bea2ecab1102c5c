//go:build linux

package images

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The GitOps runtime's stand-in answers the commands the real chart's
// containers run instead of the image's entrypoint, as the chart's users
// (any non-root user: most of its pods set runAsNonRoot and no user), and
// has what the hooks' shell scripts call.
func TestGitopsRuntimeImageRunsTheChartsCommands(t *testing.T) {
	img := build(t, GitopsRuntime)
	checkUser(t, img, "999:999")
	root := unpack(t, img)
	cf, err := img.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.WorkingDir != "/app" {
		t.Errorf("working folder %q, want /app (app-proxy's init container runs ./init.sh)", cf.Config.WorkingDir)
	}
	values := "global:\n  codefresh: {url: https://ci.example.com}\n  runtime: {name: codefresh}\n"
	if err := os.WriteFile(filepath.Join(root, "tmp", "values.yaml"), []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(root, "tmp", "values.yaml"))
	defer os.Remove(filepath.Join(root, "tmp", "argocd-dex"))
	run := func(user, script string) (string, error) {
		cmd := exec.Command("chroot", "--userspec="+user, root, "/bin/sh", "-c", "cd /app && "+script)
		cmd.Env = append(cf.Config.Env, "KUBERNETES_SERVICE_HOST=")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct{ script, want string }{
		// The hooks' tools.
		{"kubectl version --client", "Client Version"},
		{"curl --version", "curl"},
		{`echo '{"Version":"v2.12.0"}' | jq -r .Version`, "v2.12.0"},
		// (The chroot has no /dev: the hooks' /dev/urandom is a pod's.)
		{"printf 'a-b_c9!' | tr -dc A-Za-z0-9 | head -c 3 && echo ' shell-ok'", "abc shell-ok"},
		// validate-values and validate-usage.
		{"cf helm validate --values /tmp/values.yaml --namespace codefresh --hook", "values valid"},
		{"cf account validate-usage --fail-condition=reached --subject=clusters --values /tmp/values.yaml", "values valid"},
		// app-proxy's init container.
		{"./init.sh", "nothing to prepare"},
		// The dex and repo-server init containers copy argocd; the copy
		// is the stand-in.
		{"/bin/cp -n /usr/local/bin/argocd /tmp/argocd-dex && /tmp/argocd-dex --requirepass '$(REDIS_PASSWORD)'; true", "argocd-redis"},
	} {
		out, err := run("999:999", tc.script)
		if err != nil || !strings.Contains(out, tc.want) {
			t.Errorf("%s: %v\n%s\n(want %q)", tc.script, err, out, tc.want)
		}
	}
	// The redis-initial-password hook outside a pod says why it cannot
	// work, and fails.
	if out, err := run("1001:1001", "argocd admin redis-initial-password"); err == nil || !strings.Contains(out, "not in a pod") {
		t.Errorf("argocd admin redis-initial-password outside a pod: %v\n%s", err, out)
	}
	for _, link := range []string{"/manager", "/usr/local/bin/controller", "/usr/local/bin/workflow-controller"} {
		if target, err := os.Readlink(filepath.Join(root, link)); err != nil || target != entrypointPath {
			t.Errorf("%s: %s, %v (want the stand-in)", link, target, err)
		}
	}
}
