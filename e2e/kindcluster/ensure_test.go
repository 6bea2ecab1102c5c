//go:build linux

package kindcluster

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func skipUnlessKind(tb testing.TB) {
	tb.Helper()
	if os.Getenv(SkipEnv) == "1" {
		tb.Skipf("%s=1: kind tests are skipped", SkipEnv)
	}
}

// TestEnsure prepares the toolchain (cold: builds everything; warm:
// checks stamps) and checks what it returns: a kind CLI of KindVersion,
// kubectl of KubeVersion and a node image in docker that carries the
// control-plane images.
func TestEnsure(t *testing.T) {
	skipUnlessKind(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	t0 := time.Now()
	tc, err := Ensure(ctx, Options{Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Ensure took %s", time.Since(t0).Round(time.Millisecond))

	out, err := exec.CommandContext(ctx, tc.Kind, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), KindVersion) {
		t.Fatalf("kind version: %v: %s", err, out)
	}
	out, err = exec.CommandContext(ctx, tc.Kubectl, "version", "--client").CombinedOutput()
	if err != nil || !strings.Contains(string(out), KubeVersion) {
		t.Fatalf("kubectl version: %v: %s", err, out)
	}
	out, err = exec.CommandContext(ctx, tc.Docker, "image", "inspect", "--format", "{{.Config.StopSignal}} {{json .Config.Entrypoint}}", tc.NodeImage).CombinedOutput()
	if err != nil {
		t.Fatalf("docker image inspect %s: %v: %s", tc.NodeImage, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != `SIGRTMIN+3 ["/usr/local/bin/entrypoint","/sbin/init"]` {
		t.Errorf("node image config = %s", got)
	}

	// A second process's plan finds everything current: no step to run,
	// no lock taken.
	p, err := NewPlan(ctx, Options{Log: t.Logf, CacheDir: tc.Dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if steps := p.Steps(); len(steps) != 0 || p.unlock != nil {
		t.Errorf("a warm plan has %d steps (lock held: %v), want none", len(steps), p.unlock != nil)
	}
}
