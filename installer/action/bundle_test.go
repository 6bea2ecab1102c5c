package action

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"onprem.dev/onprem/installer/chartfetch"
	"onprem.dev/onprem/installer/gitops/gitopstest"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/bundle"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

// bundleRelease280 is the embedded release 2.8.0 (24 images, no digests pinned).
func bundleRelease280(t testing.TB) *release.Release {
	t.Helper()
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := set.Get("2.8.0")
	if err != nil {
		t.Fatal(err)
	}
	// A bundle carries what the charts render: the release's images and
	// the ones the runtime chart (the test fixture) runs by itself.
	refs, err := render.ReleaseImages(context.Background(), render.ImageOptions{Release: rel, RuntimeChart: gitopstest.Chart(t, rel.Runtime.ChartVersion)})
	if err != nil {
		t.Fatal(err)
	}
	carried := *rel
	if carried.Images, err = bundle.CarriedImages(rel, refs, config.DefaultPlatformImages); err != nil {
		t.Fatal(err)
	}
	if len(carried.Images) <= len(rel.Images) {
		t.Fatalf("the runtime chart renders no image of its own: %v", refs)
	}
	return &carried
}

// bundleTestImage is a small linux/amd64 image of a release image: a base layer
// shared by all, and one of its own (seed makes another variant).
func bundleTestImage(t testing.TB, i int, imgName, seed string) v1.Image {
	t.Helper()
	base := static.NewLayer(bytes.Repeat([]byte("base layer "), 4096), types.DockerLayer)
	own := static.NewLayer([]byte(strings.Repeat(imgName+seed, 100+i)), types.DockerLayer)
	im, err := mutate.AppendLayers(empty.Image, base, own)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := im.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if im, err = mutate.ConfigFile(im, cf); err != nil {
		t.Fatal(err)
	}
	return im
}

// bundleLayout writes an OCI layout holding every image of rel (platform
// images under platformImages), annotated with its source reference,
// leaving out the images named in skip. It returns the folder and the
// images by name.
func bundleLayout(t testing.TB, rel *release.Release, platformImages string, skip ...string) (string, map[string]v1.Image) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "oci")
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]v1.Image{}
	for i, img := range rel.Images {
		if slices.Contains(skip, img.Name) {
			continue
		}
		im := bundleTestImage(t, i, img.Name, "")
		ref := images.Repository(img, platformImages) + ":" + img.Tag
		if err := lp.AppendImage(im, layout.WithAnnotations(map[string]string{"io.containerd.image.name": ref}),
			layout.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"})); err != nil {
			t.Fatal(err)
		}
		byName[img.Name] = im
	}
	return dir, byName
}

func bundleKeys(t testing.TB) *bundle.KeygenResult {
	t.Helper()
	res, err := (&BundleKeygen{Dir: filepath.Join(t.TempDir(), "keys")}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// bundleDockerConfig writes a docker config.json with a user and password for
// host.
func bundleDockerConfig(t testing.TB, host, user, password string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	if err := os.WriteFile(p, fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, host, auth), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// bundleProgress records progress reports.
type bundleProgress struct {
	mu  sync.Mutex
	ops map[string]bundle.Progress // the last report of each op
}

func (l *bundleProgress) fn() bundle.ProgressFunc {
	return func(p bundle.Progress) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.ops == nil {
			l.ops = map[string]bundle.Progress{}
		}
		l.ops[p.Op] = p
	}
}

func (l *bundleProgress) final(op string) (bundle.Progress, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.ops[op]
	return p, ok && p.Final
}

func TestBundleBadInputIsAnInputErrorAndWritesNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	out := filepath.Join(dir, "out", "p.bundle")
	if err := os.Mkdir(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	keys := bundleKeys(t)
	noKeys := t.TempDir()
	t.Setenv("ONPREM_KEY_DIR", noKeys)
	notLayout := t.TempDir()
	garbage := filepath.Join(dir, "garbage")
	os.WriteFile(garbage, []byte("not a key, not JSON"), 0o644)
	missingConfig := filepath.Join(dir, "none.yaml")
	create := func(mod func(c *BundleCreate)) func() error {
		return func() error {
			c := &BundleCreate{RuntimeChartRepository: runtimeMirror(t), RuntimeChart: chartfetch.Options{PlainHTTP: true}, Source: Source{Lookup: noEnv}, Version: "2.8.0", Output: out, KeyPath: keys.PrivateKey}
			mod(c)
			_, err := c.Run(ctx)
			return err
		}
	}
	push := func(mod func(p *BundlePush)) func() error {
		return func() error {
			p := NewBundlePush()
			p.Path, p.Registry = garbage, "reg.local/x"
			mod(p)
			_, err := p.Run(ctx)
			return err
		}
	}
	for _, c := range []struct {
		name string
		run  func() error
		want string
	}{
		{"no output", create(func(c *BundleCreate) { c.Output = "" }), "-o FILE"},
		{"no version", create(func(c *BundleCreate) { c.Version = "" }), "--version X or -c onprem.yaml"},
		{"bad platform", create(func(c *BundleCreate) { c.Platform = "a/b/c/d" }), `--platform "a/b/c/d"`},
		{"missing config", create(func(c *BundleCreate) { c.ConfigPath = missingConfig }), "none.yaml"},
		{"image source without =", create(func(c *BundleCreate) { c.ImageSources = []string{"nope"} }), "use NAME=PATH"},
		{"image source without path", create(func(c *BundleCreate) { c.ImageSources = []string{"redis="} }), "use NAME=PATH"},
		{"image source of no image", create(func(c *BundleCreate) { c.ImageSources = []string{"bogus=" + dir} }), `release 2.8.0 has no image "bogus"`},
		{"image source missing", create(func(c *BundleCreate) { c.ImageSources = []string{"redis=" + filepath.Join(dir, "redis.tar")} }), "redis.tar"},
		{"not an OCI layout", create(func(c *BundleCreate) { c.OCILayout = notLayout }), "not an OCI layout"},
		{"missing docker config", create(func(c *BundleCreate) { c.DockerConfig = filepath.Join(dir, "config.json") }), "--docker-config"},
		{"bad docker config", create(func(c *BundleCreate) { c.DockerConfig = garbage }), "--docker-config " + garbage},
		{"missing key", create(func(c *BundleCreate) { c.KeyPath = filepath.Join(dir, "bundle.key") }), "bundle.key"},
		{"public key to sign", create(func(c *BundleCreate) { c.KeyPath = keys.PublicKey }), keys.PublicKey},
		// Signed by default: no key given and none made is refused, with
		// the command that makes one.
		{"no key anywhere", create(func(c *BundleCreate) { c.KeyPath = "" }), "make one with 'onprem bundle keygen' (it writes " + filepath.Join(noKeys, "bundle.key")},
		{"key and unsigned", create(func(c *BundleCreate) { c.Unsigned = true }), "--key and --unsigned"},
		{"source public key not a key", create(func(c *BundleCreate) { c.SourcePublicKeys = []string{garbage} }), "--source-public-key: " + garbage},

		{"inspect no file", func() error { _, err := (&BundleInspect{}).Run(ctx); return err }, "no bundle file"},
		{"inspect missing", func() error { _, err := (&BundleInspect{Path: out}).Run(ctx); return err }, "no such file"},
		{"inspect folder", func() error { _, err := (&BundleInspect{Path: dir}).Run(ctx); return err }, "is a folder"},
		{"verify missing", func() error { _, err := (&BundleVerify{Path: out}).Run(ctx); return err }, "no such file"},
		{"verify bad public key", func() error {
			_, err := (&BundleVerify{Path: garbage, PublicKeyPaths: []string{keys.PrivateKey}}).Run(ctx)
			return err
		}, keys.PrivateKey},

		{"push no registry", push(func(p *BundlePush) { p.Registry = "" }), "--registry HOST[/PREFIX] is required"},
		{"push registry path", push(func(p *BundlePush) { p.Registry = "reg.local/UPPER" }), "the path is not valid"},
		{"push zero concurrency", push(func(p *BundlePush) { p.Concurrency = 0 }), "--concurrency 0"},
		{"push zero value", func() error { _, err := (&BundlePush{Path: garbage, Registry: "reg.local"}).Run(ctx); return err }, "at least 1"},
		{"push missing", push(func(p *BundlePush) { p.Path = out }), "no such file"},
		{"push bad docker config", push(func(p *BundlePush) { p.DockerConfig = garbage }), "--docker-config"},
		{"push missing public key", push(func(p *BundlePush) { p.PublicKeyPaths = []string{filepath.Join(dir, "bundle.pub")} }), "bundle.pub"},

		{"keygen over a key", func() error { _, err := (&BundleKeygen{Dir: filepath.Dir(keys.PrivateKey)}).Run(ctx); return err }, "--force"},
	} {
		err := c.run()
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v; want an *InputError mentioning %q", c.name, err, c.want)
		}
	}
	if entries, _ := os.ReadDir(filepath.Dir(out)); len(entries) != 0 {
		t.Errorf("bad input left files: %v", entries)
	}

	// Errors of their own types (the CLI exits 2 for them too): an unknown
	// version, an invalid configuration. A file that is not a bundle is no
	// input error (exit 1).
	var uv *release.UnknownVersionError
	if err := create(func(c *BundleCreate) { c.Version = "9.9.9" })(); !errors.As(err, &uv) {
		t.Errorf("unknown version: %v", err)
	}
	var ce config.Errors
	bad := writeConfig(t, "  version: 2.8.0\n  domain: x.example.com\n  profile: enormous\n")
	if err := create(func(c *BundleCreate) { c.ConfigPath = bad })(); !errors.As(err, &ce) {
		t.Errorf("invalid configuration: %v", err)
	}
	_, err := (&BundleVerify{Path: garbage}).Run(ctx)
	var ie *InputError
	var corrupt *bundle.CorruptError
	if errors.As(err, &ie) || !errors.As(err, &corrupt) {
		t.Errorf("a file that is not a bundle: %v; want a *bundle.CorruptError", err)
	}
}

func TestBundleCreateVerifyInspectPush(t *testing.T) {
	ctx := context.Background()
	rel := bundleRelease280(t)
	// The key is made once, where create finds it by itself.
	t.Setenv("ONPREM_KEY_DIR", filepath.Join(t.TempDir(), "keys"))
	keys, err := (&BundleKeygen{}).Run(ctx)
	if err != nil || filepath.Dir(keys.PrivateKey) != os.Getenv("ONPREM_KEY_DIR") {
		t.Fatalf("keygen into the default folder: %+v %v", keys, err)
	}
	oci, imgs := bundleLayout(t, rel, config.DefaultPlatformImages)
	file := filepath.Join(t.TempDir(), "platform.bundle")

	var prog bundleProgress
	res, err := (&BundleCreate{RuntimeChartRepository: runtimeMirror(t), RuntimeChart: chartfetch.Options{PlainHTTP: true}, Version: "2.8.0", Output: file, OCILayout: oci, Progress: prog.fn()}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Path != file || res.Release != "2.8.0" || res.Images != len(rel.Images) || !res.Signed || res.KeyID != keys.KeyID {
		t.Errorf("create: %+v", res)
	}
	// One shared base layer, and an own layer and a config per image.
	if res.Blobs != 1+3*len(rel.Images) {
		t.Errorf("create: %d blobs, want %d (manifests, configs, layers; the base once)", res.Blobs, 1+3*len(rel.Images))
	}
	if p, ok := prog.final("create"); !ok || p.Done == 0 || p.Done != p.Total {
		t.Errorf("create progress: %+v", p)
	}

	vres, err := (&BundleVerify{Path: file, PublicKeyPaths: []string{keys.PublicKey}, Progress: prog.fn()}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !vres.SignatureVerified || vres.KeyID != keys.KeyID || vres.Release != "2.8.0" || vres.Files == 0 ||
		!strings.Contains(vres.TrustedBy, "--public-key "+keys.PublicKey) {
		t.Errorf("verify: %+v", vres)
	}
	if p, ok := prog.final("verify"); !ok || p.Done == 0 {
		t.Errorf("verify progress: %+v", p)
	}
	// Not trusted: only the releases' own key, or another key. An input
	// error (exit 2) naming the fixes; --allow-unsigned accepts it and says
	// so.
	other := bundleKeys(t)
	for _, paths := range [][]string{nil, {other.PublicKey}} {
		_, err := (&BundleVerify{Path: file, PublicKeyPaths: paths}).Run(ctx)
		var ue *bundle.UntrustedKeyError
		var ie *InputError
		if !errors.As(err, &ue) || ue.KeyID != keys.KeyID || !errors.As(err, &ie) || !strings.Contains(err.Error(), "onprem releases") {
			t.Errorf("verify trusting %v: %v", paths, err)
		}
	}
	vres, err = (&BundleVerify{Path: file, AllowUnsigned: true}).Run(ctx)
	if err != nil || vres.SignatureVerified || !strings.Contains(vres.Unverified, "not trusted") {
		t.Errorf("verify allowing unsigned: %+v %v", vres, err)
	}

	in, err := (&BundleInspect{Path: file}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if in.Release != "2.8.0" || len(in.Images) != len(rel.Images) || !in.Signed || in.Verified || len(in.Charts) == 0 {
		t.Errorf("inspect: release %s, %d images, signed %v, verified %v, %d charts", in.Release, len(in.Images), in.Signed, in.Verified, len(in.Charts))
	}
	for _, ii := range in.Images {
		want, _ := imgs[ii.Name].Digest()
		if ii.Digest != want.String() {
			t.Errorf("inspect: %s pinned to %s, the layout holds %s", ii.Name, ii.Digest, want)
		}
	}

	host := testservers.Registry(t, testservers.WithBasicAuth("pusher", "s3cret"))
	// Push refuses what it does not trust, before copying anything.
	push := NewBundlePush()
	push.Path, push.Registry = file, host+"/onprem"
	push.DockerConfig = bundleDockerConfig(t, host, "pusher", "s3cret")
	if _, err := push.Run(ctx); !errors.As(err, new(*bundle.UntrustedKeyError)) {
		t.Fatalf("push of an untrusted bundle: %v", err)
	}
	push.PublicKeyPaths = []string{keys.PublicKey}
	push.Progress = prog.fn()
	sum, err := push.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Registry != host+"/onprem" || len(sum.Images) != len(rel.Images) || sum.ManifestsPushed != len(rel.Images) || sum.BlobsCopied != 1+2*len(rel.Images) {
		t.Errorf("push: registry %s, %d images, %d manifests, %d blobs copied", sum.Registry, len(sum.Images), sum.ManifestsPushed, sum.BlobsCopied)
	}
	if p, ok := prog.final("push"); !ok || p.Done != p.Total {
		t.Errorf("push progress: %+v", p)
	}
	// Every image is where the installation pulls it.
	auth := remote.WithAuth(&authn.Basic{Username: "pusher", Password: "s3cret"})
	for _, img := range rel.Images {
		repo, err := images.Relocate(images.Repository(img, config.DefaultPlatformImages), host, "onprem")
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Image(bundleTag(t, repo+":"+img.Tag), auth)
		if err != nil {
			t.Fatalf("pulling %s: %v", img.Name, err)
		}
		d, _ := got.Digest()
		want, _ := imgs[img.Name].Digest()
		if d != want {
			t.Errorf("%s:%s is %s, want %s", repo, img.Tag, d, want)
		}
	}

	// Again: nothing to copy.
	push.Progress = nil
	sum, err = push.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.BlobsCopied != 0 || sum.BytesCopied != 0 || sum.ManifestsPushed != 0 || sum.ManifestsSkipped != len(rel.Images) {
		t.Errorf("second push: %+v", sum)
	}

	// Refused credentials stop the push; that is not an input error.
	push.DockerConfig = bundleDockerConfig(t, host, "pusher", "wrong")
	var ae *bundle.AuthError
	var ie *InputError
	if _, err := push.Run(ctx); !errors.As(err, &ae) || errors.As(err, &ie) {
		t.Errorf("wrong password: %v; want a *bundle.AuthError", err)
	}
}

func bundleTag(t testing.TB, s string) name.Tag {
	t.Helper()
	tag, err := name.NewTag(s)
	if err != nil {
		t.Fatal(err)
	}
	return tag
}

func TestBundleCreateTakesTheReleaseFromTheConfiguration(t *testing.T) {
	ctx := context.Background()
	rel := bundleRelease280(t)
	// Platform images published under a mirror of their own: only found
	// when spec.images.platform is read.
	mirror := "mirror.example.com/platform"
	oci, _ := bundleLayout(t, rel, mirror)
	path := writeConfig(t, "  version: 2.7.1\n  domain: ci.example.com\n  images:\n    platform: "+mirror+"\n")
	file := filepath.Join(t.TempDir(), "p.bundle")

	// spec.version is 2.7.1: its images are not in the layout.
	var ie *bundle.ImageError
	_, err := (&BundleCreate{RuntimeChartRepository: runtimeMirror(t), RuntimeChart: chartfetch.Options{PlainHTTP: true}, Source: Source{ConfigPath: path, Lookup: noEnv}, Output: file, OCILayout: oci, Unsigned: true}).Run(ctx)
	if !errors.As(err, &ie) || !errors.Is(err, bundle.ErrImageNotFound) {
		t.Fatalf("2.7.1 from a 2.8.0 layout: %v", err)
	}
	if _, err := os.Stat(file); err == nil {
		t.Fatal("a bundle was written for a failed create")
	}

	// Version overrides spec.version; spec.images.platform still counts.
	res, err := (&BundleCreate{RuntimeChartRepository: runtimeMirror(t), RuntimeChart: chartfetch.Options{PlainHTTP: true}, Source: Source{ConfigPath: path, Lookup: noEnv}, Version: "2.8.0", Output: file, OCILayout: oci, Unsigned: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in, err := (&BundleInspect{Path: file}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Release != "2.8.0" || in.PlatformImages != mirror {
		t.Errorf("release %s, platform images %q", res.Release, in.PlatformImages)
	}
}

func TestBundleCreateImageSources(t *testing.T) {
	ctx := context.Background()
	rel := bundleRelease280(t)
	// The layout lacks redis and traefik: they come from an archive and a
	// layout of their own, each a variant that differs from the default.
	oci, _ := bundleLayout(t, rel, config.DefaultPlatformImages, "redis", "traefik")
	dir := t.TempDir()
	redisImg, traefikImg := bundleTestImage(t, 1, "redis", "archive"), bundleTestImage(t, 2, "traefik", "own layout")
	redis, _ := rel.Image("redis")
	archive := filepath.Join(dir, "redis.tar")
	if err := tarball.WriteToFile(archive, bundleTag(t, images.Repository(redis, "")+":"+redis.Tag), redisImg); err != nil {
		t.Fatal(err)
	}
	// What the archive holds (its layers are compressed when read back).
	redisImg, err := tarball.ImageFromPath(archive, nil)
	if err != nil {
		t.Fatal(err)
	}
	traefik, _ := rel.Image("traefik")
	tdir := filepath.Join(dir, "traefik")
	lp, err := layout.Write(tdir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(traefikImg, layout.WithAnnotations(map[string]string{"io.containerd.image.name": images.Repository(traefik, "") + ":" + traefik.Tag})); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "p.bundle")
	c := &BundleCreate{RuntimeChartRepository: runtimeMirror(t), RuntimeChart: chartfetch.Options{PlainHTTP: true}, Version: "2.8.0", Output: file, OCILayout: oci, Unsigned: true}
	var ie *bundle.ImageError
	if _, err := c.Run(ctx); !errors.As(err, &ie) || ie.Name != "redis" && ie.Name != "traefik" {
		t.Fatalf("without the image sources: %v", err)
	}
	c.ImageSources = []string{"redis=" + archive, "traefik=" + tdir}
	if _, err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	in, err := (&BundleInspect{Path: file}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ii := range in.Images {
		var want v1.Image
		switch ii.Name {
		case "redis":
			want = redisImg
		case "traefik":
			want = traefikImg
		default:
			continue
		}
		d, _ := want.Digest()
		if ii.Digest != d.String() {
			t.Errorf("%s: %s, want %s from its image source", ii.Name, ii.Digest, d)
		}
	}
}

// TestBundleCreateFromRegistriesWithDockerConfig reads every image from a
// registry that requires a password, given in a docker config.
func TestBundleCreateFromRegistriesWithDockerConfig(t *testing.T) {
	ctx := context.Background()
	host := testservers.Registry(t, testservers.WithBasicAuth("reader", "s3cret"))
	// Release 2.8.0 with every image in the loopback registry.
	rel := *bundleRelease280(t)
	rel.Images = slices.Clone(rel.Images)
	auth := remote.WithAuth(&authn.Basic{Username: "reader", Password: "s3cret"})
	want := map[string]string{}
	for i := range rel.Images {
		img := &rel.Images[i]
		repo, err := images.Relocate(images.Repository(*img, config.DefaultPlatformImages), host, "src")
		if err != nil {
			t.Fatal(err)
		}
		img.Repository, img.Platform = repo, false
		im := bundleTestImage(t, i, img.Name, "remote")
		if err := remote.Write(bundleTag(t, repo+":"+img.Tag), im, auth); err != nil {
			t.Fatal(err)
		}
		d, _ := im.Digest()
		want[img.Name] = d.String()
	}
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "p.bundle")
	c := &BundleCreate{RuntimeChartRepository: runtimeMirror(t), RuntimeChart: chartfetch.Options{PlainHTTP: true}, Source: Source{Releases: set.With(&rel)}, Version: "2.8.0", Output: file, Insecure: true, Unsigned: true,
		DockerConfig: bundleDockerConfig(t, host, "reader", "wrong")}
	var ae *bundle.AuthError
	if _, err := c.Run(ctx); !errors.As(err, &ae) {
		t.Fatalf("wrong password: %v; want a *bundle.AuthError", err)
	}
	c.DockerConfig = bundleDockerConfig(t, host, "reader", "s3cret")
	if _, err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
	in, err := (&BundleInspect{Path: file}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ii := range in.Images {
		if ii.Digest != want[ii.Name] {
			t.Errorf("%s: %s, want %s", ii.Name, ii.Digest, want[ii.Name])
		}
	}
}

// TestBundlePushToDistribution pushes to the CNCF distribution registry,
// which keeps blobs per repository: a layer shared by images is uploaded
// once and mounted into the other repositories.
func TestBundlePushToDistribution(t *testing.T) {
	ctx := context.Background()
	rel := bundleRelease280(t)
	oci, imgs := bundleLayout(t, rel, config.DefaultPlatformImages)
	file := filepath.Join(t.TempDir(), "p.bundle")
	keys := bundleKeys(t)
	if _, err := (&BundleCreate{RuntimeChartRepository: runtimeMirror(t), RuntimeChart: chartfetch.Options{PlainHTTP: true}, Version: "2.8.0", Output: file, OCILayout: oci, KeyPath: keys.PrivateKey}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	host := testservers.Distribution(t)

	// Which repositories need which blobs (configs and layers).
	repos := map[v1.Hash]map[string]bool{}
	pairs := 0
	for _, img := range rel.Images {
		repo, err := images.Relocate(images.Repository(img, config.DefaultPlatformImages), host, "onprem")
		if err != nil {
			t.Fatal(err)
		}
		m, err := imgs[img.Name].Manifest()
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
			if repos[d.Digest] == nil {
				repos[d.Digest] = map[string]bool{}
			}
			if !repos[d.Digest][repo] {
				repos[d.Digest][repo] = true
				pairs++
			}
		}
	}

	push := NewBundlePush()
	push.Path, push.Registry, push.PublicKeyPaths = file, host+"/onprem", []string{keys.PublicKey}
	sum, err := push.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.BlobsCopied != len(repos) || sum.BlobsMounted != pairs-len(repos) || sum.BlobsSkipped != 0 || sum.ManifestsPushed != len(rel.Images) {
		t.Errorf("push: %d copied, %d mounted, %d skipped, %d manifests; want %d copied (each blob once), %d mounted, 0 skipped, %d manifests",
			sum.BlobsCopied, sum.BlobsMounted, sum.BlobsSkipped, sum.ManifestsPushed, len(repos), pairs-len(repos), len(rel.Images))
	}
	for _, pi := range sum.Images {
		ref, err := name.ParseReference(pi.Reference)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Image(ref)
		if err != nil {
			t.Fatalf("pulling %s: %v", pi.Reference, err)
		}
		if _, err := got.Layers(); err != nil {
			t.Fatal(err)
		}
		d, _ := got.Digest()
		if want, _ := imgs[pi.Name].Digest(); d != want {
			t.Errorf("%s: %s, want %s", pi.Reference, d, want)
		}
	}

	sum, err = push.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.BlobsCopied != 0 || sum.BlobsMounted != 0 || sum.BytesCopied != 0 || sum.BlobsSkipped != pairs || sum.ManifestsPushed != 0 || sum.ManifestsSkipped != len(rel.Images) {
		t.Errorf("second push copied something: %+v", sum)
	}
}

// runtimeMirror serves the fixture runtime chart at the versions of the
// shipped releases, as an operator's mirror of the upstream chart
// repository: no test reaches the internet.
func runtimeMirror(t *testing.T) string {
	t.Helper()
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var versions []string
	for _, r := range set.All() {
		if r.Runtime != nil && !seen[r.Runtime.ChartVersion] {
			seen[r.Runtime.ChartVersion] = true
			versions = append(versions, r.Runtime.ChartVersion)
		}
	}
	return gitopstest.ServeOCI(t, versions...)
}
