//go:build linux

package images

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The locked wrapper module is the one traefikGoMod asks for, and holds
// every module Traefik's command compiles: the build needs no resolution
// (go list -mod=readonly fails on anything go.mod or go.sum lacks). With
// ONPREM_UPDATE_TRAEFIK_LOCK=1 it makes the lock again with go mod tidy
// (after TraefikVersion or the template changed) and writes it into
// traefiklock/.
func TestTraefikLock(t *testing.T) {
	ctx := context.Background()
	if os.Getenv("ONPREM_UPDATE_TRAEFIK_LOCK") == "1" {
		dir := t.TempDir()
		for name, body := range map[string]string{"go.mod": traefikGoMod(), "tools.go": traefikTools} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.CommandContext(ctx, "go", "mod", "tidy")
		cmd.Dir, cmd.Env = dir, append(os.Environ(), goEnv...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go mod tidy: %v\n%s", err, out)
		}
		for _, name := range []string{"go.mod", "go.sum"} {
			body, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join("traefiklock", name+".txt"), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		t.Log("traefiklock/ written again: run the test without ONPREM_UPDATE_TRAEFIK_LOCK, then commit it")
		return
	}
	// Every line of the template but its go directive (tidy raises it)
	// is in the lock: the version, upstream's replaces and exclude.
	for _, line := range strings.Split(traefikGoMod(), "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "go ") || line == "(" || line == ")" {
			continue
		}
		if !strings.Contains(traefikLockGoMod, line) {
			t.Errorf("traefiklock/go.mod.txt lacks %q of the template: run this test with ONPREM_UPDATE_TRAEFIK_LOCK=1", line)
		}
	}
	if !strings.Contains(traefikLockGoSum, traefikModule+" "+TraefikVersion+" h1:") {
		t.Errorf("traefiklock/go.sum.txt has no hash of %s %s", traefikModule, TraefikVersion)
	}

	src := filepath.Join(t.TempDir(), "traefik")
	if err := writeTraefikModule(src); err != nil {
		t.Fatal(err)
	}
	flags, err := goFlagsWithoutMod(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, "go", "list", "-deps", "-f", "{{.ImportPath}}", traefikModule+"/cmd/traefik")
	cmd.Dir = src
	cmd.Env = append(append(os.Environ(), goEnv...), strings.TrimSpace("GOFLAGS="+flags+" -mod=readonly"))
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("the locked module does not build Traefik's command as it is (run this test with ONPREM_UPDATE_TRAEFIK_LOCK=1): %v\n%s", err, ee.Stderr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), traefikModule+"/cmd/traefik\n") || strings.Count(string(out), "\n") < 500 {
		t.Fatalf("go list -deps of Traefik's command: %d packages", strings.Count(string(out), "\n"))
	}
	for name, want := range map[string]string{"go.mod": traefikLockGoMod, "go.sum": traefikLockGoSum} {
		if got, _ := os.ReadFile(filepath.Join(src, name)); string(got) != want {
			t.Errorf("go list changed the locked %s", name)
		}
	}
}

// Only what the go command says about go.mod and go.sum sends the build
// back to go mod tidy; a compiler failure is the build's.
func TestLockIncomplete(t *testing.T) {
	for msg, want := range map[string]bool{
		"traefik: go build failed: exit status 1\nmissing go.sum entry for module providing package x": true,
		"go: updates to go.mod needed; to update it:\n\tgo mod tidy":                                   true,
		"no required module provides package github.com/x/y; to add it":                                true,
		"signal: killed (out of memory)":                                                               false,
		"./main.go:3: undefined: x":                                                                    false,
	} {
		if got := lockIncomplete(errors.New(msg)); got != want {
			t.Errorf("lockIncomplete(%q) = %v, want %v", msg, got, want)
		}
	}
}
