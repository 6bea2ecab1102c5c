package action

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"onprem.dev/onprem/installer/chartfetch"
	"onprem.dev/onprem/installer/gitops/gitopstest"
	"onprem.dev/onprem/installer/state"

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

// testBundleKey signs the bundles of these tests (makeBundle); a Source
// trusts it through trustTestKey or spec.trust (testBundleKeyPEM).
var testBundleKey = sync.OnceValue(func() ed25519.PrivateKey {
	_, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		panic(err)
	}
	return sk
})

// testBundleKeyPEM is the public half of testBundleKey, as bundle.pub holds it.
func testBundleKeyPEM(t testing.TB) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(testBundleKey().Public())
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// trustTestKey makes src trust testBundleKey, as --public-key does.
func trustTestKey(t testing.TB, src *Source) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bundle.pub")
	if err := os.WriteFile(p, []byte(testBundleKeyPEM(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	src.PublicKeys = append(src.PublicKeys, p)
}

// makeBundle bundles a shipped release with small random images standing in
// for the real ones (no registry is reachable here), signed with
// testBundleKey, and pushes it to registry under prefix onprem.
func makeBundle(t *testing.T, dir, version, registry string) (string, *release.Release) {
	return makeBundleSigned(t, dir, version, registry, testBundleKey())
}

// makeBundleSigned is makeBundle with the signing key given (nil: unsigned).
func makeBundleSigned(t *testing.T, dir, version, registry string, key ed25519.PrivateKey) (string, *release.Release) {
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
	if key == nil {
		path = filepath.Join(dir, "platform-"+version+"-unsigned.bundle")
	}
	if _, err := bundle.Create(ctx, bundle.CreateOptions{Release: rel, Output: path, SigningKey: key,
		RuntimeChartRepository: gitopstest.ServeOCI(t, rel.Runtime.ChartVersion), RuntimeChart: chartfetch.Options{PlainHTTP: true},
		Source: bundle.SourceFunc(func(context.Context, bundle.ImageRequest) (v1.Image, error) { return random.Image(512, 1) }),
	}); err != nil {
		t.Fatal(err)
	}
	b, err := bundle.Open(ctx, path, bundle.OpenOptions{Trust: bundle.Trust{AllowUnsigned: true}})
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
// next version's bundle does the same. A changed byte, an unsigned bundle
// or a configuration without a private registry is refused before anything
// is touched; the history records whose signature each bundle carried, or
// that it was accepted unsigned (--allow-unsigned).
func TestInstallAndUpgradeFromBundles(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	reg := testservers.Registry(t)
	dir := t.TempDir()
	ctx := context.Background()
	b27, rel27 := makeBundle(t, dir, "2.7.0", reg)
	b28, rel28 := makeBundleSigned(t, dir, "2.8.0", reg, nil)

	registryCfg := "  registry: {host: \"" + reg + "\", pathPrefix: onprem, insecure: true}\n"
	noPipelines := "  modules:\n    pipelines: {enabled: false}\n"
	src, cl := clusterConfig(t, c, upgradePlatform("2.7.0", noPipelines))
	src.Bundles = []string{b27}
	trustTestKey(t, &src)
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

	// Signed by a key nobody trusts: refused (the releases' own key and
	// spec.trust do not name it), nothing installed.
	src.Bundles = []string{b27}
	_, err = (&Install{Source: src, Cluster: cl}).Run(ctx)
	var ue *bundle.UntrustedKeyError
	if !errors.As(err, &ue) || !errors.As(err, &ie) || !strings.Contains(err.Error(), "spec.trust") {
		t.Fatalf("bundle signed by an untrusted key: %v", err)
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, "onprem", metav1.GetOptions{}); err == nil {
		t.Fatal("a refused bundle created the namespace")
	}

	// The operator trusts the key in spec.trust.
	trustCfg := "  trust:\n    - name: test vendor\n      publicKey: |\n" + indentLines(testBundleKeyPEM(t), "        ")
	src, cl = clusterConfig(t, c, upgradePlatform("2.7.0", noPipelines, registryCfg, trustCfg))
	src.Bundles = []string{b27}
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	checkPinned(t, c, rel27, reg)
	if u := lastBundleUse(t, c); u.Release != "2.7.0" || !strings.Contains(u.TrustedBy, "spec.trust[0]") || u.Unverified != "" {
		t.Errorf("install history: %+v, want trusted by spec.trust[0]", u)
	}

	// An unsigned bundle: refused, with the way out named; accepted with
	// AllowUnsigned, and the history says so.
	src, _ = clusterConfig(t, c, upgradePlatform("2.8.0", noPipelines, registryCfg, trustCfg))
	src.Bundles = []string{b28}
	_, err = (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}, Timeout: 2 * time.Minute}).Run(ctx)
	if !errors.Is(err, bundle.ErrUnsigned) || !errors.As(err, &ie) || !strings.Contains(err.Error(), "--allow-unsigned") {
		t.Fatalf("unsigned bundle: %v", err)
	}
	src.AllowUnsigned = true
	res, err := (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != "2.8.0" {
		t.Fatalf("upgrade from the bundle: %+v", res)
	}
	checkPinned(t, c, rel28, reg)
	if u := lastBundleUse(t, c); u.Release != "2.8.0" || u.Unverified != "not signed" || u.TrustedBy != "" {
		t.Errorf("upgrade history: %+v, want accepted unsigned", u)
	}
}

// lastBundleUse is the bundle the newest operation of the installation
// recorded.
func lastBundleUse(t *testing.T, c *testcluster.Cluster) state.BundleUse {
	t.Helper()
	st, err := state.NewStore(c.Client, "onprem").Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.History) == 0 {
		t.Fatal("no history")
	}
	op := st.History[len(st.History)-1]
	if len(op.Bundles) != 1 {
		t.Fatalf("%s recorded bundles %+v, want one", op.Kind, op.Bundles)
	}
	return op.Bundles[0]
}

// indentLines puts prefix before every line of s.
func indentLines(s, prefix string) string {
	var b strings.Builder
	for l := range strings.Lines(s) {
		b.WriteString(prefix + l)
	}
	return b.String()
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
