package action

import (
	"bytes"
	"context"
	"errors"
	"onprem.dev/onprem/installer/chartfetch"
	"onprem.dev/onprem/installer/runtime/runtimetest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/bundle"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
)

// makeBundle bundles a shipped release with small random images standing in
// for the real ones (no registry is reachable here), and pushes it to
// registry under prefix onprem.
func makeBundle(t *testing.T, dir, version, registry string) (string, *release.Release) {
	t.Helper()
	ctx := context.Background()
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := set.Get(version)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "platform-"+version+".bundle")
	if _, err := bundle.Create(ctx, bundle.CreateOptions{Release: rel, Output: path,
		RuntimeChartRepository: runtimetest.ServeOCI(t, rel.Runtime.ChartVersion), RuntimeChart: chartfetch.Options{PlainHTTP: true},
		Source: bundle.SourceFunc(func(context.Context, bundle.ImageRequest) (v1.Image, error) { return random.Image(512, 1) }),
	}); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Open(ctx, path, bundle.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := bundle.Push(ctx, bundle.PushOptions{Bundle: b, Host: registry, Prefix: "onprem", Insecure: true}); err != nil {
		t.Fatal(err)
	}
	return path, b.Release()
}

// podImages lists the container images of every workload in namespace.
func podImages(t *testing.T, c *testcluster.Cluster, ns string) []string {
	t.Helper()
	ctx := context.Background()
	var specs []corev1.PodSpec
	deps, err := c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		specs = append(specs, d.Spec.Template.Spec)
	}
	sts, err := c.Client.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range sts.Items {
		specs = append(specs, s.Spec.Template.Spec)
	}
	jobs, err := c.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		specs = append(specs, j.Spec.Template.Spec)
	}
	var out []string
	for _, s := range specs {
		for _, ct := range append(s.InitContainers, s.Containers...) {
			out = append(out, ct.Image)
		}
	}
	return out
}

// Installing from a bundle: the bundle's release (digests pinned) replaces
// the embedded one, every image is pulled from the private registry by
// digest (preflight checked that each is there), and an upgrade with the
// next version's bundle does the same. A changed byte, or a configuration
// without a private registry, is refused before anything is touched.
func TestInstallAndUpgradeFromBundles(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	reg := testservers.Registry(t)
	dir := t.TempDir()
	ctx := context.Background()
	b27, rel27 := makeBundle(t, dir, "2.7.0", reg)
	b28, rel28 := makeBundle(t, dir, "2.8.0", reg)

	registryCfg := "  registry: {host: \"" + reg + "\", pathPrefix: onprem, insecure: true}\n"
	noPipelines := "  modules:\n    pipelines: {enabled: false}\n"
	src, cl := clusterConfig(t, c, upgradePlatform("2.7.0", noPipelines))
	src.Bundles = []string{b27}
	_, err := (&Install{Source: src, Cluster: cl}).Run(ctx)
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "spec.registry.host: required when installing from a bundle") {
		t.Fatalf("bundle without a registry: %v", err)
	}

	// One changed byte in the release manifest inside the bundle (its
	// text is stored as is in the tar): 15m becomes 95m.
	tampered := filepath.Join(dir, "tampered.bundle")
	data, err := os.ReadFile(b27)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("timeout: 15m"))
	if i < 0 {
		t.Fatal("the release manifest is not in the bundle as text")
	}
	data[i+len("timeout: ")] = '9'
	if err := os.WriteFile(tampered, data, 0o644); err != nil {
		t.Fatal(err)
	}
	src, cl = clusterConfig(t, c, upgradePlatform("2.7.0", noPipelines, registryCfg))
	src.Bundles = []string{tampered}
	_, err = (&Install{Source: src, Cluster: cl}).Run(ctx)
	var ce *bundle.CorruptError
	if !errors.As(err, &ce) || ce.File != "releases/2.7.0.yaml" || !strings.Contains(err.Error(), ce.File) {
		t.Fatalf("tampered bundle: %v", err)
	}

	src.Bundles = []string{b27}
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	checkPinned(t, c, rel27, reg)

	src, _ = clusterConfig(t, c, upgradePlatform("2.8.0", noPipelines, registryCfg))
	src.Bundles = []string{b28}
	res, err := (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != "2.8.0" {
		t.Fatalf("upgrade from the bundle: %+v", res)
	}
	checkPinned(t, c, rel28, reg)
}

// checkPinned checks that every workload image is the private registry's
// relocation of one of the release's images, pinned by the bundle's digest.
func checkPinned(t *testing.T, c *testcluster.Cluster, rel *release.Release, reg string) {
	t.Helper()
	want := map[string]bool{}
	for _, img := range rel.Images {
		if img.Digest == "" {
			t.Fatalf("bundle release %s: image %s has no digest", rel.Version, img.Name)
		}
		repo, err := images.Relocate(images.Repository(img, "quay.io/codefresh"), reg, "onprem")
		if err != nil {
			t.Fatal(err)
		}
		want[repo+":"+img.Tag+"@"+img.Digest] = true
	}
	got := podImages(t, c, "onprem")
	if len(got) == 0 {
		t.Fatal("no workloads")
	}
	for _, img := range got {
		if !want[img] {
			t.Errorf("platform %s: image %s is not a pinned image of the bundle in %s", rel.Version, img, reg)
		}
	}
}
