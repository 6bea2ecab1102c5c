package config

import (
	"context"
	"strings"
	"testing"
)

// A namespace of Kubernetes itself is refused wherever it comes from (the
// file, ONPREM_NAMESPACE, --namespace), for the platform, a runner and a
// runtime: onprem would label it restricted and put a default-deny
// NetworkPolicy in it (issue 33, item 2).
func TestSystemNamespacesAreRefused(t *testing.T) {
	const file = "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: \"2.8.0\"\n  domain: ci.example.com\n"
	for _, ns := range []string{"kube-system", "default", "kube-public", "kube-node-lease", "kube-flannel"} {
		for _, c := range []struct {
			name, content string
			env           map[string]string
			flag          *string
			path, where   string
		}{
			{"file", file + "  namespace: " + ns + "\n", nil, nil, "spec.namespace", "onprem.yaml:6: "},
			{"environment", file, map[string]string{"ONPREM_NAMESPACE": ns}, nil, "spec.namespace", "set by environment variable ONPREM_NAMESPACE"},
			{"flag", file, nil, &ns, "spec.namespace", "set by a command-line flag"},
			{"runner", file + "  runners:\n    - {name: a, namespace: " + ns + "}\n", nil, nil, "spec.runners[0].namespace", "onprem.yaml:7: "},
			{"runtime", file + "  runtimes:\n    - {namespace: " + ns + "}\n", nil, nil, "spec.runtimes[0].namespace", "onprem.yaml:7: "},
		} {
			t.Run(ns+"/"+c.name, func(t *testing.T) {
				dir := t.TempDir()
				path := writeFile(t, dir, "onprem.yaml", c.content)
				_, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(c.env),
					Overrides: Overrides{Namespace: c.flag}, Validate: testValidateOptions})
				if err == nil {
					t.Fatal("accepted")
				}
				var line string
				for l := range strings.SplitSeq(err.Error(), "\n") {
					if strings.Contains(l, c.path+": ") {
						line = l
					}
				}
				for _, want := range []string{c.where, c.path + `: "` + ns + `" is a namespace of Kubernetes itself`, "restricted Pod Security Standard", "a namespace of its own"} {
					if !strings.Contains(line, want) {
						t.Errorf("the error lacks %q:\n%v", want, err)
					}
				}
			})
		}
	}
	for _, ok := range []string{"onprem", "ci", "kubernetes-ci", "system"} {
		if msg := checkNamespace(ok, "the platform", "onprem"); msg != "" {
			t.Errorf("%s refused: %s", ok, msg)
		}
	}
}
