package bundle

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/images"
)

// openFixtureBundle creates and opens a bundle of a new fixture.
func openFixtureBundle(t *testing.T, baseSize, ownSize int) (*fixture, *Bundle) {
	t.Helper()
	f := newFixture(t, baseSize, ownSize)
	b, err := Open(context.Background(), createBundle(t, f, nil), OpenOptions{Trust: allowUnsigned})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return f, b
}

// layerBlobs counts the distinct configs and layers (what Push uploads)
// and their bytes.
func layerBlobs(b *Bundle) (int, int64) {
	seen := map[v1.Hash]bool{}
	var size int64
	for _, bi := range b.images {
		for _, d := range append([]v1.Descriptor{bi.manifest.Config}, bi.manifest.Layers...) {
			if !seen[d.Digest] {
				seen[d.Digest] = true
				size += d.Size
			}
		}
	}
	return len(seen), size
}

// pullBack checks every image at its relocated reference, by digest and
// by tag.
func pullBack(t *testing.T, b *Bundle, host, prefix string, opts ...remote.Option) {
	t.Helper()
	for _, img := range b.Release().Images {
		repo, err := images.Relocate(images.Repository(img, b.Metadata().PlatformImages), host, prefix)
		if err != nil {
			t.Fatal(err)
		}
		byDigest, err := name.NewDigest(repo + "@" + img.Digest)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Image(byDigest, opts...)
		if err != nil {
			t.Fatalf("pulling %s: %v", byDigest, err)
		}
		if d, err := got.Digest(); err != nil || d.String() != img.Digest {
			t.Errorf("%s: digest %s %v", byDigest, d, err)
		}
		ls, err := got.Layers()
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			rc, err := l.Compressed()
			if err != nil {
				t.Fatalf("%s: layer: %v", byDigest, err)
			}
			if _, err := io.Copy(io.Discard, rc); err != nil { // ggcr checks the digest
				t.Errorf("%s: layer: %v", byDigest, err)
			}
			rc.Close()
		}
		desc, err := remote.Head(mustRef(t, repo+":"+img.Tag), opts...)
		if err != nil || desc.Digest.String() != img.Digest {
			t.Errorf("%s:%s points to %v (%v), want %s", repo, img.Tag, desc, err, img.Digest)
		}
	}
}

func TestBundlePushPullBackAndRepush(t *testing.T) {
	_, b := openFixtureBundle(t, 64<<10, 16<<10)
	host := testservers.Registry(t)
	ctx := context.Background()
	var last Progress
	sum, err := Push(ctx, PushOptions{Bundle: b, Host: host, Prefix: "onprem/mirror", Progress: func(p Progress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	nblobs, size := layerBlobs(b)
	if sum.BlobsCopied != nblobs || sum.BytesCopied != size || sum.ManifestsPushed != len(b.images) || sum.BlobsMounted != 0 {
		t.Errorf("first push: %+v, want %d blobs (%d bytes) copied", sum, nblobs, size)
	}
	if !last.Final || last.Done != last.Total || last.Transferred != size {
		t.Errorf("last progress %+v", last)
	}
	if sum.Images[0].Reference != mustRelocate(t, b, 0, host, "onprem/mirror") {
		t.Errorf("summary reference %s", sum.Images[0].Reference)
	}
	pullBack(t, b, host, "onprem/mirror")

	again, err := Push(ctx, PushOptions{Bundle: b, Host: host, Prefix: "onprem/mirror"})
	if err != nil {
		t.Fatal(err)
	}
	if again.BlobsCopied != 0 || again.BytesCopied != 0 || again.ManifestsPushed != 0 || again.ManifestsSkipped != len(b.images) {
		t.Errorf("re-push: %+v, want nothing copied", again)
	}
	var text bytes.Buffer
	if err := again.WriteText(&text); err != nil || !strings.Contains(text.String(), "0 blobs copied") {
		t.Errorf("text: %v %s", err, text.String())
	}
	j, err := again.JSON()
	var back PushSummary
	if err != nil || json.Unmarshal(j, &back) != nil || back.BlobsSkipped != again.BlobsSkipped || len(back.Images) != len(b.images) {
		t.Errorf("json: %v %s", err, j)
	}
}

func mustRelocate(t *testing.T, b *Bundle, i int, host, prefix string) string {
	img := b.Release().Images[i]
	repo, err := images.Relocate(images.Repository(img, b.Metadata().PlatformImages), host, prefix)
	if err != nil {
		t.Fatal(err)
	}
	return repo + ":" + img.Tag + "@" + img.Digest
}

// headerTransport adds a header to every request.
type headerTransport struct{ key, value string }

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(h.key, h.value)
	return http.DefaultTransport.RoundTrip(r)
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(code int) {
	r.status = code
	r.ResponseWriter.WriteHeader(code)
}

func isBlobCommit(r *http.Request) bool {
	return r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/blobs/uploads/")
}

func TestBundlePushResumesAfterInterruption(t *testing.T) {
	_, b := openFixtureBundle(t, 64<<10, 16<<10)
	const stopAfter = 5
	var mu sync.Mutex
	commits, manifestPuts := 0, 0
	blocked := false
	var cancel context.CancelFunc
	host := wrappedRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !isBlobCommit(r) {
				next.ServeHTTP(w, r)
				if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/manifests/") {
					mu.Lock()
					manifestPuts++
					mu.Unlock()
				}
				return
			}
			// Commits one at a time, so that exactly stopAfter land; once
			// interrupted, nothing more of the first run does (not even an
			// upload whose body had fully arrived when it was cancelled).
			mu.Lock()
			defer mu.Unlock()
			if blocked && r.Header.Get("X-Run") != "second" {
				http.Error(w, "interrupted", http.StatusServiceUnavailable)
				return
			}
			rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(rec, r)
			if rec.status == http.StatusCreated {
				commits++
				if commits == stopAfter && cancel != nil {
					blocked = true // nothing more lands in this run
					cancel()
				}
			}
		})
	})
	ctx, c := context.WithCancel(context.Background())
	mu.Lock()
	cancel = c
	mu.Unlock()
	first, err := Push(ctx, PushOptions{Bundle: b, Host: host, Concurrency: 3, RetryDelay: time.Millisecond})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted push: err = %v", err)
	}
	mu.Lock()
	if commits != stopAfter || manifestPuts != 0 {
		t.Fatalf("interrupted push: %d blobs committed, %d manifests pushed; want %d and 0", commits, manifestPuts, stopAfter)
	}
	cancel = nil
	mu.Unlock()
	if first == nil || first.BlobsCopied > stopAfter {
		t.Errorf("interrupted summary: %+v", first)
	}

	second, err := Push(context.Background(), PushOptions{Bundle: b, Host: host, Concurrency: 3, Transport: headerTransport{"X-Run", "second"}})
	if err != nil {
		t.Fatal(err)
	}
	nblobs, _ := layerBlobs(b)
	if second.BlobsCopied != nblobs-stopAfter {
		t.Errorf("resumed push copied %d blobs, want the %d missing (%d of %d were there)", second.BlobsCopied, nblobs-stopAfter, stopAfter, nblobs)
	}
	mu.Lock()
	if commits != nblobs {
		t.Errorf("%d blob uploads in all, want %d: some blob was sent twice", commits, nblobs)
	}
	mu.Unlock()
	pullBack(t, b, host, "")
}

func TestBundlePushRetriesTransientErrors(t *testing.T) {
	_, b := openFixtureBundle(t, 32<<10, 8<<10)
	var puts, heads atomic.Int64
	host := wrappedRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Method == http.MethodHead && strings.Contains(r.URL.Path, "/blobs/") && heads.Add(1) == 1:
				w.WriteHeader(http.StatusInternalServerError)
				return
			case isBlobCommit(r):
				switch puts.Add(1) {
				case 1, 2:
					http.Error(w, `{"errors":[{"code":"UNAVAILABLE","message":"try later"}]}`, http.StatusServiceUnavailable)
					return
				case 3: // the connection drops mid-request
					_, _ = io.CopyN(io.Discard, r.Body, 100)
					conn, _, err := w.(http.Hijacker).Hijack()
					if err == nil {
						if tc, ok := conn.(*net.TCPConn); ok {
							_ = tc.SetLinger(0) // RST, not FIN
						}
						conn.Close()
					}
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	sum, err := Push(context.Background(), PushOptions{Bundle: b, Host: host, RetryDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if sum.Retries < 4 {
		t.Errorf("%d retries, want at least 4 (one HEAD, three uploads)", sum.Retries)
	}
	nblobs, _ := layerBlobs(b)
	if sum.BlobsCopied != nblobs {
		t.Errorf("copied %d blobs, want %d", sum.BlobsCopied, nblobs)
	}
	pullBack(t, b, host, "")

	// A registry that keeps failing: the push gives up with the error.
	down := wrappedRegistry(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/v2/" {
				next.ServeHTTP(w, r)
				return
			}
			w.WriteHeader(http.StatusBadGateway)
		})
	})
	_, err = Push(context.Background(), PushOptions{Bundle: b, Host: down, Attempts: 3, RetryDelay: time.Millisecond})
	var te *transport.Error
	if !errors.As(err, &te) || te.StatusCode != http.StatusBadGateway {
		t.Errorf("registry down: %v", err)
	}
}

func TestBundlePushBadCredentials(t *testing.T) {
	_, b := openFixtureBundle(t, 8<<10, 2<<10)
	host := testservers.Registry(t, testservers.WithBasicAuth("pusher", "s3cret"))
	start := time.Now()
	for _, auth := range []authn.Authenticator{&authn.Basic{Username: "pusher", Password: "wrong"}, authn.Anonymous} {
		sum, err := Push(context.Background(), PushOptions{Bundle: b, Host: host, Auth: auth, RetryDelay: time.Second})
		var ae *AuthError
		if !errors.As(err, &ae) || ae.Host != host || !strings.Contains(err.Error(), "registry refused credentials for "+host) {
			t.Errorf("err = %v, want AuthError for %s", err, host)
		}
		if sum != nil && sum.Retries != 0 {
			t.Errorf("a 401 was retried %d times", sum.Retries)
		}
	}
	if time.Since(start) > 2*time.Second {
		t.Error("refused credentials were retried")
	}
	cfg := fmt.Sprintf(`{"auths":{%q:{"username":"pusher","password":"s3cret"}}}`, host)
	kc, err := KeychainFromDockerConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Push(context.Background(), PushOptions{Bundle: b, Host: host, Keychain: kc}); err != nil {
		t.Fatal(err)
	}
	pullBack(t, b, host, "", remote.WithAuth(&authn.Basic{Username: "pusher", Password: "s3cret"}))
}

func TestTransient(t *testing.T) {
	cases := []struct {
		err  error
		want bool
	}{
		{&transport.Error{StatusCode: 503}, true},
		{&transport.Error{StatusCode: 429}, true},
		{&transport.Error{StatusCode: 404}, false},
		{&AuthError{Host: "h", Err: &transport.Error{StatusCode: 401}}, false},
		{fmt.Errorf("x: %w", syscall.ECONNRESET), true},
		{io.ErrUnexpectedEOF, true},
		{context.Canceled, false},
		{errors.New("manifest invalid"), false},
	}
	for _, c := range cases {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v", c.err, got)
		}
	}
	n := 0
	retries, err := retryPolicy{attempts: 3, initial: time.Millisecond, max: time.Millisecond}.do(context.Background(), func() error {
		n++
		return &transport.Error{StatusCode: 500}
	})
	if n != 3 || retries != 2 || err == nil {
		t.Errorf("%d attempts, %d retries, %v", n, retries, err)
	}
}
