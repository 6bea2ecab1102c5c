package render

import (
	"context"
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/config"
)

func renderFixtureRuntime(t testing.TB, cfg string, rt config.Runtime) (*config.Installation, *Component) {
	t.Helper()
	in, rel := load(t, cfg)
	ch, err := charts.LoadFrom(os.DirFS("../runtime/testdata"), "gitops-runtime")
	if err != nil {
		t.Fatal(err)
	}
	ch.Metadata.Version = rel.Runtime.ChartVersion
	in.Spec.RuntimeConfig.Repository = config.GitRepository{URL: "https://git.example.com/platform/gitops.git", Branch: "main", Path: "runtimes"}
	c, err := RenderRuntime(context.Background(), RuntimeOptions{Installation: in, Release: rel, Runtime: rt, Chart: ch})
	if err != nil {
		t.Fatalf("render runtime for %s: %v", cfg, err)
	}
	return in, c
}

// A runtime follows the platform's rules (restricted pods, probes,
// resources, relocation with a private registry) and gets the release's
// image references at their values paths and its runtime block.
func TestRuntimePassesTheChecks(t *testing.T) {
	for _, cfg := range configs {
		t.Run(cfg, func(t *testing.T) {
			in, c := renderFixtureRuntime(t, cfg, config.Runtime{Name: "edge"})
			opts := CheckOptions{}
			if in.Spec.Registry.Host != "" {
				opts.RegistryPrefix = in.Spec.Registry.Host + "/" + in.Spec.Registry.PathPrefix
			}
			for _, p := range Check(&Result{Components: []*Component{c}}, opts) {
				t.Error(p)
			}
			if c.Name != "runtime-edge" || c.Group != RuntimeGroup || c.Chart != "gitops-runtime" {
				t.Errorf("component = %s group %s chart %s", c.Name, c.Group, c.Chart)
			}
			for _, o := range c.Objects {
				switch {
				case o.GetKind() == "CustomResourceDefinition":
					if o.GetNamespace() != "" {
						t.Errorf("CRD %s has namespace %q", o.GetName(), o.GetNamespace())
					}
				case o.GetNamespace() != "edge":
					t.Errorf("%s/%s in namespace %q, want edge (the runtime's name)", o.GetKind(), o.GetName(), o.GetNamespace())
				}
				if o.GetLabels()[ComponentLabel] != "runtime-edge" {
					t.Errorf("%s/%s: label %s = %q", o.GetKind(), o.GetName(), ComponentLabel, o.GetLabels()[ComponentLabel])
				}
			}
		})
	}
}

func TestRuntimeValues(t *testing.T) {
	_, rel := load(t, "minimal")
	_, c := renderFixtureRuntime(t, "minimal", config.Runtime{})
	if c.Name != "runtime-codefresh" {
		t.Fatalf("default runtime name: component %s", c.Name)
	}
	argocd, _ := rel.Image("argocd")
	var server *appsv1.Deployment
	for _, o := range c.Objects {
		if o.GetKind() == "Deployment" && o.GetName() == "server" {
			server = typed[appsv1.Deployment](t, o)
		}
		if o.GetNamespace() != "" && o.GetNamespace() != "codefresh" {
			t.Errorf("%s/%s: namespace %s", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	if server == nil {
		t.Fatal("no server Deployment")
	}
	ctr := server.Spec.Template.Spec.Containers[0]
	if !strings.HasPrefix(ctr.Image, argocd.Repository+":"+argocd.Tag) {
		t.Errorf("server image %s, want the release's %s:%s", ctr.Image, argocd.Repository, argocd.Tag)
	}
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	if env["CONFIG_REPOSITORY"] != "https://git.example.com/platform/gitops.git" || env["GIT_CREDENTIALS_SECRET"] != RuntimeGitCredentials || env["RUNTIME_NAME"] != "codefresh" {
		t.Errorf("runtime block not passed: %v", env)
	}
	if b, _ := yaml.Marshal(c.Values["runtime"]); !strings.Contains(string(b), "path: runtimes") {
		t.Errorf("runtime values: %s", b)
	}
}

func TestRuntimeRefusals(t *testing.T) {
	in, rel := load(t, "minimal")
	ch, err := charts.LoadFrom(os.DirFS("../runtime/testdata"), "gitops-runtime")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		rt   config.Runtime
		ver  string
		want string
	}{
		{"bad name", config.Runtime{Name: "Edge_1"}, rel.Runtime.ChartVersion, `runtime name "Edge_1"`},
		{"long name", config.Runtime{Name: strings.Repeat("a", 46)}, rel.Runtime.ChartVersion, "at most 45"},
		{"bad namespace", config.Runtime{Name: "a", Namespace: "NS"}, rel.Runtime.ChartVersion, `namespace "NS"`},
		{"other chart version", config.Runtime{Name: "a"}, "9.9.9", "needs chart gitops-runtime " + rel.Runtime.ChartVersion + ", but was given gitops-runtime 9.9.9"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch.Metadata.Version = tc.ver
			_, err := RenderRuntime(context.Background(), RuntimeOptions{Installation: in, Release: rel, Runtime: tc.rt, Chart: ch})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	noRuntime := *rel
	noRuntime.Runtime = nil
	if _, err := RenderRuntime(context.Background(), RuntimeOptions{Installation: in, Release: &noRuntime, Runtime: config.Runtime{}, Chart: ch}); err == nil || !strings.Contains(err.Error(), "has no GitOps runtime") {
		t.Errorf("release without runtime: %v", err)
	}
}

func TestSetPath(t *testing.T) {
	v := map[string]any{"a": map[string]any{"keep": 1}, "s": "x"}
	if err := setPath(v, "a.b.c", "ref"); err != nil {
		t.Fatal(err)
	}
	if got := v["a"].(map[string]any)["b"].(map[string]any)["c"]; got != "ref" || v["a"].(map[string]any)["keep"] != 1 {
		t.Errorf("values = %v", v)
	}
	if err := setPath(v, "s.x", "ref"); err == nil || !strings.Contains(err.Error(), "s is a string") {
		t.Errorf("through a string: %v", err)
	}
	if err := setPath(v, "a..b", "ref"); err == nil {
		t.Error("empty key accepted")
	}
}
