package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A broken overlay is a configuration error (exit 2) that names the
// folder and the patch, for config validate and for render alike.
func TestOverlayErrorsExitTwo(t *testing.T) {
	dir := t.TempDir()
	ov := filepath.Join(dir, "metrics")
	if err := os.MkdirAll(ov, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ov, "kustomization.yaml"), []byte("kind: Component\npatches:\n  - target: {kind: Deployment, name: gitops-api}\n    patch: |\n      - op: add\n        path: /spec/template/spec/nothing/here\n        value: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n  overlays: [metrics, missing]\n"
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := cli(t, dir, "config", "validate", "-c", "onprem.yaml")
	if code != exitInput || !strings.Contains(stderr, "spec.overlays[1]") || !strings.Contains(stderr, "does not exist") {
		t.Errorf("config validate: %d %s", code, stderr)
	}
	cfg = strings.Replace(cfg, "[metrics, missing]", "[metrics]", 1)
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := cli(t, dir, "render", "-c", "onprem.yaml")
	for _, want := range []string{"spec.overlays[0]", filepath.Join("metrics", "kustomization.yaml"), "patches[0]", "Deployment/gitops-api", "add the parent"} {
		if code != exitInput || stdout != "" || !strings.Contains(stderr, want) {
			t.Errorf("render: exit %d, lacks %q: %s", code, want, stderr)
		}
	}
	if strings.Contains(stderr, "/user/") {
		t.Errorf("kustomize's in-memory path: %s", stderr)
	}
}
