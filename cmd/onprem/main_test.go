package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cli runs the command line in dir and returns exit code, stdout, stderr.
func cli(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	t.Chdir(dir)
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestConfigInitValidateRender(t *testing.T) {
	dir := t.TempDir()
	code, _, stderr := cli(t, dir, "config", "init")
	if code != 0 || !strings.Contains(stderr, "wrote onprem.yaml") {
		t.Fatalf("init: %d %s", code, stderr)
	}
	code, _, stderr = cli(t, dir, "config", "init")
	if code != exitInput || !strings.Contains(stderr, "--force") {
		t.Errorf("second init: %d %s", code, stderr)
	}
	code, stdout, stderr := cli(t, dir, "config", "validate")
	if code != 0 || !strings.Contains(stdout, "onprem.yaml is valid") {
		t.Errorf("validate: %d %s %s", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, dir, "config", "validate", "-o", "json", "--profile", "large")
	var eff struct {
		Spec struct{ Profile, Namespace string }
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &eff) != nil || eff.Spec.Profile != "large" || eff.Spec.Namespace != "onprem" {
		t.Errorf("validate -o json with --profile: %d %+v", code, eff)
	}
	code, stdout, stderr = cli(t, dir, "render", "--component", "pipelines-api")
	if code != 0 || !strings.Contains(stdout, "kind: Deployment") || !strings.Contains(stdout, "# component pipelines-api") {
		t.Errorf("render: %d %s", code, stderr)
	}
	if strings.Contains(stdout, "# component mongodb") {
		t.Error("--component did not limit the output")
	}
	code, stdout, _ = cli(t, dir, "render", "-o", "json")
	var res struct {
		Components []struct {
			Name    string
			Objects []map[string]any
		}
		GeneratedSecrets []struct{ Name string }
	}
	if code != 0 || json.Unmarshal([]byte(stdout), &res) != nil || len(res.Components) < 10 || len(res.GeneratedSecrets) == 0 {
		t.Errorf("render -o json: %d, %d components", code, len(res.Components))
	}
}

func TestBadConfigExitsTwoAndListsEveryProblem(t *testing.T) {
	dir := t.TempDir()
	bad := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n  profle: small\n  tls: {mode: bogus}\n"
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := cli(t, dir, "render")
	if code != exitInput {
		t.Errorf("exit = %d, want 2", code)
	}
	if stdout != "" {
		t.Errorf("wrote to stdout on error: %q", stdout)
	}
	for _, want := range []string{"onprem.yaml:6", `did you mean "profile"`} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
}

func TestEnvironmentOverridesFileAndFlagsOverrideEnvironment(t *testing.T) {
	dir := t.TempDir()
	if code, _, e := cli(t, dir, "config", "init"); code != 0 {
		t.Fatal(e)
	}
	t.Setenv("ONPREM_PROFILE", "medium")
	_, stdout, _ := cli(t, dir, "config", "validate")
	if !strings.Contains(stdout, "profile medium") {
		t.Errorf("env did not override the file: %s", stdout)
	}
	_, stdout, _ = cli(t, dir, "config", "validate", "--profile", "large")
	if !strings.Contains(stdout, "profile large") {
		t.Errorf("flag did not override env: %s", stdout)
	}
}

func TestUnknownVersionListsVersions(t *testing.T) {
	dir := t.TempDir()
	cli(t, dir, "config", "init")
	code, _, stderr := cli(t, dir, "render", "--platform-version", "9.0.0")
	if code != exitInput || !strings.Contains(stderr, "2.6.3") || !strings.Contains(stderr, "2.8.0") {
		t.Errorf("%d %s", code, stderr)
	}
}

func TestVersionsJSONAndSchema(t *testing.T) {
	dir := t.TempDir()
	code, stdout, _ := cli(t, dir, "versions", "-o", "json")
	var vs []struct{ Version string }
	if code != 0 || json.Unmarshal([]byte(stdout), &vs) != nil || len(vs) < 3 {
		t.Errorf("versions: %d %s", code, stdout)
	}
	code, stdout, _ = cli(t, dir, "config", "schema")
	var schema map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &schema) != nil || schema["properties"] == nil {
		t.Errorf("schema: %d", code)
	}
	code, _, stderr := cli(t, dir, "versions", "-o", "xml")
	if code != exitInput || !strings.Contains(stderr, "table, json, yaml") {
		t.Errorf("bad -o: %d %s", code, stderr)
	}
}

func TestHelpTeaches(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"render", "--help"}, {"config", "validate", "--help"}, {"upgrade", "apply", "--help"}, {"rollback", "--help"}, {"adopt", "--help"}} {
		code, stdout, _ := cli(t, t.TempDir(), args...)
		if code != 0 || !strings.Contains(stdout, "Usage:") {
			t.Errorf("%v: %d", args, code)
		}
	}
	_, stdout, _ := cli(t, t.TempDir(), "render", "--help")
	for _, want := range []string{"--set", "--component", "Example", "chart defaults < release"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("render --help lacks %q", want)
		}
	}
}

func TestUpgradeHelpExplainsRollback(t *testing.T) {
	_, stdout, _ := cli(t, t.TempDir(), "upgrade", "apply", "--help")
	for _, want := range []string{"--to", "rolled back", "Nothing is uninstalled", "onprem rollback", "Exit codes",
		"waiting cannot fix", "the rollback starts", "pulling image"} {
		if !strings.Contains(strings.Join(strings.Fields(stdout), " "), want) {
			t.Errorf("upgrade apply --help lacks %q", want)
		}
	}
	_, stdout, _ = cli(t, t.TempDir(), "install", "--help")
	for _, want := range []string{"waiting cannot fix ends the wait at once", "'onprem doctor'", "0/1 ready, pulling image"} {
		if !strings.Contains(strings.Join(strings.Fields(stdout), " "), want) {
			t.Errorf("install --help lacks %q", want)
		}
	}
}

func TestBadFlagExitsTwo(t *testing.T) {
	code, _, stderr := cli(t, t.TempDir(), "render", "--no-such-flag")
	if code != exitInput || !strings.Contains(stderr, "no-such-flag") {
		t.Errorf("%d %s", code, stderr)
	}
}
