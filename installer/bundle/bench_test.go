package bundle

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/crane"
	"github.com/google/go-containerregistry/pkg/name"
	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/klauspost/compress/zstd"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/internal/counting"
)

// Benchmark images: the newest release's 22 images, all on one 16 MiB base
// layer, every third one also on an 8 MiB middle layer, each with 1 MiB of
// its own: 46 MiB of distinct layers in 438 MiB of images.
const (
	benchBase = 16 << 20
	benchOwn  = 1 << 20
)

// BenchmarkBundleSize compares the bundle's size with the distinct layers
// it holds (the ideal) and with one docker-save archive per image (what
// shipping images one by one costs), and measures what zstd over the
// whole bundle would save.
func BenchmarkBundleSize(b *testing.B) {
	f := newFixture(b, benchBase, benchOwn)
	var archives, unique int64
	seen := map[v1.Hash]bool{}
	for ref, img := range f.byRef {
		tag, err := name.NewTag(ref)
		if err != nil {
			b.Fatal(err)
		}
		cw := counting.Writer{W: io.Discard}
		if err := tarball.Write(tag, img, &cw); err != nil {
			b.Fatal(err)
		}
		archives += cw.N
		ls, _ := img.Layers()
		for _, l := range ls {
			d, _ := l.Digest()
			if !seen[d] {
				seen[d] = true
				s, _ := l.Size()
				unique += s
			}
		}
	}
	var size int64
	var out string
	for b.Loop() {
		out = createBundle(b, f, nil)
		st, err := os.Stat(out)
		if err != nil {
			b.Fatal(err)
		}
		size = st.Size()
	}
	b.StopTimer()
	zsize := zstdSize(b, out)
	ratioUnique := float64(size) / float64(unique)
	ratioArchives := float64(size) / float64(archives)
	b.ReportMetric(float64(size)/(1<<20), "bundle-MiB")
	b.ReportMetric(ratioUnique, "bundle/unique-layers")
	b.ReportMetric(ratioArchives, "bundle/sum-of-archives")
	b.ReportMetric(float64(zsize)/float64(size), "zstd/bundle")
	b.Logf("bundle %.1f MiB; distinct layers %.1f MiB (ratio %.4f); %d docker-save archives %.1f MiB (ratio %.3f); zstd of the bundle %.4f of it",
		float64(size)/(1<<20), float64(unique)/(1<<20), ratioUnique, len(f.byRef), float64(archives)/(1<<20), ratioArchives, float64(zsize)/float64(size))
	if ratioUnique > 1.01 {
		b.Errorf("bundle/unique-layers = %.4f, want <= 1.01", ratioUnique)
	}
}

func zstdSize(b *testing.B, p string) int64 {
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	cw := counting.Writer{W: io.Discard}
	enc, err := zstd.NewWriter(&cw, zstd.WithEncoderLevel(zstd.SpeedDefault))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(enc, f); err != nil {
		b.Fatal(err)
	}
	if err := enc.Close(); err != nil {
		b.Fatal(err)
	}
	return cw.N
}

// loopbackRegistry starts an in-memory registry that is stopped (and its
// memory freed) by the returned function.
func loopbackRegistry() (string, func()) {
	srv := httptest.NewServer(ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0))))
	return strings.TrimPrefix(srv.URL, "http://"), srv.Close
}

// BenchmarkPush compares Push of a bundle with copying the same images one
// after the other with crane.Copy (from a loopback registry that holds
// them), each to a fresh empty registry at the same references, on two
// registries:
//
//   - ggcr: go-containerregistry's in-memory registry, in process. It
//     serializes blob uploads behind one lock and shares blobs across
//     repositories (crane skips the shared layers too).
//   - distribution: the CNCF distribution registry (registry:3), a separate
//     process storing blobs on disk per repository: crane.Copy uploads a
//     shared layer again for every repository, Push once and mounts it
//     into the others; uploads run in parallel.
func BenchmarkPush(b *testing.B) {
	f := newFixture(b, benchBase, benchOwn)
	dir := b.TempDir()
	out := filepath.Join(dir, "b.tar")
	if _, err := Create(context.Background(), CreateOptions{Release: f.rel, Output: out, Source: f.memorySource(), PlatformImages: f.platformImages}); err != nil {
		b.Fatal(err)
	}
	bun, err := Open(context.Background(), out, OpenOptions{Trust: allowUnsigned})
	if err != nil {
		b.Fatal(err)
	}
	defer bun.Close()
	b.Run("ggcr", func(b *testing.B) { benchPush(b, f, bun, loopbackRegistry) })
	b.Run("distribution", func(b *testing.B) {
		benchPush(b, f, bun, func() (string, func()) {
			srv := testservers.StartDistribution(b)
			return srv.Host, srv.Stop
		})
	})
}

// benchPush times Push and sequential crane.Copy of every image, each into
// a fresh registry from newRegistry; starting and stopping registries is
// not timed.
func benchPush(b *testing.B, f *fixture, bun *Bundle, newRegistry func() (host string, stop func())) {
	var ours, theirs time.Duration
	var sum *PushSummary
	n := 0
	for b.Loop() {
		n++
		b.StopTimer()
		host, stop := newRegistry()
		b.StartTimer()
		start := time.Now()
		var err error
		if sum, err = Push(context.Background(), PushOptions{Bundle: bun, Host: host, Prefix: "mirror"}); err != nil {
			b.Fatal(err)
		}
		ours += time.Since(start)
		b.StopTimer()
		stop()

		host, stop = newRegistry()
		start = time.Now()
		for _, img := range bun.Release().Images {
			src := images.Repository(img, f.platformImages) + ":" + img.Tag
			dst, err := images.Relocate(images.Repository(img, f.platformImages), host, "mirror")
			if err != nil {
				b.Fatal(err)
			}
			if err := crane.Copy(src, dst+":"+img.Tag); err != nil {
				b.Fatal(err)
			}
		}
		theirs += time.Since(start)
		stop()
		b.StartTimer()
	}
	speedup := float64(theirs) / float64(ours)
	b.ReportMetric(float64(ours.Milliseconds())/float64(n), "push-ms")
	b.ReportMetric(float64(theirs.Milliseconds())/float64(n), "crane-ms")
	b.ReportMetric(speedup, "speedup")
	b.ReportMetric(float64(sum.BytesCopied)/(1<<20)/ours.Seconds()*float64(n), "push-MiB/s")
	b.Logf("Push %v (%d blobs copied, %d mounted, %d there already), sequential crane.Copy %v per run of %d images: %.2fx",
		ours/time.Duration(n), sum.BlobsCopied, sum.BlobsMounted, sum.BlobsSkipped, theirs/time.Duration(n), len(bun.Release().Images), speedup)
}
