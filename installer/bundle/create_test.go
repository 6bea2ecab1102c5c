package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/sbom"
	"onprem.dev/onprem/installer/signing"
	"onprem.dev/onprem/manifests"
)

func TestBundleCreateFromRegistryVerifyAndOpen(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 64<<10, 16<<10)
	priv, pub := keyPair(t)
	sk, _ := signing.ParsePrivateKey(priv)
	pk, _ := signing.ParsePublicKey(pub)
	dir := t.TempDir()
	out := filepath.Join(dir, "platform.bundle")
	var reports []Progress
	res, err := Create(ctx, CreateOptions{
		Release: f.rel, Output: out, PlatformImages: f.platformImages,
		Source:     RemoteSource(RemoteOptions{}),
		SigningKey: sk,
		Progress:   func(p Progress) { reports = append(reports, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	onlyFiles(t, dir, "platform.bundle")
	if !res.Signed || res.KeyID != signing.KeyID(pk) || res.Images != len(f.rel.Images) {
		t.Errorf("result %+v", res)
	}
	if len(reports) == 0 || !reports[len(reports)-1].Final || reports[len(reports)-1].Done != reports[len(reports)-1].Total {
		t.Errorf("progress reports: %+v", reports)
	}

	// Shared layers are stored once: one blob file per distinct blob.
	entries := tarEntries(t, out)
	nblobs := 0
	for n := range entries {
		if blobHex(n) != "" {
			nblobs++
		}
	}
	if nblobs != f.uniqueBlobs || res.Blobs != f.uniqueBlobs {
		t.Errorf("bundle holds %d blobs (result says %d), want %d distinct", nblobs, res.Blobs, f.uniqueBlobs)
	}
	if f.uniqueBlobs+len(f.rel.Images) > f.totalBlobs {
		t.Fatalf("fixture shares too few layers: %d distinct blobs of %d", f.uniqueBlobs, f.totalBlobs)
	}

	vr, err := Verify(ctx, out, OpenOptions{Trust: Trust{Keys: signing.Keyring{{Origin: "test", Public: pk}}}})
	if err != nil {
		t.Fatal(err)
	}
	if !vr.SignatureVerified || vr.Files != len(entries)-2 {
		t.Errorf("verify: %+v (bundle has %d entries)", vr, len(entries))
	}

	b, err := Open(ctx, out, OpenOptions{Trust: Trust{Keys: signing.Keyring{{Origin: "test", Public: pk}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	rel := b.Release()
	if rel.Version != f.rel.Version || len(rel.Images) != len(f.rel.Images) {
		t.Fatalf("release %s with %d images", rel.Version, len(rel.Images))
	}
	for _, img := range rel.Images {
		want, err := f.byRef[images.Repository(img, f.platformImages)+":"+img.Tag].Digest()
		if err != nil {
			t.Fatal(err)
		}
		if img.Digest != want.String() {
			t.Errorf("image %s pinned to %q, want %s", img.Name, img.Digest, want)
		}
		bimg, err := b.Image(img.Name)
		if err != nil {
			t.Fatal(err)
		}
		if d, err := bimg.Digest(); err != nil || d != want {
			t.Errorf("bundle image %s: digest %s %v", img.Name, d, err)
		}
		ls, err := bimg.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			rc, err := l.Compressed()
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := v1.SHA256(rc)
			rc.Close()
			wantL, _ := l.Digest()
			if err != nil || got != wantL {
				t.Errorf("image %s layer %s reads as %s %v", img.Name, wantL, got, err)
			}
		}
	}

	// Charts and manifests: the same files as the embedded trees, usable
	// by charts.LoadFrom, and a well-behaved fs.FS.
	names, _ := charts.NamesIn(charts.FS)
	var chartFiles []string
	for _, n := range names {
		_ = fs.WalkDir(charts.FS, n, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				chartFiles = append(chartFiles, p)
			}
			return err
		})
	}
	if err := fstest.TestFS(b.Charts(), chartFiles...); err != nil {
		t.Error(err)
	}
	for _, p := range chartFiles {
		want, _ := fs.ReadFile(charts.FS, p)
		got, err := fs.ReadFile(b.Charts(), p)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("chart file %s differs: %v", p, err)
		}
	}
	// The bundle carries the library chart the others share, and a chart
	// loaded from it has the library attached, as from charts.FS.
	if !slices.Contains(names, "common") {
		t.Errorf("the embedded charts %v lack the library chart common", names)
	}
	if ch, err := charts.LoadFrom(b.Charts(), "redis"); err != nil {
		t.Errorf("loading the bundle's redis chart: %v", err)
	} else if deps := ch.Dependencies(); len(deps) != 1 || deps[0].Name() != "common" {
		t.Errorf("the bundle's redis chart has the subcharts %v, want the library common", deps)
	} else if _, err := charts.Template(ch, "redis", "onprem", nil); err != nil {
		t.Errorf("rendering the bundle's redis chart: %v", err)
	}
	if got, _ := charts.NamesIn(b.Charts()); strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("bundle charts %v, want %v", got, names)
	}
	want, _ := fs.ReadFile(manifests.FS, "base/kustomization.yaml")
	got, err := fs.ReadFile(b.Manifests(), "base/kustomization.yaml")
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("manifests base/kustomization.yaml: %v", err)
	}
	if err := fstest.TestFS(b.Manifests(), "base/kustomization.yaml"); err != nil {
		t.Error(err)
	}
	if _, err := fs.Stat(b.Manifests(), "manifests.go"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Go sources were bundled: %v", err)
	}

	// The image index names each image and its source.
	idx, err := b.fsys.ReadFile(indexFile)
	if err != nil {
		t.Fatal(err)
	}
	im, err := v1.ParseIndexManifest(bytes.NewReader(idx))
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != len(rel.Images) {
		t.Fatalf("index lists %d images", len(im.Manifests))
	}
	for i, d := range im.Manifests {
		img := rel.Images[i]
		if d.Annotations[AnnotationImageName] != img.Name || d.Annotations[AnnotationSource] != images.Repository(img, f.platformImages)+":"+img.Tag ||
			d.Digest.String() != img.Digest || d.MediaType != types.DockerManifestSchema2 {
			t.Errorf("index entry %d: %+v", i, d)
		}
	}

	in, err := b.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if in.Blobs != f.uniqueBlobs || in.UniqueBlobSize >= in.TotalImageSize || !in.SignatureVerified || len(in.Charts) != len(names) {
		t.Errorf("inspect: %+v", in)
	}
	if in.Images[0].Reference != images.Reference(rel.Images[0], f.platformImages) || in.Images[0].Size == 0 {
		t.Errorf("inspect image: %+v", in.Images[0])
	}
	var text bytes.Buffer
	if err := in.WriteText(&text); err != nil || !strings.Contains(text.String(), rel.Images[0].Name) || !strings.Contains(text.String(), "signature verified") {
		t.Errorf("inspect text: %v\n%s", err, text.String())
	}
	if _, err := json.Marshal(in); err != nil {
		t.Error(err)
	}
}

func TestBundleMissingImageIsNamedAndLeavesNoFile(t *testing.T) {
	f := newFixture(t, 8<<10, 4<<10)
	missing := f.rel.Images[3]
	delete(f.byRef, images.Repository(missing, f.platformImages)+":"+missing.Tag)
	dir := t.TempDir()
	out := filepath.Join(dir, "platform.bundle")
	_, err := Create(context.Background(), CreateOptions{Release: f.rel, Output: out, Source: f.memorySource(), PlatformImages: f.platformImages})
	if !errors.Is(err, ErrImageNotFound) {
		t.Fatalf("err = %v, want ErrImageNotFound", err)
	}
	var ie *ImageError
	if !errors.As(err, &ie) || ie.Name != missing.Name || !strings.Contains(err.Error(), "image "+missing.Name+" (") {
		t.Errorf("error does not name image %s: %v", missing.Name, err)
	}
	onlyFiles(t, dir)

	// The same through the registry source: the registry answers 404.
	_, err = Create(context.Background(), CreateOptions{
		Release: withImage(f, missing.Name, "no-such-tag"), Output: out, PlatformImages: f.platformImages,
		Source: RemoteSource(RemoteOptions{}),
	})
	if !errors.Is(err, ErrImageNotFound) || !strings.Contains(err.Error(), missing.Name) {
		t.Errorf("remote: err = %v", err)
	}
	onlyFiles(t, dir)
}

// withImage returns the fixture's release with one image's tag changed.
func withImage(f *fixture, imgName, tag string) *release.Release {
	rel := *f.rel
	rel.Images = append(rel.Images[:0:0], rel.Images...)
	for i := range rel.Images {
		if rel.Images[i].Name == imgName {
			rel.Images[i].Tag = tag
		}
	}
	return &rel
}

// cancellingLayer cancels the context after the first read of its content.
type cancellingLayer struct {
	v1.Layer
	cancel context.CancelFunc
}

func (l *cancellingLayer) Compressed() (io.ReadCloser, error) {
	rc, err := l.Layer.Compressed()
	if err != nil {
		return nil, err
	}
	return &cancelOnRead{ReadCloser: rc, cancel: l.cancel}, nil
}

type cancelOnRead struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (r *cancelOnRead) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p[:min(len(p), 1024)])
	r.cancel()
	return n, err
}

type cancellingImage struct {
	v1.Image
	cancel context.CancelFunc
}

func (i *cancellingImage) LayerByDigest(h v1.Hash) (v1.Layer, error) {
	l, err := i.Image.LayerByDigest(h)
	if err != nil {
		return nil, err
	}
	return &cancellingLayer{Layer: l, cancel: i.cancel}, nil
}

func TestBundleCreateCancelledLeavesNoFile(t *testing.T) {
	f := newFixture(t, 256<<10, 4<<10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := SourceFunc(func(ctx context.Context, req ImageRequest) (v1.Image, error) {
		img, err := f.memorySource().Image(ctx, req)
		if err != nil {
			return nil, err
		}
		return &cancellingImage{Image: img, cancel: cancel}, nil
	})
	dir := t.TempDir()
	_, err := Create(ctx, CreateOptions{Release: f.rel, Output: filepath.Join(dir, "b.tar"), Source: src, PlatformImages: f.platformImages})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	onlyFiles(t, dir)
}

func TestBundleCreateUnwritableOutput(t *testing.T) {
	f := newFixture(t, 4<<10, 1<<10)
	_, err := Create(context.Background(), CreateOptions{Release: f.rel, Output: "/nonexistent-dir/b.tar", Source: f.memorySource(), PlatformImages: f.platformImages})
	if err == nil || !strings.Contains(err.Error(), "nonexistent-dir") {
		t.Errorf("err = %v", err)
	}
}

// fullDisk fails every write after limit bytes with ENOSPC.
type fullDisk struct {
	w     io.Writer
	limit int64
}

func (d *fullDisk) Write(p []byte) (int, error) {
	if int64(len(p)) > d.limit {
		n, _ := d.w.Write(p[:d.limit])
		d.limit = 0
		return n, &fs.PathError{Op: "write", Path: "bundle", Err: syscall.ENOSPC}
	}
	d.limit -= int64(len(p))
	return d.w.Write(p)
}

func TestBundleDiskFullLeavesNoFile(t *testing.T) {
	f := newFixture(t, 64<<10, 4<<10)
	testWrapOutput = func(w io.Writer) io.Writer { return &fullDisk{w: w, limit: 100 << 10} }
	defer func() { testWrapOutput = nil }()
	dir := t.TempDir()
	_, err := Create(context.Background(), CreateOptions{Release: f.rel, Output: filepath.Join(dir, "b.tar"), Source: f.memorySource(), PlatformImages: f.platformImages})
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("err = %v, want ENOSPC", err)
	}
	onlyFiles(t, dir)
}

// Every image's SBOM is written from its layers into the bundle, listed by
// inspect, read back by Inventories, and covered by the signature: an SBOM
// changed after signing (checksums fixed up) is refused.
func TestBundleSBOMs(t *testing.T) {
	f := newFixture(t, 8<<10, 2<<10)
	// A script where a Go program was: not counted (installer/sbom's tests
	// read real Go programs).
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct {
		name string
		mode int64
		data []byte
	}{
		{"etc/os-release", 0o644, []byte("ID=debian\nVERSION_ID=\"12\"\n")},
		{"var/lib/dpkg/status", 0o644, []byte("Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nSource: glibc\nVersion: 2.36-9+deb12u9\n\nPackage: tzdata\nStatus: install ok installed\nArchitecture: all\nVersion: 2024b-0+deb12u1\n")},
		{"usr/local/bin/server", 0o755, []byte("#!/bin/sh\nexec true\n")},
	} {
		tw.WriteHeader(&tar.Header{Name: e.name, Mode: e.mode, Size: int64(len(e.data)), Typeflag: tar.TypeReg})
		tw.Write(e.data)
	}
	tw.Close()
	layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()), tarball.WithCompressedCaching)
	if err != nil {
		t.Fatal(err)
	}
	first := f.rel.Images[0]
	ref := images.Repository(first, f.platformImages) + ":" + first.Tag
	f.byRef[ref] = imageOf(t, randomLayer(t, 8<<10, 1), layer)

	priv, pub := keyPair(t)
	pk, _ := signing.ParsePublicKey(pub)
	trust := Trust{Keys: signing.Keyring{{Origin: "test", Public: pk}}}
	out := createBundle(t, f, priv)
	b, err := Open(context.Background(), out, OpenOptions{Trust: trust})
	if err != nil {
		t.Fatal(err)
	}
	invs, err := b.Inventories()
	if err != nil {
		t.Fatal(err)
	}
	if len(invs) != len(f.rel.Images) {
		t.Fatalf("%d SBOMs for %d images", len(invs), len(f.rel.Images))
	}
	inv := invs[0]
	c := inv.Count()
	if inv.Image != first.Name || inv.OS != "debian 12" || c[sbom.TypeDeb] != 2 || c[sbom.TypeGolang] != 0 || inv.Digest != b.Release().Images[0].Digest {
		t.Errorf("SBOM of %s: %+v", first.Name, c)
	}
	// The random layers of the others are no tar: noted, not fatal.
	if len(invs[1].Packages) != 0 || len(invs[1].Notes) == 0 || !strings.Contains(invs[1].Notes[0], "was not scanned") {
		t.Errorf("SBOM of an image of random bytes: %+v", invs[1])
	}
	in, err := b.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	if in.Images[0].SBOM != "sboms/"+first.Name+".spdx.json" || in.Images[0].Packages[sbom.TypeDeb] != 2 {
		t.Errorf("inspect: %+v", in.Images[0])
	}
	b.Close()

	retarResummed(t, out, func(n string, d []byte) []byte {
		if n == "sboms/"+first.Name+".spdx.json" {
			d = bytes.Replace(d, []byte("2.36-9+deb12u9"), []byte("2.36-9+deb12u99"), 1)
		}
		return d
	})
	var se *SignatureError
	if _, err := Verify(context.Background(), out, OpenOptions{Trust: trust}); !errors.As(err, &se) {
		t.Errorf("altered SBOM: %v, want a SignatureError", err)
	}

	// A bundle of format 1 (no SBOMs) still opens; it has no SBOM to give.
	retarResummed(t, out, func(n string, d []byte) []byte {
		if n == metadataFile {
			d = bytes.Replace(d, []byte(`"formatVersion": 3`), []byte(`"formatVersion": 1`), 1)
			d = bytes.Replace(d, []byte(`,
  "sbom": "spdx-json"`), nil, 1)
			d = bytes.Replace(d, []byte(`,
  "imageSignatures": "cosign"`), nil, 1)
		}
		return d
	})
	old, err := Open(context.Background(), out, OpenOptions{Trust: Trust{AllowUnsigned: true}})
	if err != nil {
		t.Fatalf("format 1: %v", err)
	}
	defer old.Close()
	if old.Metadata().FormatVersion != 1 {
		t.Fatalf("the edit did not take: %+v", old.Metadata())
	}
	if _, err := old.Inventories(); !errors.Is(err, ErrNoSBOM) {
		t.Errorf("SBOMs of a format 1 bundle: %v", err)
	}
}

// A second bundle of the same images takes every layer's scan from the
// SBOM layer cache and holds the same SBOMs.
func TestBundleSBOMLayerCache(t *testing.T) {
	f := newFixture(t, 8<<10, 2<<10)
	// Real tar layers (the fixture's random ones are not scanned): one
	// shared, one of each image's own.
	tarLayer := func(files map[string]string) v1.Layer {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for n, d := range files {
			tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(d)), Typeflag: tar.TypeReg})
			tw.Write([]byte(d))
		}
		tw.Close()
		l, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()), tarball.WithCompressedCaching)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	base := tarLayer(map[string]string{"etc/os-release": "ID=debian\nVERSION_ID=\"12\"\n", "var/lib/dpkg/status": "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nVersion: 2.36-9+deb12u9\n"})
	for i, img := range f.rel.Images {
		ref := images.Repository(img, f.platformImages) + ":" + img.Tag
		f.byRef[ref] = imageOf(t, base, tarLayer(map[string]string{"srv/own": strconv.Itoa(i)}))
	}
	cache := sbom.LayerCache{Dir: t.TempDir()}
	// One creation time for both: an SBOM carries it, and two bundles
	// made a second apart would differ by it alone.
	created := time.Now()
	create := func() (string, *CreateResult) {
		out := filepath.Join(t.TempDir(), "platform.bundle")
		res, err := Create(context.Background(), CreateOptions{Release: f.rel, Output: out, Source: f.memorySource(), PlatformImages: f.platformImages, SBOMCache: cache, Created: created})
		if err != nil {
			t.Fatal(err)
		}
		return out, res
	}
	first, r1 := create()
	second, r2 := create()
	if r1.LayersScanned == 0 || r1.LayersCached != 0 || r2.LayersScanned != 0 || r2.LayersCached != r1.LayersScanned {
		t.Fatalf("first %d scanned, %d cached; second %d scanned, %d cached", r1.LayersScanned, r1.LayersCached, r2.LayersScanned, r2.LayersCached)
	}
	ba, err := Open(context.Background(), first, OpenOptions{Trust: allowUnsigned})
	if err != nil {
		t.Fatal(err)
	}
	defer ba.Close()
	bb, err := Open(context.Background(), second, OpenOptions{Trust: allowUnsigned})
	if err != nil {
		t.Fatal(err)
	}
	defer bb.Close()
	for _, img := range f.rel.Images {
		x, err1 := ba.SBOM(img.Name)
		y, err2 := bb.SBOM(img.Name)
		if err1 != nil || err2 != nil || len(x) == 0 || !bytes.Equal(x, y) {
			t.Errorf("the SBOM of %s differs with the cache (%v, %v)", img.Name, err1, err2)
		}
	}
}
