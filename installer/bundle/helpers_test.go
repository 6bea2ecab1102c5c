package bundle

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/signing"
)

// randomLayer is a layer of n pseudo-random bytes (incompressible, like a
// real compressed layer), the same for the same seed.
func randomLayer(t testing.TB, n int, seed uint64) v1.Layer {
	t.Helper()
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return static.NewLayer(b, types.DockerLayer)
}

// imageOf stacks layers into a linux/amd64 image.
func imageOf(t testing.TB, layers ...v1.Layer) v1.Image {
	t.Helper()
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// fixture is a release whose images live in a loopback source registry.
type fixture struct {
	rel            *release.Release
	platformImages string
	srcHost        string
	// byRef maps each source reference (repository:tag) to its image.
	byRef map[string]v1.Image
	// uniqueBlobs counts the distinct blobs (configs, layers, manifests),
	// totalBlobs the blobs of every image (shared ones again each time).
	uniqueBlobs, totalBlobs int
}

// newFixture takes the newest embedded release, moves its infrastructure
// images to a loopback registry, and builds every image: all share a base
// layer of baseSize bytes, every third one also a middle layer, and each
// has its own layer of ownSize bytes. The release's runtime chart, which
// lives in a remote chart repository, is left out (newRuntimeChart
// serves one on loopback).
func newFixture(t testing.TB, baseSize, ownSize int) *fixture {
	t.Helper()
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel := *set.Latest()
	rel.Runtime = nil
	host := testservers.Registry(t)
	f := &fixture{platformImages: host + "/codefresh", srcHost: host, byRef: map[string]v1.Image{}}
	rel.Images = append([]release.Image(nil), rel.Images...)
	base := randomLayer(t, baseSize, 1)
	mid := randomLayer(t, baseSize/2, 2)
	blobs := map[v1.Hash]bool{}
	for i := range rel.Images {
		img := &rel.Images[i]
		img.Digest = ""
		if !img.Platform {
			r, err := name.NewRepository(img.Repository)
			if err != nil {
				t.Fatal(err)
			}
			img.Repository = host + "/" + r.RepositoryStr()
		}
		layers := []v1.Layer{base}
		if i%3 == 0 {
			layers = append(layers, mid)
		}
		layers = append(layers, randomLayer(t, ownSize, uint64(100+i)))
		im := imageOf(t, layers...)
		ref := images.Repository(*img, f.platformImages) + ":" + img.Tag
		f.byRef[ref] = im
		if err := remote.Write(mustRef(t, ref), im); err != nil {
			t.Fatalf("seeding %s: %v", ref, err)
		}
		for _, h := range blobsOf(t, im) {
			blobs[h] = true
			f.totalBlobs++
		}
	}
	f.rel = &rel
	f.uniqueBlobs = len(blobs)
	return f
}

// blobsOf lists an image's manifest, config and layer digests.
func blobsOf(t testing.TB, img v1.Image) []v1.Hash {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	out := []v1.Hash{d, m.Config.Digest}
	for _, l := range m.Layers {
		out = append(out, l.Digest)
	}
	return out
}

func mustRef(t testing.TB, s string) name.Reference {
	t.Helper()
	r, err := name.ParseReference(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// memorySource serves the fixture's images without a registry.
func (f *fixture) memorySource() Source {
	return SourceFunc(func(_ context.Context, req ImageRequest) (v1.Image, error) {
		img, ok := f.byRef[req.Reference]
		if !ok {
			return nil, ErrImageNotFound
		}
		return img, nil
	})
}

// allowUnsigned opens the unsigned bundles of tests that are not about
// signatures.
var allowUnsigned = Trust{AllowUnsigned: true}

// createBundle writes a bundle of the fixture (from the memory source)
// into a temporary folder and returns its path.
func createBundle(t testing.TB, f *fixture, key []byte) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "platform.bundle")
	opts := CreateOptions{Release: f.rel, Output: out, Source: f.memorySource(), PlatformImages: f.platformImages}
	if key != nil {
		k, err := signing.ParsePrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		opts.SigningKey = k
	}
	if _, err := Create(context.Background(), opts); err != nil {
		t.Fatal(err)
	}
	return out
}

// keyPair returns a new PEM private and public key.
func keyPair(t testing.TB) (priv, pub []byte) {
	t.Helper()
	var a, b strings.Builder
	if _, err := signing.WriteKeyPair(&a, &b); err != nil {
		t.Fatal(err)
	}
	return []byte(a.String()), []byte(b.String())
}

// tarEntries lists a tar file's entries and where their data starts.
func tarEntries(t testing.TB, p string) map[string][2]int64 {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][2]int64{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		off, _ := f.Seek(0, io.SeekCurrent)
		out[h.Name] = [2]int64{off, h.Size}
	}
}

// wrappedRegistry starts go-containerregistry's registry on loopback
// behind wrap (to inject failures) and returns its host.
func wrappedRegistry(t testing.TB, wrap func(http.Handler) http.Handler) string {
	t.Helper()
	h := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewServer(wrap(h))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// noTempFiles fails if dir holds anything but the listed names.
func onlyFiles(t testing.TB, dir string, want ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("folder %s holds %v, want %v", dir, got, want)
	}
}
