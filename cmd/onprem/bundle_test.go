package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/gitops/gitopstest"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/bundle"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

// The behaviour of the bundle verbs is tested in installer/action; these
// tests check the command line: flags reach the action, exit codes,
// results on stdout (text or -o json), progress and errors on stderr.

// bundleCLI runs `onprem bundle ARGS...` and returns exit code, stdout and
// stderr.
func bundleCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	if len(args) > 0 && args[0] == "create" {
		// The release's runtime chart, from a mirror on loopback (the
		// upstream repository is not reachable here).
		args = append(args, "--chart-repository", gitopstest.ServeOCI(t, "0.26.0"), "--chart-plain-http")
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"bundle"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// bundleLayout writes an OCI layout holding every image of release 2.8.0,
// annotated with its source reference (all on one shared base layer),
// leaving out the images named in skip.
func bundleLayout(t *testing.T, skip ...string) string {
	t.Helper()
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := set.Get("2.8.0")
	if err != nil {
		t.Fatal(err)
	}
	// What the charts render: the release's images and the runtime
	// chart's own (the test fixture's).
	refs, err := render.ReleaseImages(context.Background(), render.ImageOptions{Release: rel, RuntimeChart: gitopstest.Chart(t, rel.Runtime.ChartVersion)})
	if err != nil {
		t.Fatal(err)
	}
	carried := *rel
	if carried.Images, err = bundle.CarriedImages(rel, refs, config.DefaultPlatformImages); err != nil {
		t.Fatal(err)
	}
	rel = &carried
	dir := filepath.Join(t.TempDir(), "oci")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	base := static.NewLayer(bytes.Repeat([]byte("base layer "), 4096), types.DockerLayer)
	for i, img := range rel.Images {
		if slices.Contains(skip, img.Name) {
			continue
		}
		own := static.NewLayer([]byte(strings.Repeat(img.Name, 100+i)), types.DockerLayer)
		im, err := mutate.AppendLayers(empty.Image, base, own)
		if err != nil {
			t.Fatal(err)
		}
		ref := images.Repository(img, "quay.io/codefresh") + ":" + img.Tag
		if err := lp.AppendImage(im, layout.WithAnnotations(map[string]string{"io.containerd.image.name": ref}), layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestBundleCommands(t *testing.T) {
	dir := t.TempDir()
	keys := filepath.Join(dir, "keys")
	oci := bundleLayout(t)
	file := filepath.Join(dir, "platform.bundle")

	code, stdout, stderr := bundleCLI(t, "keygen", "--out", keys)
	if code != exitOK || !strings.Contains(stdout, filepath.Join(keys, "bundle.key")) || !strings.Contains(stdout, "key id sha256:") || stderr != "" {
		t.Fatalf("keygen: %d %q %q", code, stdout, stderr)
	}
	if code, stdout, stderr := bundleCLI(t, "keygen", "--out", keys); code != exitInput || stdout != "" || !strings.Contains(stderr, "--force") {
		t.Errorf("second keygen: %d %q %q", code, stdout, stderr)
	}
	if code, _, stderr := bundleCLI(t, "keygen", "--out", keys, "--force"); code != exitOK {
		t.Errorf("keygen --force: %d %s", code, stderr)
	}

	// Result on stdout, progress on stderr. 42 images: the release's 27
	// and the 15 the fixture runtime chart renders by itself.
	code, stdout, stderr = bundleCLI(t, "create", "--version", "2.8.0", "-o", file, "--oci-layout", oci, "--key", filepath.Join(keys, "bundle.key"), "--platform", "linux/amd64", "--concurrency", "2")
	if code != exitOK || !strings.HasPrefix(stdout, "wrote "+file+": platform 2.8.0, 42 images, ") || !strings.Contains(stdout, "signed with key sha256:") || strings.Count(stdout, "\n") != 2 || !strings.Contains(stdout, "image signatures: 42 images signed with the bundle's key") {
		t.Fatalf("create: %d %q %q", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "create: ") || !strings.Contains(stderr, "done in") {
		t.Errorf("no progress on stderr: %q", stderr)
	}

	code, stdout, stderr = bundleCLI(t, "inspect", file, "-o", "json")
	var in struct {
		Release string
		Images  []struct{ Name, Reference, Digest string }
		Charts  []struct{ Name string }
		Signed  bool
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &in) != nil || in.Release != "2.8.0" || len(in.Images) != 42 || !in.Signed || len(in.Charts) == 0 || stderr != "" {
		t.Fatalf("inspect -o json: %d %+v %q", code, in, stderr)
	}
	if !strings.HasPrefix(in.Images[0].Reference, "docker.io/library/traefik:v3.6.12@sha256:") {
		t.Errorf("inspect reference %s", in.Images[0].Reference)
	}
	if code, stdout, _ := bundleCLI(t, "inspect", file); code != exitOK || !strings.Contains(stdout, "pipelines-api") || json.Valid([]byte(stdout)) {
		t.Errorf("inspect table: %d %s", code, stdout)
	}
	if code, stdout, _ := bundleCLI(t, "inspect", file, "-o", "yaml"); code != exitOK || !strings.Contains(stdout, "release: 2.8.0") {
		t.Errorf("inspect -o yaml: %d %s", code, stdout)
	}

	code, stdout, stderr = bundleCLI(t, "verify", file, "--public-key", filepath.Join(keys, "bundle.pub"))
	if code != exitOK || !strings.Contains(stdout, "signature verified: sha256:") || !strings.Contains(stdout, "from --public-key") || !strings.Contains(stderr, "verify: ") {
		t.Errorf("verify: %d %q %q", code, stdout, stderr)
	}
	// A key that is not trusted (none given; another one): exit 2 with
	// the fixes; --allow-unsigned accepts it, warns and says so.
	other := filepath.Join(dir, "other")
	bundleCLI(t, "keygen", "--out", other)
	for _, extra := range [][]string{nil, {"--public-key", filepath.Join(other, "bundle.pub")}} {
		code, stdout, stderr := bundleCLI(t, append([]string{"verify", file}, extra...)...)
		if code != exitInput || stdout != "" || !strings.Contains(stderr, "which is not trusted") || !strings.Contains(stderr, "--allow-unsigned") {
			t.Errorf("verify with %v: %d %q %q", extra, code, stdout, stderr)
		}
	}
	code, stdout, stderr = bundleCLI(t, "verify", file, "--allow-unsigned", "-o", "json")
	var vr struct {
		Signed, SignatureVerified bool
		Unverified                string
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &vr) != nil || !vr.Signed || vr.SignatureVerified || !strings.Contains(vr.Unverified, "not trusted") ||
		!strings.Contains(stderr, "without a trusted signature") {
		t.Errorf("verify --allow-unsigned -o json: %d %s %s", code, stdout, stderr)
	}

	// The SBOMs the bundle carries, once it is verified.
	pub := filepath.Join(keys, "bundle.pub")
	code, stdout, stderr = cli(t, dir, "sbom", "--bundle", file, "--public-key", pub)
	if code != exitOK || !strings.Contains(stdout, "USED BY") || !strings.Contains(stdout, "pipelines-api") || strings.Count(stdout, "\n") != 43 {
		t.Errorf("sbom: %d %q %q", code, stdout, stderr)
	}
	code, stdout, _ = cli(t, dir, "sbom", "--bundle", file, "--public-key", pub, "-o", "spdx-json", "--image", "redis")
	var spdxDoc struct {
		SPDXVersion string
		Packages    []struct{ Name, PrimaryPackagePurpose string }
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &spdxDoc) != nil || spdxDoc.SPDXVersion != "SPDX-2.3" || len(spdxDoc.Packages) < 2 || spdxDoc.Packages[1].Name != "redis" {
		t.Errorf("sbom -o spdx-json: %d %.300s", code, stdout)
	}
	code, stdout, _ = cli(t, dir, "sbom", "--bundle", file, "--public-key", pub, "-o", "cyclonedx-json")
	var bom struct {
		BOMFormat  string
		Components []struct{ Type, Name string }
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &bom) != nil || bom.BOMFormat != "CycloneDX" || len(bom.Components) != 42 || bom.Components[0].Type != "container" {
		t.Errorf("sbom -o cyclonedx-json: %d %.300s", code, stdout)
	}
	for _, args := range [][]string{
		{"sbom", "--bundle", file, "--public-key", pub, "--image", "bogus"},
		{"sbom", "--bundle", file, "-o", "xml"},
		{"sbom"},
	} {
		if code, _, stderr := cli(t, dir, args...); code != exitInput {
			t.Errorf("%v: exit %d %s", args, code, stderr)
		}
	}

	host := testservers.Registry(t, testservers.WithBasicAuth("u", "p"))
	regcred := filepath.Join(dir, "regcred.json")
	os.WriteFile(regcred, []byte(`{"auths":{"`+host+`":{"username":"u","password":"p"}}}`), 0o600)
	code, stdout, stderr = bundleCLI(t, "push", file, "--registry", host+"/onprem", "--docker-config", regcred, "--public-key", filepath.Join(keys, "bundle.pub"), "--concurrency", "8", "--insecure", "-o", "json")
	var sum struct {
		Registry                     string
		BlobsCopied, ManifestsPushed int
		Images                       []struct{ Reference string }
	}
	if code != exitOK || json.Unmarshal([]byte(stdout), &sum) != nil || sum.BlobsCopied == 0 || sum.ManifestsPushed != 42 || sum.Registry != host+"/onprem" {
		t.Fatalf("push: %d %s %s", code, stdout, stderr)
	}
	if !strings.Contains(stderr, "push: ") || !strings.Contains(stderr, "verify: ") {
		t.Errorf("push progress: %q", stderr)
	}
	if !strings.HasPrefix(sum.Images[0].Reference, host+"/onprem/library/traefik:v3.6.12@sha256:") {
		t.Errorf("pushed to %s", sum.Images[0].Reference)
	}
	code, stdout, _ = bundleCLI(t, "push", file, "--registry", host+"/onprem", "--docker-config", regcred, "--public-key", filepath.Join(keys, "bundle.pub"))
	if code != exitOK || !strings.Contains(stdout, "pushed 42 images to "+host+"/onprem") || !strings.Contains(stdout, "0 blobs copied") {
		t.Errorf("second push: %d %s", code, stdout)
	}
	// Refused credentials: exit 1.
	if code, stdout, stderr := bundleCLI(t, "push", file, "--registry", host+"/onprem", "--public-key", filepath.Join(keys, "bundle.pub")); code != exitFailure || stdout != "" || !strings.Contains(stderr, "registry refused credentials for "+host) {
		t.Errorf("push without credentials: %d %q %q", code, stdout, stderr)
	}
}

// TestBundlePushFailureSaysWhatWasCopied pushes to a registry that takes
// blobs but refuses manifests: exit 1, and stderr says that running the
// push again copies the rest.
func TestBundlePushFailureSaysWhatWasCopied(t *testing.T) {
	file := filepath.Join(t.TempDir(), "p.bundle")
	if code, _, stderr := bundleCLI(t, "create", "--version", "2.8.0", "-o", file, "--oci-layout", bundleLayout(t), "--unsigned"); code != exitOK {
		t.Fatalf("create: %d %s", code, stderr)
	}
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/") {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"errors":[{"code":"MANIFEST_INVALID","message":"refused by the test"}]}`)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	code, stdout, stderr := bundleCLI(t, "push", file, "--registry", host+"/onprem", "--allow-unsigned")
	if code != exitFailure || stdout != "" || !strings.Contains(stderr, "blobs were copied before the failure; run the same push again") || !strings.Contains(stderr, "refused by the test") {
		t.Errorf("push: %d %q %q", code, stdout, stderr)
	}
}

func TestBundleCommandErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "p.bundle")
	// A signing key where create finds it by itself.
	keys := t.TempDir()
	t.Setenv("ONPREM_KEY_DIR", keys)
	if code, _, stderr := bundleCLI(t, "keygen"); code != exitOK {
		t.Fatalf("keygen: %s", stderr)
	}

	// A missing image: named, exit 1, no file left.
	code, stdout, stderr := bundleCLI(t, "create", "--version", "2.8.0", "-o", file, "--oci-layout", bundleLayout(t, "redis"))
	if code != exitFailure || stdout != "" || !strings.Contains(stderr, "image redis (docker.io/library/redis:7.2.7)") {
		t.Errorf("missing image: %d %s", code, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("left behind: %v", entries)
	}

	// Bad flags and arguments: exit 2, the flag named on stderr, nothing
	// on stdout.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "--version", "9.9.9", "-o", file}, "9.9.9"},
		{[]string{"create", "-o", file}, "--version"},
		{[]string{"create", "--version", "2.8.0"}, "-o FILE"},
		{[]string{"create", "-c", filepath.Join(dir, "none.yaml"), "-o", file}, "none.yaml"},
		{[]string{"create", "--version", "2.8.0", "-o", file, "--image-source", "nope"}, "NAME=PATH"},
		{[]string{"create", "--version", "2.8.0", "-o", file, "--image-source", "bogus=/tmp"}, `no image "bogus"`},
		{[]string{"create", "--version", "2.8.0", "-o", file, "--oci-layout", dir}, "--oci-layout"},
		{[]string{"create", "--version", "2.8.0", "-o", file, "--docker-config", "/nonexistent.json"}, "--docker-config"},
		{[]string{"create", "--version", "2.8.0", "-o", file, "--key", "/nonexistent.key"}, "nonexistent.key"},
		{[]string{"create", "--version", "2.8.0", "-o", file, "--platform", "a/b/c/d"}, "--platform"},
		{[]string{"create", "--version", "2.8.0", "-o", file, "extra"}, "unknown command"},
		{[]string{"inspect"}, "accepts 1 arg"},
		{[]string{"inspect", "/nonexistent.bundle"}, "no such file"},
		{[]string{"inspect", dir}, "is a folder"},
		{[]string{"inspect", file, "-o", "xml"}, "-o xml"},
		{[]string{"verify", "/nonexistent.bundle"}, "no such file"},
		{[]string{"verify", file, "--public-key", "/nonexistent.pub"}, "nonexistent.pub"},
		{[]string{"verify", file, "-o", "xml"}, "-o xml"},
		{[]string{"push", file}, "--registry"},
		{[]string{"push", "/nonexistent.bundle", "--registry", "reg.local/x"}, "no such file"},
		{[]string{"push", file, "--registry", "reg.local/UPPER"}, "not valid"},
		{[]string{"push", file, "--registry", "reg.local", "--concurrency", "0"}, "--concurrency"},
		{[]string{"push", file, "--registry", "reg.local", "-o", "xml"}, "-o xml"},
		{[]string{"push", file, "--registry", "reg.local", "--bogus-flag"}, "bogus-flag"},
		{[]string{"keygen"}, "--force"},
		{[]string{"create", "--version", "2.8.0", "-o", file, "--unsigned", "--key", filepath.Join(keys, "bundle.key")}, "give one"},
		{[]string{"keygen", "--out", dir, "extra"}, "unknown command"},
	} {
		// The bundle file exists for the checks that come after it.
		if c.args[0] != "create" {
			os.WriteFile(file, []byte("not a bundle"), 0o644)
		} else {
			os.Remove(file)
		}
		code, stdout, stderr := bundleCLI(t, c.args...)
		if code != exitInput || !strings.Contains(stderr, c.want) || stdout != "" {
			t.Errorf("%v: exit %d, stderr %q; want 2 mentioning %q", c.args, code, stderr, c.want)
		}
	}

	// A file that is not a bundle: exit 1, with the reason.
	os.WriteFile(file, []byte("not a bundle"), 0o644)
	for _, verb := range []string{"verify", "inspect"} {
		if code, stdout, stderr := bundleCLI(t, verb, file); code != exitFailure || stdout != "" || !strings.Contains(stderr, "not valid") {
			t.Errorf("%s of a file that is not a bundle: %d %q", verb, code, stderr)
		}
	}
}

// Signed by default: create without a key is refused with the command that
// makes one, and every command that takes a bundle refuses an unsigned one
// with exit 2 and the fix, before it connects to anything; --allow-unsigned
// lets it through with a warning.
func TestUnsignedBundlesAreRefused(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("ONPREM_KEY_DIR", filepath.Join(dir, "no-keys"))
	oci := bundleLayout(t)
	file := filepath.Join(dir, "platform.bundle")
	code, stdout, stderr := bundleCLI(t, "create", "--version", "2.8.0", "-o", file, "--oci-layout", oci)
	if code != exitInput || stdout != "" || !strings.Contains(stderr, "onprem bundle keygen") || !strings.Contains(stderr, filepath.Join(dir, "no-keys", "bundle.key")) {
		t.Fatalf("create without a key: %d %q %q", code, stdout, stderr)
	}
	if _, err := os.Stat(file); err == nil {
		t.Fatal("a refused create wrote the bundle")
	}
	if code, stdout, stderr = bundleCLI(t, "create", "--version", "2.8.0", "-o", file, "--oci-layout", oci, "--unsigned"); code != exitOK || !strings.Contains(stdout, "unsigned") {
		t.Fatalf("create --unsigned: %d %q %q", code, stdout, stderr)
	}

	cfg := filepath.Join(dir, "onprem.yaml")
	os.WriteFile(cfg, []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n  registry: {host: registry.internal:5000, pathPrefix: onprem}\n"), 0o644)
	recipient, identity := backupKeys(t, dir)
	backup := writeBackup(t, t.TempDir(), recipient)
	none := filepath.Join(dir, "no-kubeconfig")
	for _, args := range [][]string{
		{"bundle", "verify", file},
		{"bundle", "push", file, "--registry", "registry.internal:5000/onprem"},
		{"install", "-c", cfg, "--bundle", file, "--kubeconfig", none},
		{"upgrade", "apply", "-c", cfg, "--bundle", file, "--kubeconfig", none},
		{"restore", "--from", backup, "--identity", identity, "--bundle", file, "--kubeconfig", none},
		{"render", "-c", cfg, "--bundle", file},
		{"sbom", "--bundle", file},
	} {
		code, stdout, stderr := cli(t, dir, args...)
		if code != exitInput || stdout != "" || !strings.Contains(stderr, "the bundle is not signed") || !strings.Contains(stderr, "--allow-unsigned") {
			t.Errorf("%v: exit %d, %q; want 2 saying it is not signed and how to go on", args, code, stderr)
		}
	}
	code, stdout, stderr = cli(t, dir, "render", "-c", cfg, "--bundle", file, "--allow-unsigned")
	if code != exitOK || !strings.Contains(stdout, "kind: Deployment") || !strings.Contains(stderr, "without a trusted signature") {
		t.Errorf("render --allow-unsigned: exit %d, stderr %q", code, stderr)
	}
}

// backupKeys makes a backup key pair in dir and returns its recipient and
// identity files.
func backupKeys(t *testing.T, dir string) (recipient, identity string) {
	t.Helper()
	code, stdout, stderr := cli(t, dir, "backup", "keygen", "--out", "backup-keys", "-o", "json")
	var kg backupfile.KeygenResult
	if code != exitOK || json.Unmarshal([]byte(stdout), &kg) != nil {
		t.Fatalf("backup keygen: %d %s %s", code, stdout, stderr)
	}
	return kg.RecipientFile, kg.IdentityFile
}
