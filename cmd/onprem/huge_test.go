package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// No message echoes a huge value whole, wherever it comes from: the
// file, a flag, an argument, the environment (issue 33, item 8).
func TestHugeValuesAreNotEchoedByTheCLI(t *testing.T) {
	dir := t.TempDir()
	const head = "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n"
	write := func(name, content string) string {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return name
	}
	write("onprem.yaml", head+"  domain: ci.example.com\n")
	arg := strings.Repeat("v", 128<<10) // the longest argument Linux passes
	for _, c := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"50 MB domain", []string{"config", "validate", "-c", write("domain-50m.yaml", head+"  domain: "+strings.Repeat("d", 50<<20)+"\n")}, nil, "larger than 4 MiB"},
		{"3 MB namespace", []string{"config", "validate", "-c", write("namespace-3m.yaml", head+"  domain: ci.example.com\n  namespace: "+strings.Repeat("n", 3<<20)+"\n")}, nil, "spec.namespace: \"nnnn"},
		{"3 MB profile", []string{"render", "-c", write("profile-3m.yaml", head+"  domain: ci.example.com\n  profile: "+strings.Repeat("p", 3<<20)+"\n")}, nil, "(3145728 bytes)"},
		{"--domain", []string{"config", "validate", "--domain", arg}, nil, "set by a command-line flag"},
		{"--log-level", []string{"versions", "--log-level", arg}, nil, "--log-level \"vvvv"},
		{"-o", []string{"versions", "-o", arg}, nil, "not a format here"},
		{"an unknown command", []string{arg}, nil, "unknown command \"vvvv"},
		{"an unknown subcommand", []string{"backup", arg}, nil, "unknown command \"vvvv"},
		{"a flag's bad number", []string{"support-bundle", "--concurrency", arg}, nil, "invalid argument \"vvvv"},
		{"the environment", []string{"config", "validate"}, map[string]string{"ONPREM_PROFILE": arg, "ONPREM_LEGACY_NATS_ENABLED": arg}, "ONPREM_LEGACY_NATS_ENABLED=\"vvvv"},
		{"--component", []string{"render", "--component", arg}, nil, "--component vvvv"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			code, stdout, stderr := cli(t, dir, c.args...)
			if code != exitInput {
				t.Errorf("exit %d, want 2: %.500s", code, stderr)
			}
			if len(stderr) > 4096 || len(stdout) > 0 {
				t.Errorf("%d bytes on stderr, %d on stdout: %.500s", len(stderr), len(stdout), stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("stderr lacks %q: %.1000s", c.want, stderr)
			}
		})
	}
}
