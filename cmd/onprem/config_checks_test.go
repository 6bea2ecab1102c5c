package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// 'config validate' finds, before anything happens, what only a render
// used to find, each problem with its file:line: component values against
// their chart's schema, every problem of the overlays' patches, a system
// namespace, a bad environment boolean next to the file's problems
// (issue 33, items 2, 4, 5, 7).
func TestConfigValidateFindsEveryMistake(t *testing.T) {
	const head = "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n"
	dir := t.TempDir()
	ov := filepath.Join(dir, "ov")
	if err := os.MkdirAll(ov, 0o755); err != nil {
		t.Fatal(err)
	}
	kust := "kind: Component\npatches:\n" +
		"  - target: {kind: Deployment, labelSelector: app=nothing}\n    patch: |\n      - op: add\n        path: /metadata/labels/x\n        value: y\n" +
		"  - target: {kind: Deployment, name: gitops-api}\n    patch: |\n      - op: add\n        path: /spec/template/spec/nothing/here\n        value: 1\n"
	if err := os.WriteFile(filepath.Join(ov, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, body string
		env        map[string]string
		want       []string
	}{
		{"component values", "  components:\n    pipelines-api:\n      values:\n        replicas: \"three\"\n        replicsa: 3\n",
			nil, []string{"2 problems", `onprem.yaml:9: spec.components.pipelines-api.values.replicas: expected a whole number, got the string "three"`,
				`onprem.yaml:10: spec.components.pipelines-api.values.replicsa: unknown value: the chart has no such key; did you mean "replicas"?`}},
		{"overlay patches", "  overlays: [ov]\n",
			nil, []string{"2 problems", "onprem.yaml:6: spec.overlays[0]: (" + filepath.Join("ov", "kustomization.yaml") + ") patches[0] on Deployment, labelSelector \"app=nothing\": matches no object",
				"onprem.yaml:6: spec.overlays[0]: (" + filepath.Join("ov", "kustomization.yaml") + ") patches[1] on Deployment/gitops-api", "add the parent"}},
		{"system namespace", "  namespace: kube-system\n", nil, []string{`onprem.yaml:6: spec.namespace: "kube-system" is a namespace of Kubernetes itself`}},
		{"namespace from the environment", "", map[string]string{"ONPREM_NAMESPACE": "default"}, []string{`spec.namespace: "default" is a namespace of Kubernetes itself`, "set by environment variable ONPREM_NAMESPACE"}},
		// Issue 35, item 3: rules that only the render of a runner or a
		// runtime applied.
		{"release name and engine namespace", "  runners:\n    - name: gpu\n      namespace: " + strings.Repeat("n", 57) + "\n" +
			"  runtimes:\n    - name: " + strings.Repeat("a", 46) + "\n      gitToken: {env: GIT_TOKEN}\n" +
			"  runtimeConfig:\n    accountId: acc\n    platformToken: {env: PLATFORM_TOKEN}\n    repository: {url: https://git.example.com/c.git}\n",
			nil, []string{"2 problems",
				`onprem.yaml:8: spec.runners[0].namespace: "` + strings.Repeat("n", 57) + `" is 57 characters long: a runner's namespace must be at most 56, so that its build engine's namespace (` + strings.Repeat("n", 57) + `-engine) is a DNS label too; give the runner a shorter namespace`,
				`onprem.yaml:10: spec.runtimes[0].name: "` + strings.Repeat("a", 46) + `" is 46 characters long: a runtime name must be at most 45, so that its Helm release (runtime-` + strings.Repeat("a", 46) + `) is within Helm's limit of 53 characters; give the runtime a shorter name`}},
		{"a bad boolean and the file's problems", "  profile: xl\n", map[string]string{"ONPREM_LEGACY_NATS_ENABLED": "maybe"},
			[]string{"2 problems", `ONPREM_LEGACY_NATS_ENABLED="maybe" is not a boolean (valid: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)`, `onprem.yaml:6: spec.profile: "xl" is not valid`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(head+c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			code, stdout, stderr := cli(t, dir, "config", "validate")
			if code != exitInput || stdout != "" {
				t.Errorf("exit %d, stdout %q", code, stdout)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}
