package release

import (
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

func TestEmbeddedReleasesAreValid(t *testing.T) {
	set, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(set.Versions(), " ")
	if got != "2.6.3 2.7.0 2.7.1 2.8.0" {
		t.Fatalf("versions = %q", got)
	}
	if set.Latest().Version != "2.8.0" {
		t.Errorf("latest = %s", set.Latest().Version)
	}
}

// The shipped line must differ the way real releases do: a removed
// component, a changed image, a migration, a required stop.
func TestEmbeddedReleasesDifferLikeRealOnes(t *testing.T) {
	set, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	r263, _ := set.Get("2.6.3")
	r270, _ := set.Get("2.7.0")
	r280, _ := set.Get("v2.8.0")
	if _, ok := r263.Component("gitops-manager"); !ok {
		t.Error("2.6.3 should ship gitops-manager")
	}
	if _, ok := r280.Component("gitops-manager"); ok {
		t.Error("2.8.0 should have removed gitops-manager")
	}
	if _, ok := r280.Image("gitops-manager"); ok {
		t.Error("2.8.0 still lists the gitops-manager image")
	}
	m263, _ := r263.Image("mongodb")
	m280, _ := r280.Image("mongodb")
	if m263.Tag == m280.Tag {
		t.Errorf("mongodb image unchanged between 2.6.3 and 2.8.0 (%s)", m263.Tag)
	}
	if !r270.Required || len(r270.Migrations) == 0 {
		t.Error("2.7.0 should be a required stop with a migration")
	}
	if r263.UpgradeFrom != "" {
		t.Error("2.6.3 is the oldest release: nothing upgrades to it")
	}
	// Every platform image carries the release's own version as its tag.
	for _, r := range set.All() {
		for _, img := range r.Images {
			if img.Platform && img.Tag != r.Version {
				t.Errorf("%s: platform image %s has tag %s", r.Version, img.Name, img.Tag)
			}
		}
	}
}

func TestGetUnknownVersionListsKnownOnes(t *testing.T) {
	set, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	_, err = set.Get("9.9.9")
	var uv *UnknownVersionError
	if !errors.As(err, &uv) {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "2.6.3, 2.7.0, 2.7.1, 2.8.0") {
		t.Errorf("message does not list versions: %v", err)
	}
}

const malformed = `
apiVersion: onprem.dev/v1alpha1
kind: Release
version: 2.9
minInstallerVersion: 0.1.0
kubernetes: ">= 1.30 <<"
upgradeFrom: ">= 2.8.0"
images:
  - {name: web, repository: Docker.io/Web, tag: "1.0", digest: sha256:abc}
  - {name: web, repository: web, tag: "1.0"}
components:
  - name: a
    chart: service
    chartVersion: "1"
    group: frontend
    dependsOn: [b, ghost]
    images: {service: nope}
  - name: b
    chart: service
    chartVersion: 1.0.0
    group: gitops
    dependsOn: [a]
    images: {service: web}
migrations:
  - name: m1
    component: ghost
    args: []
    touches: [{engine: mysql, service: a}]
    timeout: soon
`

func TestMalformedManifestReportsEveryProblem(t *testing.T) {
	_, err := Parse([]byte(malformed))
	if err == nil {
		t.Fatal("malformed manifest accepted")
	}
	for _, want := range []string{
		`version: "2.9" is not a semantic version`,
		`kubernetes: ">= 1.30 <<" is not a version constraint`,
		`images[0].repository: "Docker.io/Web" is not a valid repository`,
		`images[0].digest: "sha256:abc" is not sha256:<64 hex digits>`,
		`images[1].name: "web" is defined twice`,
		`components[0].chartVersion: "1" is not a semantic version`,
		`components[0].group: "frontend" is not one of`,
		`components[0].images.service: image "nope" is not in images`,
		`components[0].dependsOn: "ghost" is not a component`,
		`dependency cycle a -> b -> a`,
		`migrations[0].component: "ghost" is not a component`,
		`migrations[0].args: the migration command is required`,
		`migrations[0].touches[0].engine: "mysql" is not mongodb or postgresql`,
		`migrations[0].timeout: "soon" is not a positive duration`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

// Every shipped release has a build runner whose images are its own, the
// agent's a platform image of the release's version.
func TestEmbeddedReleasesHaveARunner(t *testing.T) {
	set, err := Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range set.All() {
		if r.Runner == nil || r.Runner.Chart != "runner" || r.Runner.ChartVersion == "" {
			t.Errorf("%s: runner = %+v", r.Version, r.Runner)
			continue
		}
		agent, ok := r.Image(r.Runner.Images["agent"])
		if !ok || !agent.Platform || agent.Tag != r.Version {
			t.Errorf("%s: agent image %+v", r.Version, agent)
		}
		engine, ok := r.Image(r.Runner.Images["engine"])
		if !ok || engine.Repository != "docker.io/moby/buildkit" || !strings.HasSuffix(engine.Tag, "-rootless") {
			t.Errorf("%s: engine image %+v (rootless BuildKit needs no privileged mode)", r.Version, engine)
		}
	}
}

func TestRunnerSectionIsValidated(t *testing.T) {
	doc := strings.Replace(malformed, "migrations:", "runner:\n  chart: \"\"\n  chartVersion: one\n  images: {agent: web, engine: nowhere}\nmigrations:", 1)
	_, err := Parse([]byte(doc))
	for _, want := range []string{
		`runner.chart: required`,
		`runner.chartVersion: "one" is not a semantic version`,
		`runner.images.engine: image "nowhere" is not in images`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "runner.images.agent") {
		t.Errorf("an existing image reported: %v", err)
	}
	_, err = Parse([]byte(strings.Replace(malformed, "migrations:", "runner: {chart: runner, chartVersion: 1.0.0, images: {}}\nmigrations:", 1)))
	if err == nil || !strings.Contains(err.Error(), "runner.images: the runner needs at least one image") {
		t.Errorf("runner without images: %v", err)
	}
}

// The runtime's contract and pull-Secret paths: unknown keys, missing
// required keys (with the chart version they are missing for), malformed
// paths, an unknown format and a path written twice are each named.
func TestRuntimeSectionIsValidated(t *testing.T) {
	runtime := `runtime:
  chart: gitops-runtime
  chartVersion: 1.0.0
  repository: oci://quay.io/codefresh
  contract:
    runtimeName: global.runtime.name
    platformUrl: global.codefresh.url
    accountID: global..accountId
    gitPassword: global.runtime.name
  pullSecrets:
    - {path: a..b, format: references}
    - {path: global.runtime.name, format: names}
    - {path: c.pull, format: strings}
migrations:`
	_, err := Parse([]byte(strings.Replace(malformed, "migrations:", runtime, 1)))
	for _, want := range []string{
		`runtime.contract.platformUrl: not a contract key (valid: runtimeName, platformURL,`,
		`runtime.contract.accountID: "global..accountId" is not a values path`,
		`runtime.contract.runtimeName: values path global.runtime.name is also written by runtime.contract.gitPassword`,
		`runtime.contract.platformURL: required: the values path where chart gitops-runtime 1.0.0 reads the platformURL`,
		`runtime.contract.platformToken: required`,
		`runtime.pullSecrets[0].path: "a..b" is not a values path`,
		`runtime.pullSecrets[1]: values path global.runtime.name is also written by`,
		`runtime.pullSecrets[2].format: "strings" is not references ([{name: NAME}]) or names ([NAME])`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}

func TestUnknownFieldIsRejected(t *testing.T) {
	_, err := Parse([]byte("apiVersion: onprem.dev/v1alpha1\nkind: Release\nversion: 1.0.0\ncomponets: []\n"))
	if err == nil || !strings.Contains(err.Error(), `unknown field "componets"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestLoadFSRejectsMisnamedAndEmpty(t *testing.T) {
	data, err := embedded.ReadFile("releases/2.6.3.yaml")
	if err != nil {
		t.Fatal(err)
	}
	misnamed := fstest.MapFS{"2.6.4.yaml": &fstest.MapFile{Data: data}}
	if _, err := LoadFS(misnamed); err == nil || !strings.Contains(err.Error(), "must be named 2.6.3.yaml") {
		t.Errorf("misnamed file: err = %v", err)
	}
	if _, err := LoadFS(fstest.MapFS{}); err == nil {
		t.Error("empty folder accepted")
	}
}

func TestCheckInstaller(t *testing.T) {
	r := &Release{Version: "3.0.0", MinInstallerVersion: "0.4.0"}
	if err := r.CheckInstaller("0.4.0"); err != nil {
		t.Errorf("same version refused: %v", err)
	}
	err := r.CheckInstaller("0.3.9")
	if err == nil || !strings.Contains(err.Error(), "needs onprem 0.4.0 or newer") {
		t.Errorf("older installer: err = %v", err)
	}
}

func TestSupportsKubernetesParsesProviderVersions(t *testing.T) {
	r := &Release{Version: "2.7.0", Kubernetes: ">= 1.31, < 1.38"}
	for v, want := range map[string]bool{
		"v1.33.4-eks-1234":     true,
		"v1.31.0":              true,
		"1.37.9+k3s1":          true,
		"v1.30.14-gke.1000":    false,
		"v1.38.0":              false,
		"v1.36.3-aliyun.1":     true,
		"v1.31.0-rc.1":         true, // the core of a pre-release counts
		"v1.29.15-eks-1234567": false,
	} {
		got, err := r.SupportsKubernetes(v)
		if err != nil {
			t.Errorf("%s: %v", v, err)
			continue
		}
		if got != want {
			t.Errorf("%s: supported = %v, want %v", v, got, want)
		}
	}
	if _, err := r.SupportsKubernetes("banana"); err == nil {
		t.Error("garbage version accepted")
	}
}
