package bundle

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/chartfetch"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
)

// newRuntimeChart packages a small chart called name at version with the
// Helm SDK, pushes it to the OCI registry at host (plain HTTP) under
// charts/, and returns the archive.
func newRuntimeChart(t *testing.T, host, name, version string) []byte {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	files := map[string]string{
		"Chart.yaml":                "apiVersion: v2\nname: " + name + "\nversion: " + version + "\ntype: application\n",
		"values.yaml":               "images:\n  argocd: \"\"\n",
		"templates/deployment.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: argocd-server\nspec:\n  template:\n    spec:\n      containers:\n        - name: server\n          image: {{ .Values.images.argocd }}\n",
		"templates/_helpers.tpl":    "{{- define \"runtime.name\" -}}{{ .Release.Name }}{{- end -}}\n",
	}
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ch, err := loader.LoadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	tgz, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(tgz)
	if err != nil {
		t.Fatal(err)
	}
	client, err := registry.NewClient(registry.ClientOptPlainHTTP(), registry.ClientOptWriter(io.Discard))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Push(data, host+"/charts/"+name+":"+version); err != nil {
		t.Fatalf("pushing the runtime chart: %v", err)
	}
	return data
}

// A release with a runtime chart: the bundle carries the chart (fetched
// from a mirror of its repository, an OCI registry on loopback) unpacked
// beside the embedded charts, pins its digest in the bundle's release
// manifest, carries the runtime's images, and an install resolves the
// chart from the bundle without the network.
func TestBundleCarriesTheRuntimeChart(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 8<<10, 4<<10)
	const name, version = "gitops-runtime", "0.26.0"
	archive := newRuntimeChart(t, f.srcHost, name, version)
	sum := sha256.Sum256(archive)
	digest := "sha256:" + hex.EncodeToString(sum[:])

	rel := *f.rel
	// An image the runtime chart runs by itself: no release image, found
	// in the chart's render.
	runtimeImage := f.srcHost + "/argoproj/argocd:v3.1.9"
	f.byRef[runtimeImage] = imageOf(t, randomLayer(t, 4<<10, 999))
	// The release names the upstream repository, which the test cannot
	// reach: the bundle is made from the mirror.
	rel.Runtime = &release.RemoteChart{
		Chart: name, ChartVersion: version, Repository: "oci://charts.example.invalid/upstream",
		Contract: map[string]string{
			release.ContractRuntimeName: "global.runtime.name", release.ContractPlatformURL: "global.codefresh.url",
			release.ContractAccountID: "global.codefresh.accountId", release.ContractPlatformToken: "global.codefresh.userToken.secretKeyRef",
			release.ContractGitPassword: "global.runtime.gitCredentials.password.secretKeyRef",
		},
		Values: map[string]any{"server": map[string]any{"replicas": 2}},
	}
	dir := t.TempDir()
	out := filepath.Join(dir, "platform.bundle")
	opts := CreateOptions{
		Release: &rel, Output: out, Source: f.memorySource(), PlatformImages: f.platformImages,
		RuntimeChartRepository: "oci://" + f.srcHost + "/charts",
		RuntimeChart:           chartfetch.Options{PlainHTTP: true, CacheDir: filepath.Join(t.TempDir(), "cache")},
		RenderedImages: func(_ context.Context, ch *chartv2.Chart) ([]string, error) {
			if ch == nil || ch.Metadata.Name != name || ch.Metadata.Version != version {
				t.Errorf("RenderedImages was given %v, want the runtime chart fetched", ch)
			}
			refs := []string{runtimeImage}
			for _, img := range f.rel.Images {
				refs = append(refs, images.Repository(img, f.platformImages)+":"+img.Tag)
			}
			return refs, nil
		},
	}
	res, err := Create(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Images != len(f.rel.Images)+1 {
		t.Errorf("%d images, want the release's %d and the runtime's own", res.Images, len(f.rel.Images))
	}
	if rel.Runtime.Digest != "" {
		t.Error("Create changed the caller's release")
	}

	b, err := Open(ctx, out, OpenOptions{Trust: allowUnsigned})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rc := b.Release().Runtime
	if rc == nil || rc.Digest != digest || rc.Repository != rel.Runtime.Repository || rc.ChartVersion != version || rc.Contract[release.ContractRuntimeName] != "global.runtime.name" {
		t.Fatalf("the bundle's runtime: %+v, want digest %s", rc, digest)
	}
	ch, err := charts.LoadFrom(b.Charts(), name)
	if err != nil {
		t.Fatal(err)
	}
	if ch.Metadata.Name != name || ch.Metadata.Version != version || len(ch.Templates) != 2 {
		t.Errorf("the bundle's runtime chart: %+v, %d templates", ch.Metadata, len(ch.Templates))
	}
	got, err := b.fsys.ReadFile(chartsDir + "/" + name + "/templates/deployment.yaml")
	if err != nil || !bytes.Contains(got, []byte("{{ .Values.images.argocd }}")) {
		t.Errorf("templates/deployment.yaml: %v\n%s", err, got)
	}
	// The image the runtime chart renders is carried, named by its
	// reference, pinned, marked with the chart that brought it.
	if _, err := b.Image(runtimeImage); err != nil {
		t.Errorf("runtime image %s: %v", runtimeImage, err)
	}
	var carried *release.Image
	for i, img := range b.Release().Images {
		if img.Name == runtimeImage {
			carried = &b.Release().Images[i]
		}
	}
	if carried == nil || carried.Chart != name+"-"+version || carried.Digest == "" || carried.Repository != f.srcHost+"/argoproj/argocd" || carried.Tag != "v3.1.9" {
		t.Errorf("the runtime's image in the bundle's release: %+v", carried)
	}
	// Inspect lists it among the embedded charts.
	in, err := b.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	embedded, _ := charts.NamesIn(charts.FS)
	var listed bool
	for _, c := range in.Charts {
		listed = listed || (c.Name == name && c.Version == version)
	}
	if !listed || len(in.Charts) != len(embedded)+1 {
		t.Errorf("inspect charts %+v, want the %d embedded ones and %s %s", in.Charts, len(embedded), name, version)
	}
	// The install takes the bundle's copy: the release's repository is
	// never asked.
	rch, err := chartfetch.Resolve(ctx, chartfetch.FromRelease(rc), b.Charts(), chartfetch.Options{})
	if err != nil || rch.Metadata.Version != version {
		t.Errorf("resolving from the bundle: %v", err)
	}

	// A pin the repository's archive does not match is refused, and
	// nothing is written.
	pinned := rel
	wrong := *rel.Runtime
	wrong.Digest = "sha256:" + strings.Repeat("0", 64)
	pinned.Runtime = &wrong
	opts.Release, opts.Output = &pinned, filepath.Join(dir, "pinned.bundle")
	_, err = Create(ctx, opts)
	if !errors.Is(err, chartfetch.ErrDigestMismatch) || !strings.Contains(err.Error(), digest) {
		t.Errorf("wrong pin: %v", err)
	}
	// The right pin is kept.
	right := *rel.Runtime
	right.Digest = digest
	pinned.Runtime = &right
	if _, err := Create(ctx, opts); err != nil {
		t.Errorf("right pin: %v", err)
	}
	onlyFiles(t, dir, "pinned.bundle", "platform.bundle")

	// A component whose chart has the runtime chart's name cannot be
	// carried beside it.
	clash := rel
	clash.Runtime = &release.RemoteChart{Chart: rel.Components[0].Chart, ChartVersion: version, Repository: rel.Runtime.Repository}
	opts.Release, opts.Output = &clash, filepath.Join(dir, "clash.bundle")
	if _, err := Create(ctx, opts); err == nil || !strings.Contains(err.Error(), "runtime chart") {
		t.Errorf("chart name clash: %v", err)
	}
	onlyFiles(t, dir, "pinned.bundle", "platform.bundle")
}
