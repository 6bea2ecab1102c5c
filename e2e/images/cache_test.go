//go:build linux

package images

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"onprem.dev/onprem/installer/bundle"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/internal/fsutil"
)

// logLines collects Build's progress lines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logLines) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// fileID is what changes when a file is rewritten or replaced.
type fileID struct {
	ino   uint64
	mtime time.Time
	size  int64
}

func idOf(t *testing.T, path string) fileID {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fileID{st.Sys().(*syscall.Stat_t).Ino, st.ModTime(), st.Size()}
}

// A second Build of every image builds nothing: every artifact, stamp
// and build-times.txt stay as they are, the images are the same, and
// each is reported as coming from the cache.
func TestSecondBuildIsServedFromTheCache(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("building the images needs root (debootstrap, chroot); the test machines run as root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	first, err := Build(ctx, Names(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	dir := CacheDir()
	watched := []string{filepath.Join(dir, "build-times.txt"), filepath.Join(dir, "bin", "traefik"),
		filepath.Join(dir, "rootfs", "base-"+DebianSuite+".tar")}
	for _, n := range Names() {
		watched = append(watched, filepath.Join(dir, "oci", n, "index.json"), filepath.Join(dir, "oci", n+".stamp"))
	}
	for _, n := range []string{"postgresql", "redis", "rabbitmq"} {
		watched = append(watched, filepath.Join(dir, "rootfs", n, "rootfs.tar"))
	}
	before := map[string]fileID{}
	for _, p := range watched {
		before[p] = idOf(t, p)
	}

	var log logLines
	t0 := time.Now()
	second, err := Build(ctx, Names(), log.logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("warm Build of %d images: %s", len(second), time.Since(t0).Round(time.Millisecond))
	if b := log.matching("building"); len(b) > 0 {
		t.Errorf("the second Build built something:\n%s", strings.Join(b, "\n"))
	}
	if c := log.matching("from the cache"); len(c) != len(Names()) {
		t.Errorf("%d images reported from the cache, want %d:\n%s", len(c), len(Names()), strings.Join(log.lines, "\n"))
	}
	for _, p := range watched {
		if got := idOf(t, p); got != before[p] {
			t.Errorf("%s changed: %+v -> %+v", p, before[p], got)
		}
	}
	for i := range first {
		d1, _ := first[i].Image.Digest()
		d2, _ := second[i].Image.Digest()
		if d1 != d2 || first[i].Ref != second[i].Ref {
			t.Errorf("%s: %s %s, then %s %s", first[i].Name, first[i].Ref, d1, second[i].Ref, d2)
		}
	}
}

// A warm Build takes no lock: it works while another process holds the
// build lock of that very image.
func TestWarmBuildTakesNoLock(t *testing.T) {
	build(t, "refservice")
	unlock, err := fsutil.Lock(context.Background(), filepath.Join(CacheDir(), "oci", ".lock-refservice"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := Build(ctx, []string{"refservice"}, t.Logf); err != nil {
		t.Fatalf("a warm Build waited for the lock: %v", err)
	}
}

// An image whose inputs changed (its stamp differs) is rebuilt, and the
// rebuild is recorded.
func TestChangedInputsRebuild(t *testing.T) {
	build(t, "refservice")
	stampFile := filepath.Join(CacheDir(), "oci", "refservice.stamp")
	want, err := os.ReadFile(stampFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stampFile, []byte("inputs-of-an-older-version\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var log logLines
	imgs, err := Build(context.Background(), []string{"refservice"}, log.logf)
	if err != nil {
		t.Fatal(err)
	}
	// The rebuild replaced the cached layout, and its blobs differ when
	// the checkout's path does (the binaries keep it: no -trimpath, so
	// that they share the tests' build cache): the other tests read the
	// new image, not the one built(refservice) kept.
	builtMu.Lock()
	built["refservice"] = imgs[0]
	builtMu.Unlock()
	if len(log.matching("building refservice")) != 1 || len(log.matching("built refservice")) != 1 {
		t.Errorf("refservice with another stamp was not rebuilt:\n%s", strings.Join(log.lines, "\n"))
	}
	if got, _ := os.ReadFile(stampFile); string(got) != string(want) {
		t.Errorf("stamp after the rebuild = %q, want %q", got, want)
	}
	cf, err := imgs[0].Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.Labels[LabelStamp]+"\n" != string(want) {
		t.Errorf("label %s = %q, want the stamp %q", LabelStamp, cf.Config.Labels[LabelStamp], want)
	}
	times, _ := os.ReadFile(filepath.Join(CacheDir(), "build-times.txt"))
	lines := strings.Split(strings.TrimSpace(string(times)), "\n")
	if !strings.Contains(lines[len(lines)-1], "image refservice built in") {
		t.Errorf("build-times.txt does not end with the rebuild: %q", lines[len(lines)-1])
	}
}

func TestUnknownImageIsRefusedWithTheKnownNames(t *testing.T) {
	_, err := Build(context.Background(), []string{"redis", "nginx"}, t.Logf)
	if err == nil || !strings.Contains(err.Error(), "unknown image nginx") || !strings.Contains(err.Error(), strings.Join(Names(), ", ")) {
		t.Errorf("err = %v", err)
	}
}

// The archives: the same image under several references is stored once,
// every reference reads back as that image, a second write to the OCI
// layout replaces its entries, and onprem's bundle finds the images there
// by reference (the `onprem bundle create` source contract).
func TestArchivesCarryEveryReference(t *testing.T) {
	ref := build(t, "refservice")
	mongo := build(t, "mongodb")
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := set.Get("2.8.0")
	if err != nil {
		t.Fatal(err)
	}
	imgs, missing := ForRelease(rel, "registry.example.com/onprem", []Image{ref, mongo})
	// The runtime chart's images are not the release's: bundle create
	// finds them in the chart's render.
	wantMissing := []string{"buildkit", "consul", "nats", "onprem", "postgresql", "rabbitmq", "redis", "traefik"}
	if !slices.Equal(missing, wantMissing) {
		t.Errorf("missing = %v, want %v", missing, wantMissing)
	}
	refs := map[string]string{}
	for _, img := range imgs {
		refs[img.Ref] = img.Name
	}
	for r, n := range map[string]string{
		"registry.example.com/onprem/pipelines-api:2.8.0": "refservice",
		"registry.example.com/onprem/argo-hub:2.8.0":      "refservice",
		"docker.io/library/mongo:7.0.16":                  "mongodb",
	} {
		if refs[r] != n {
			t.Errorf("%s is %q, want %s", r, refs[r], n)
		}
	}

	dir := t.TempDir()
	archive := filepath.Join(dir, "images.tar")
	if err := WriteDockerArchive(archive, imgs); err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		tag, err := name.NewTag(img.Ref)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tarball.ImageFromPath(archive, &tag)
		if err != nil {
			t.Fatalf("%s from the archive: %v", img.Ref, err)
		}
		// A docker archive keeps the config and the layers, not the
		// manifest (the reader writes a Docker v2 one), so the image is
		// the same when its config is.
		sameConfig(t, img, got)
	}
	// One copy of each image's layers, however many tags.
	manifest := archiveManifest(t, archive)
	if len(manifest) != 2 {
		t.Errorf("the archive holds %d images, want 2 (refservice once, mongodb once)", len(manifest))
	}
	tags := 0
	for _, m := range manifest {
		tags += len(m.RepoTags)
	}
	if tags != len(imgs) {
		t.Errorf("the archive has %d tags, want %d", tags, len(imgs))
	}

	oci := filepath.Join(dir, "oci")
	for range 2 {
		if err := WriteOCILayout(oci, imgs); err != nil {
			t.Fatal(err)
		}
	}
	lp, err := layout.FromPath(oci)
	if err != nil {
		t.Fatal(err)
	}
	ii, _ := lp.ImageIndex()
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(imgs) {
		t.Errorf("the layout has %d entries after two writes, want %d", len(im.Manifests), len(imgs))
	}
	src := bundle.LayoutSource(oci, nil)
	for _, img := range imgs {
		got, err := src.Image(context.Background(), bundle.ImageRequest{Name: img.Name, Reference: img.Ref})
		if err != nil {
			t.Fatalf("the bundle's layout source: %v", err)
		}
		sameDigest(t, img, got.Digest)
	}
	if err := WriteDockerArchive(filepath.Join(dir, "bad.tar"), []Image{{Name: "x", Ref: "not a reference", Image: ref.Image}}); err == nil {
		t.Error("a bad reference was accepted")
	}
}

func sameDigest(t *testing.T, want Image, got func() (v1.Hash, error)) {
	t.Helper()
	d1, err := want.Image.Digest()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := got()
	if err != nil {
		t.Fatal(err)
	}
	if d1.String() != d2.String() {
		t.Errorf("%s: digest %s, want %s", want.Ref, d2, d1)
	}
}

func sameConfig(t *testing.T, want Image, got v1.Image) {
	t.Helper()
	c1, err := want.Image.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	c2, err := got.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 {
		t.Errorf("%s: config %s, want %s", want.Ref, c2, c1)
	}
	l1, err := want.Image.Layers()
	if err != nil {
		t.Fatal(err)
	}
	l2, err := got.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(l1) != len(l2) {
		t.Errorf("%s: %d layers, want %d", want.Ref, len(l2), len(l1))
	}
}

type archiveEntry struct {
	Config   string
	RepoTags []string
	Layers   []string
}

func archiveManifest(t *testing.T, path string) []archiveEntry {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			t.Fatal("no manifest.json in the archive")
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "manifest.json" {
			var m []archiveEntry
			if err := json.NewDecoder(tr).Decode(&m); err != nil {
				t.Fatal(err)
			}
			return m
		}
	}
}

// BenchmarkBuildWarm measures a Build of every image from a warm cache
// (run the tests first, or accept a cold first iteration).
func BenchmarkBuildWarm(b *testing.B) {
	ctx := context.Background()
	if _, err := Build(ctx, Names(), b.Logf); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := Build(ctx, Names(), func(string, ...any) {}); err != nil {
			b.Fatal(err)
		}
	}
}
