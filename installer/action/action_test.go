package action

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

var noEnv = envconfig.MapLookuper(map[string]string{})

func TestConfigInitWritesAValidStarterAndNeverOverwrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "onprem.yaml")
	if err := (&ConfigInit{Path: path, Version: "2.7.1"}).Run(); err != nil {
		t.Fatal(err)
	}
	l, err := (&ConfigValidate{Source{ConfigPath: path, Lookup: noEnv}}).Run(context.Background())
	if err != nil {
		t.Fatalf("starter does not validate: %v", err)
	}
	if l.Release.Version != "2.7.1" {
		t.Errorf("version = %s", l.Release.Version)
	}
	os.WriteFile(path, []byte("mine"), 0o644)
	err = (&ConfigInit{Path: path}).Run()
	if err == nil || !strings.Contains(err.Error(), "--force") {
		t.Errorf("overwrote an existing file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "mine" {
		t.Error("existing file changed")
	}
	if err := (&ConfigInit{Path: path, Force: true}).Run(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); !strings.Contains(string(b), "2.8.0") {
		t.Error("--force did not write the newest version")
	}
	var uv *release.UnknownVersionError
	if err := (&ConfigInit{Path: path + ".2", Version: "1.0.0"}).Run(); !errors.As(err, &uv) {
		t.Errorf("unknown version: %v", err)
	}
	if _, err := os.Stat(path + ".2"); err == nil {
		t.Error("a file was written for an unknown version")
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*"))
	if len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "onprem.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRenderOneComponentAndInputErrors(t *testing.T) {
	path := writeConfig(t, "  version: 2.8.0\n  domain: ci.example.com\n")
	r := &Render{Source: Source{ConfigPath: path, Lookup: noEnv}, Component: "redis"}
	res, err := r.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Components) != 1 || res.Components[0].Name != "redis" || len(res.Components[0].Objects) == 0 {
		t.Fatalf("components = %+v", res.Components)
	}
	var ie *InputError
	r.Component = "redis-cache"
	if _, err := r.Run(context.Background()); !errors.As(err, &ie) || !strings.Contains(err.Error(), "components: platform, ingress") {
		t.Errorf("unknown component: %v", err)
	}
	r.Component, r.Set = "", []string{"nope.x=1"}
	if _, err := r.Run(context.Background()); !errors.As(err, &ie) {
		t.Errorf("bad --set: %v", err)
	}
	missing := &Render{Source: Source{ConfigPath: filepath.Join(t.TempDir(), "none.yaml"), Lookup: noEnv}}
	if _, err := missing.Run(context.Background()); !errors.As(err, &ie) || !strings.Contains(err.Error(), "onprem config init") {
		t.Errorf("missing file: %v", err)
	}
}

func TestSourceAppliesEnvironmentAndFlags(t *testing.T) {
	path := writeConfig(t, "  version: 2.8.0\n  domain: ci.example.com\n")
	env := envconfig.MapLookuper(map[string]string{"ONPREM_VERSION": "2.7.0", "ONPREM_DOMAIN": "env.example.com"})
	domain := "flag.example.com"
	l, err := Source{ConfigPath: path, Lookup: env, Overrides: config.Overrides{Domain: &domain}}.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if l.Release.Version != "2.7.0" || l.Installation.Spec.Domain != "flag.example.com" {
		t.Errorf("version %s domain %s", l.Release.Version, l.Installation.Spec.Domain)
	}
	var ce config.Errors
	_, err = Source{ConfigPath: writeConfig(t, "  version: 3.0.0\n  domain: x.example.com\n"), Lookup: noEnv}.Load(context.Background())
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "2.6.3") {
		t.Errorf("unknown version: %v", err)
	}
}

func TestVersionsListsEveryRelease(t *testing.T) {
	infos, err := (&Versions{}).Run()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, i := range infos {
		got = append(got, i.Version)
		if !i.Installable {
			t.Errorf("%s not installable: %s", i.Version, i.Reason)
		}
	}
	if strings.Join(got, ",") != "2.6.3,2.7.0,2.7.1,2.8.0" {
		t.Errorf("versions = %v", got)
	}
	if len(infos[1].Migrations) != 1 || !infos[1].Required {
		t.Errorf("2.7.0 = %+v", infos[1])
	}
}

// An install whose objects the namespace's restricted Pod Security
// Standard would not admit (here, an operator's overlay putting a service
// on the host's network) is refused with exit code 2, naming the object,
// the field and the fix, before anything is touched: the cluster, which
// does not exist, is never even reached.
func TestInstallRefusesWhatPodSecurityRefuses(t *testing.T) {
	overlay := t.TempDir()
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(`apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
patches:
  - target: {kind: Deployment, name: gitops-api}
    patch: |
      - op: add
        path: /spec/template/spec/hostNetwork
        value: true
`), 0o644); err != nil {
		t.Fatal(err)
	}
	path := writeConfig(t, "  version: 2.8.0\n  domain: ci.example.com\n  overlays: ["+overlay+"]\n")
	in := &Install{Source: Source{ConfigPath: path, Lookup: noEnv}, Cluster: kube.Options{Kubeconfig: filepath.Join(t.TempDir(), "no-such-kubeconfig")}}
	_, err := in.Run(context.Background())
	var ie *InputError
	var ce *render.CheckError
	if !errors.As(err, &ie) || !errors.As(err, &ce) {
		t.Fatalf("err = %T %v", err, err)
	}
	for _, want := range []string{"Deployment/gitops-api", "spec.template.spec.hostNetwork", "restricted Pod Security Standard", "fix: leave out hostNetwork", "nothing was applied"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	if len(ce.Problems) != 1 {
		t.Errorf("problems = %v, want the one", ce.Problems)
	}
}
