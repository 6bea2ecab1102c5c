package gitops

import (
	"context"
	"errors"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/gitops/gitopstest"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
)

func platformWith(rts map[string]state.Runtime, rc *state.RuntimeConfig, spec config.RuntimeConfig) *Platform {
	in := &config.Installation{}
	in.Spec.RuntimeConfig = spec
	return &Platform{State: &state.State{Runtimes: rts, RuntimeConfig: rc}, Installation: in}
}

// The configuration runtime goes last, or after designate-config names
// another; the message gives that command.
func TestCheckUninstall(t *testing.T) {
	two := map[string]state.Runtime{"a": {}, "b": {}}
	var ce *attachment.ConflictError
	err := CheckUninstall(platformWith(two, &state.RuntimeConfig{URL: "u", ConfigRuntime: "a"}, config.RuntimeConfig{}), "a")
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "onprem runtime designate-config b") {
		t.Errorf("config runtime with others: %v", err)
	}
	if err := CheckUninstall(platformWith(two, &state.RuntimeConfig{URL: "u", ConfigRuntime: "a"}, config.RuntimeConfig{}), "b"); err != nil {
		t.Errorf("another runtime: %v", err)
	}
	if err := CheckUninstall(platformWith(map[string]state.Runtime{"a": {}}, &state.RuntimeConfig{URL: "u", ConfigRuntime: "a"}, config.RuntimeConfig{}), "a"); err != nil {
		t.Errorf("the last runtime: %v", err)
	}
	var nf *attachment.NotFoundError
	if err := CheckUninstall(platformWith(two, nil, config.RuntimeConfig{}), "zz"); !errors.As(err, &nf) || !strings.Contains(err.Error(), "a, b") {
		t.Errorf("unknown runtime: %v", err)
	}
}

// The repository is the recorded one once runtimes share it; another in
// the configuration is refused rather than silently split.
func TestRepository(t *testing.T) {
	rec := &state.RuntimeConfig{URL: "https://git.example.com/a.git", Path: "p"}
	got, err := Repository(platformWith(map[string]state.Runtime{"a": {}}, rec, config.RuntimeConfig{}))
	if err != nil || got.URL != rec.URL || got.Path != "p" {
		t.Errorf("recorded: %+v %v", got, err)
	}
	var ce *attachment.ConflictError
	other := config.RuntimeConfig{Repository: config.GitRepository{URL: "https://git.example.com/b.git"}}
	if _, err := Repository(platformWith(map[string]state.Runtime{"a": {}}, rec, other)); !errors.As(err, &ce) || !strings.Contains(err.Error(), "cannot change while runtimes use it") {
		t.Errorf("changed repository: %v", err)
	}
	var ie *InputError
	if _, err := Repository(platformWith(nil, nil, config.RuntimeConfig{})); !errors.As(err, &ie) || !strings.Contains(err.Error(), "spec.runtimeConfig.repository.url") {
		t.Errorf("no repository: %v", err)
	}
	got, err = Repository(platformWith(nil, nil, other))
	if err != nil || got.URL != other.Repository.URL {
		t.Errorf("from the configuration: %+v %v", got, err)
	}
}

func TestCheckSource(t *testing.T) {
	ok := GitSourceOptions{Runtime: "a", Name: "apps", Repository: config.GitRepository{URL: "https://git.example.com/apps.git", Path: "prod/eu"}}
	if err := checkSource(ok); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mod  func(*GitSourceOptions)
		want string
	}{
		{func(o *GitSourceOptions) { o.Name = "Apps" }, `git source name "Apps"`},
		{func(o *GitSourceOptions) { o.Repository.URL = "" }, "--repo is required"},
		{func(o *GitSourceOptions) { o.Repository.Path = "../x" }, "clean relative folder"},
		{func(o *GitSourceOptions) { o.Repository.Path = "/abs" }, "clean relative folder"},
		{func(o *GitSourceOptions) { o.Destination = "NS" }, `destination namespace "NS"`},
	} {
		o := ok
		tc.mod(&o)
		if err := checkSource(o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", o, err, tc.want)
		}
	}
}

// A Git source is an Application as the upstream runtime makes one: in
// the runtime's project (an AppProject named after the runtime, in its
// namespace), labelled codefresh.io/entity=git-source and
// codefresh.io/internal=false, sync wave 0, with onprem's labels beside;
// the repository's credentials are never written.
func TestGitSourceApplication(t *testing.T) {
	o := GitSourceOptions{Runtime: "edge", Name: "apps", Repository: config.GitRepository{URL: "https://u:tok@git.example.com/apps.git", Branch: "main", Path: "prod"}}
	app := gitSourceApplication(o, "edge-ns")
	str := func(fields ...string) string {
		v, _, _ := unstructured.NestedString(app.Object, fields...)
		return v
	}
	l := app.GetLabels()
	if str("spec", "project") != "edge" || l["codefresh.io/entity"] != "git-source" || l["codefresh.io/internal"] != "false" ||
		l[LabelRuntime] != "edge" || l["app.kubernetes.io/managed-by"] != state.ManagedBy || app.GetAnnotations()["argocd.argoproj.io/sync-wave"] != "0" {
		t.Errorf("project %q, labels %v, annotations %v", str("spec", "project"), l, app.GetAnnotations())
	}
	if str("spec", "source", "repoURL") != "https://git.example.com/apps.git" || str("spec", "source", "targetRevision") != "main" || str("spec", "source", "path") != "prod" ||
		str("spec", "destination", "namespace") != "edge-ns" || str("spec", "destination", "server") != InClusterServer || app.GetNamespace() != "edge-ns" {
		t.Errorf("spec: %v", app.Object["spec"])
	}
	if _, ok := l[legacyLabelGitSource]; ok {
		t.Errorf("the label of onprem's older Git sources is still written: %v", l)
	}
	if !onpremGitSource(app, "edge") || onpremGitSource(app, "other") {
		t.Error("onprem does not recognise its own Git source, or takes another runtime's")
	}
	// A Git source made elsewhere (the platform's UI) is not onprem's to
	// change or remove; one of onprem's older form is.
	foreign := app.DeepCopy()
	foreign.SetLabels(map[string]string{"codefresh.io/entity": "git-source"})
	legacy := app.DeepCopy()
	legacy.SetLabels(map[string]string{legacyLabelGitSource: "apps"})
	if onpremGitSource(foreign, "edge") || !onpremGitSource(legacy, "edge") {
		t.Error("foreign taken for onprem's, or onprem's older form not recognised")
	}
	proj := runtimeProject("edge", "edge-ns")
	if proj.GetKind() != "AppProject" || proj.GetName() != "edge" || proj.GetNamespace() != "edge-ns" {
		t.Errorf("project: %s %s/%s", proj.GetKind(), proj.GetNamespace(), proj.GetName())
	}
	dests, _, _ := unstructured.NestedSlice(proj.Object, "spec", "destinations")
	if len(dests) != 1 || dests[0].(map[string]any)["server"] != InClusterServer {
		t.Errorf("project destinations: %v", dests)
	}
}

func TestRedactURL(t *testing.T) {
	if got := redactURL("https://user:tok@git.example.com/a.git"); got != "https://git.example.com/a.git" {
		t.Errorf("redact: %s", got)
	}
	if got := redactURL("https://git.example.com/a.git"); got != "https://git.example.com/a.git" {
		t.Errorf("plain: %s", got)
	}
}

// A runtime whose chart renders a pod that its namespace's restricted Pod
// Security Standard would not admit is refused while it is prepared,
// before anything is touched, naming the object, the field and the fix;
// a chart package that lacks a subchart it declares is refused there too.
func TestPrepareRefusesWhatPodSecurityRefuses(t *testing.T) {
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := set.Get("2.8.0")
	if err != nil {
		t.Fatal(err)
	}
	in := &config.Installation{}
	in.Metadata.Name = "onprem"
	in.Spec.Version, in.Spec.Domain, in.Spec.Namespace = rel.Version, "ci.example.com", "onprem"
	in.Spec.RuntimeConfig.AccountID = "64f0c1d2e3a4b5c6d7e8f901"
	in.Spec.Ingress.ClassName = "onprem"
	target := Target{Runtime: config.Runtime{Name: "edge"}, Cluster: &kube.Cluster{}}

	chart := gitopstest.Chart(t, rel.Runtime.ChartVersion)
	chart.Templates = append(chart.Templates, &common.File{Name: "templates/debug.yaml", Data: []byte(`apiVersion: batch/v1
kind: Job
metadata:
  name: debug
  annotations: {helm.sh/hook: pre-install}
spec:
  template:
    spec:
      hostPID: true
      restartPolicy: Never
      containers: [{name: debug, image: quay.io/codefresh/debug:1}]
`)})
	_, err = Prepare(context.Background(), target, in, rel, chart, nil)
	var ce *render.CheckError
	if !errors.As(err, &ce) || !render.IsInputError(err) {
		t.Fatalf("err = %T %v", err, err)
	}
	for _, want := range []string{"runtime edge", "Job/debug", "spec.template.spec.hostNetwork, hostPID, hostIPC", "fix: leave out"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q: %v", want, err)
		}
	}

	chart = gitopstest.Chart(t, rel.Runtime.ChartVersion)
	chart.Metadata.Dependencies = append(chart.Metadata.Dependencies, &chartv2.Dependency{Name: "argo-cd", Version: "9.0.2", Condition: "argo-cd.enabled"})
	_, err = Prepare(context.Background(), target, in, rel, chart, nil)
	var me *charts.MissingDependencyError
	if !errors.As(err, &me) || !render.IsInputError(err) || !strings.Contains(err.Error(), "argo-cd 9.0.2") {
		t.Fatalf("missing subchart: err = %T %v", err, err)
	}
}

// The registry's pull Secret: read from the platform's namespace (a
// missing one is the operator's to create, exit 2, named with the command
// that creates it), copied into the runtime's namespace with its type and
// data, marked as the runtime's (removed with it); nothing without
// spec.registry.pullSecret.
func TestPullSecretCopiedToTheRuntime(t *testing.T) {
	ctx := context.Background()
	platform := &kube.Cluster{Client: fake.NewClientset()}
	p := platformWith(nil, nil, config.RuntimeConfig{})
	p.Cluster, p.Namespace = platform, "onprem"
	if s, err := pullSecret(ctx, p, "edge"); s != nil || err != nil {
		t.Fatalf("no pull Secret configured: %v %v", s, err)
	}
	p.Installation.Spec.Registry = config.Registry{Host: "registry.airgap.internal:5000", PullSecret: "airgap-pull"}
	_, err := pullSecret(ctx, p, "edge")
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "kubectl -n onprem create secret docker-registry airgap-pull") {
		t.Fatalf("missing pull Secret: %v", err)
	}
	data := map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{}}`)}
	if _, err := platform.Client.CoreV1().Secrets("onprem").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "airgap-pull", Namespace: "onprem"}, Type: corev1.SecretTypeDockerConfigJson, Data: data,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src, err := pullSecret(ctx, p, "edge")
	if err != nil {
		t.Fatal(err)
	}
	rt := &kube.Cluster{Client: fake.NewClientset()}
	if err := applyPullSecret(ctx, rt, "edge", "edge", src); err != nil {
		t.Fatal(err)
	}
	got, err := rt.Client.CoreV1().Secrets("edge").Get(ctx, "airgap-pull", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Type != corev1.SecretTypeDockerConfigJson || string(got.Data[corev1.DockerConfigJsonKey]) != `{"auths":{}}` || got.Labels[LabelRuntime] != "edge" {
		t.Errorf("the copy: type %s, labels %v", got.Type, got.Labels)
	}
}
