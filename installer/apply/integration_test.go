package apply

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

// renderFile renders an onprem.yaml written by the test, with --set values.
func renderFile(t testing.TB, body string, set ...string) *render.Result {
	t.Helper()
	path := filepath.Join(t.TempDir(), "onprem.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	set0, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	in, _, err := config.Load(context.Background(), config.LoadOptions{Path: path, Lookup: envconfig.MapLookuper(nil),
		Validate: config.ValidateOptions{KnownVersions: set0.Versions()}})
	if err != nil {
		t.Fatal(err)
	}
	rel, err := set0.Get(in.Spec.Version)
	if err != nil {
		t.Fatal(err)
	}
	res, err := render.Render(context.Background(), render.Options{Installation: in, Release: rel, Set: set})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func getter(c *testcluster.Cluster) genericclioptions.RESTClientGetter {
	f := genericclioptions.NewConfigFlags(false)
	f.KubeConfig = &c.Kubeconfig
	return f
}

const platform = "  version: 2.8.0\n  domain: ci.example.com\n"

// The whole platform against a real API server (kwok as the kubelet):
// installed and ready; a converged re-run makes no Helm revision; a
// changed value upgrades only its component.
func TestApplyWholePlatform(t *testing.T) {
	c := testcluster.Start(t)
	ctx := context.Background()
	res := renderFile(t, platform)
	rec := &recorder{}
	opts := Options{Getter: getter(c), Client: c.Client, Result: res, Timeout: 3 * time.Minute, Reporter: rec}
	rep, err := Apply(ctx, opts)
	if err != nil {
		for _, f := range rep.Failed() {
			t.Logf("%s: %s\n  %s", f.Name, f.Error, strings.Join(f.NotReady, "\n  "))
		}
		t.Fatal(err)
	}
	for _, comp := range rep.Components {
		if comp.Action != Installed || comp.Revision != 1 {
			t.Errorf("%s: %s revision %d", comp.Name, comp.Action, comp.Revision)
		}
	}
	ns, err := c.Client.CoreV1().Namespaces().Get(ctx, "onprem", metav1.GetOptions{})
	if err != nil || ns.Labels["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace: %v %v", ns.Labels, err)
	}
	dep, err := c.Client.AppsV1().Deployments("onprem").Get(ctx, "pipelines-api", metav1.GetOptions{})
	if err != nil || dep.Status.AvailableReplicas != 1 {
		t.Errorf("pipelines-api: %v available, %v", dep.Status.AvailableReplicas, err)
	}
	// Helm sees every component as a release.
	secrets, err := c.Client.CoreV1().Secrets("onprem").List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil || len(secrets.Items) != len(res.Components) {
		t.Errorf("helm release secrets = %d, want %d (%v)", len(secrets.Items), len(res.Components), err)
	}

	start := time.Now()
	rep, err = Apply(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range rep.Components {
		if comp.Action != Unchanged || comp.Revision != 1 {
			t.Errorf("re-run: %s: %s revision %d", comp.Name, comp.Action, comp.Revision)
		}
	}
	t.Logf("converged re-run: %s", time.Since(start))

	opts.Result = renderFile(t, platform, "gitops-api.replicas=2")
	rep, err = Apply(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range rep.Components {
		want, rev := Unchanged, 1
		if comp.Name == "gitops-api" {
			want, rev = Upgraded, 2
		}
		if comp.Action != want || comp.Revision != rev {
			t.Errorf("change: %s: %s revision %d, want %s %d", comp.Name, comp.Action, comp.Revision, want, rev)
		}
	}
	dep, _ = c.Client.AppsV1().Deployments("onprem").Get(ctx, "gitops-api", metav1.GetOptions{})
	if dep.Status.ReadyReplicas != 2 {
		t.Errorf("gitops-api ready replicas = %d", dep.Status.ReadyReplicas)
	}
}

// A component that never becomes ready fails at its timeout, says which
// pod is not ready and why, leaves what was applied in place, and a
// re-run after the fault is gone converges.
func TestApplyComponentNeverReady(t *testing.T) {
	c := testcluster.Start(t)
	ctx := context.Background()
	body := platform + "  modules:\n    pipelines: {enabled: false}\n"
	res := renderFile(t, body)
	ui := res.Component("gitops-ui")
	for _, o := range ui.Objects {
		if o.GetKind() == "Deployment" {
			ann := map[string]any{testcluster.AnnotationNeverReady: "true"}
			if err := setNested(o.Object, ann, "spec", "template", "metadata", "annotations"); err != nil {
				t.Fatal(err)
			}
		}
	}
	rep, err := Apply(ctx, Options{Getter: getter(c), Client: c.Client, Result: res, Timeout: 20 * time.Second})
	var fe *FailedError
	if !errors.As(err, &fe) {
		t.Fatalf("err = %v", err)
	}
	got, _ := rep.Component("gitops-ui")
	if got.Action != Failed || len(got.NotReady) == 0 || !strings.Contains(strings.Join(got.NotReady, "\n"), "not ready") {
		t.Fatalf("gitops-ui = %+v", got)
	}
	if api, _ := rep.Component("gitops-api"); api.Action != Installed {
		t.Errorf("gitops-api = %+v", api)
	}
	// The fault is fixed: the re-run upgrades gitops-ui and leaves the rest.
	rep, err = Apply(ctx, Options{Getter: getter(c), Client: c.Client, Result: renderFile(t, body), Timeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if ui, _ := rep.Component("gitops-ui"); ui.Action != Upgraded || ui.Revision != 2 {
		t.Errorf("gitops-ui after fix = %+v", ui)
	}
	if api, _ := rep.Component("gitops-api"); api.Action != Unchanged {
		t.Errorf("gitops-api after fix = %+v", api)
	}
}

// Helm's client-side OpenAPI check is off (it cost half the installer's
// CPU); the API server's strict field validation still refuses an object
// with a field its schema lacks, on install and on upgrade, and the error
// names the field.
func TestApplyRefusesAnUnknownField(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	body := platform + "  modules:\n    pipelines: {enabled: false}\n"
	typo := func(res *render.Result) {
		for _, o := range res.Component("gitops-ui").Objects {
			if o.GetKind() == "Deployment" {
				if err := unstructured.SetNestedField(o.Object, "Always", "spec", "template", "spec", "restartPolicyy"); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	check := func(rep *Report, err error, when string) {
		t.Helper()
		var fe *FailedError
		if !errors.As(err, &fe) {
			t.Fatalf("%s: err = %v", when, err)
		}
		got, _ := rep.Component("gitops-ui")
		if got.Action != Failed || !strings.Contains(got.Error, "restartPolicyy") {
			t.Errorf("%s: gitops-ui = %+v", when, got)
		}
	}
	res := renderFile(t, body)
	typo(res)
	rep, err := Apply(ctx, Options{Getter: getter(c), Client: c.Client, Result: res, Timeout: time.Minute})
	check(rep, err, "install")

	if _, err := Apply(ctx, Options{Getter: getter(c), Client: c.Client, Result: renderFile(t, body), Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	res = renderFile(t, body)
	typo(res)
	rep, err = Apply(ctx, Options{Getter: getter(c), Client: c.Client, Result: res, Timeout: time.Minute})
	check(rep, err, "upgrade")
	d, err := c.Client.AppsV1().Deployments("onprem").Get(ctx, "gitops-ui", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if d.Spec.Template.Spec.RestartPolicy != "Always" {
		t.Errorf("restartPolicy = %q", d.Spec.Template.Spec.RestartPolicy)
	}
}

func setNested(obj map[string]any, value map[string]any, path ...string) error {
	m := obj
	for _, p := range path[:len(path)-1] {
		next, ok := m[p].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[p] = next
		}
		m = next
	}
	m[path[len(path)-1]] = value
	return nil
}
