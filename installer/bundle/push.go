package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/imagesig"
	"onprem.dev/onprem/installer/output"
)

// DefaultPushConcurrency is the number of blobs uploaded at once.
const DefaultPushConcurrency = 4

// PushOptions say where a bundle's images go.
type PushOptions struct {
	// Bundle is the opened bundle (required).
	Bundle *Bundle
	// Host is the registry host[:port] (spec.registry.host).
	Host string
	// Prefix is the path under the host (spec.registry.pathPrefix).
	Prefix string
	// PlatformImages overrides the bundle's platform image prefix; it
	// must be what the installation's spec.images.platform says (default:
	// the bundle's, which is what it was created with).
	PlatformImages string
	// Insecure allows plain HTTP and untrusted certificates.
	Insecure bool
	// Auth authenticates to the registry. When nil, Keychain is asked;
	// when both are nil, the push is anonymous.
	Auth     authn.Authenticator
	Keychain authn.Keychain
	// Concurrency bounds the blobs uploaded at once (default 4).
	Concurrency int
	// Progress receives byte counts.
	Progress ProgressFunc
	// Attempts is how many times a transiently failing request is tried
	// (default 5); RetryDelay the first delay, doubled each time (default
	// 1s, at most 30s).
	Attempts   int
	RetryDelay time.Duration
	// Transport replaces the HTTP transport (tests).
	Transport http.RoundTripper
}

// PushSummary says what Push did.
type PushSummary struct {
	// Registry is host[/prefix].
	Registry string        `json:"registry"`
	Images   []PushedImage `json:"images"`
	// BlobsCopied were uploaded, BlobsMounted mounted from another
	// repository of the registry, BlobsSkipped already there.
	BlobsCopied  int   `json:"blobsCopied"`
	BlobsMounted int   `json:"blobsMounted"`
	BlobsSkipped int   `json:"blobsSkipped"`
	BytesCopied  int64 `json:"bytesCopied"`
	// ManifestsPushed counts images whose manifest was pushed (by digest
	// and tag); ManifestsSkipped those whose tag already pointed to it.
	ManifestsPushed  int `json:"manifestsPushed"`
	ManifestsSkipped int `json:"manifestsSkipped"`
	// SignaturesAttached counts images whose cosign signatures (the
	// bundle's, and the source registry's it carries) were pushed beside
	// them; SignaturesUpToDate those whose registry had them all.
	SignaturesAttached int `json:"signaturesAttached"`
	SignaturesUpToDate int `json:"signaturesUpToDate"`
	// Retries counts requests retried after a transient error.
	Retries int     `json:"retries"`
	Seconds float64 `json:"seconds"`
}

// PushedImage is one image as the installation pulls it.
type PushedImage struct {
	Name string `json:"name"`
	// Reference is the relocated repository:tag@digest.
	Reference string `json:"reference"`
	Digest    string `json:"digest"`
}

// WriteText writes the summary for people.
func (s *PushSummary) WriteText(w io.Writer) error {
	tw := output.NewTable(w)
	fmt.Fprintln(tw, "IMAGE\tREFERENCE")
	for _, i := range s.Images {
		fmt.Fprintf(tw, "%s\t%s\n", i.Name, i.Reference)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	rate := ""
	if s.Seconds > 0 {
		rate = fmt.Sprintf(", %s/s", formatBytes(int64(float64(s.BytesCopied)/s.Seconds)))
	}
	_, err := fmt.Fprintf(w, "pushed %d images to %s in %.1fs: %d blobs copied (%s%s), %d mounted, %d already there; %d manifests pushed, %d up to date; signatures of %d images attached, %d up to date; %d retries\n",
		len(s.Images), s.Registry, s.Seconds, s.BlobsCopied, formatBytes(s.BytesCopied), rate, s.BlobsMounted, s.BlobsSkipped,
		s.ManifestsPushed, s.ManifestsSkipped, s.SignaturesAttached, s.SignaturesUpToDate, s.Retries)
	return err
}

// JSON renders the summary as indented JSON.
func (s *PushSummary) JSON() ([]byte, error) { return json.MarshalIndent(s, "", "  ") }

// pushImage is one image to push: where it goes and its blobs.
type pushImage struct {
	bi   *bundleImage
	repo string // repository path under the registry
	tag  string
}

// blobTask is one blob and every repository that needs it.
type blobTask struct {
	digest v1.Hash
	size   int64
	repos  []string
}

// Push copies every image of the bundle to the registry at the references
// the installation pulls (images.Relocate of its source repository):
// blobs first, in parallel, each skipped when the registry has it already
// (so a push that was interrupted resumes where it stopped) and mounted
// across repositories when possible; then each manifest, by digest and by
// tag. Transient errors are retried with exponential backoff; a 401/403 is
// an *AuthError.
func Push(ctx context.Context, opts PushOptions) (*PushSummary, error) {
	start := time.Now()
	b := opts.Bundle
	if b == nil {
		return nil, errors.New("push: no bundle")
	}
	if opts.Host == "" {
		return nil, errors.New("push: no registry host")
	}
	if strings.Contains(opts.Host, "/") {
		return nil, fmt.Errorf("push: registry host %q: give the path as the prefix", opts.Host)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = DefaultPushConcurrency
	}
	if opts.Attempts <= 0 {
		opts.Attempts = 5
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = time.Second
	}
	platformImages := opts.PlatformImages
	if platformImages == "" {
		platformImages = b.meta.PlatformImages
	}
	var nopts []name.Option
	if opts.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	reg, err := name.NewRegistry(opts.Host, nopts...)
	if err != nil {
		return nil, fmt.Errorf("push: registry %q: %w", opts.Host, err)
	}
	sum := &PushSummary{Registry: strings.TrimSuffix(opts.Host+"/"+strings.Trim(opts.Prefix, "/"), "/")}

	// Where each image goes, and which blobs each repository needs.
	var todo []pushImage
	var tasks []*blobTask
	byDigest := map[v1.Hash]*blobTask{}
	targets := map[string]string{} // repo:tag -> image name
	var repos []string
	repoSeen := map[string]bool{}
	for i := range b.images {
		bi := &b.images[i]
		dst, err := images.Relocate(images.Repository(bi.img, platformImages), opts.Host, opts.Prefix)
		if err != nil {
			return nil, fmt.Errorf("push: image %s: %w", bi.img.Name, err)
		}
		repo, err := name.NewRepository(dst, nopts...)
		if err != nil {
			return nil, fmt.Errorf("push: image %s: %w", bi.img.Name, err)
		}
		key := repo.RepositoryStr() + ":" + bi.img.Tag
		if other, dup := targets[key]; dup && other != bi.img.Name {
			prev := b.images[b.byName[other]]
			if prev.img.Digest != bi.img.Digest {
				return nil, fmt.Errorf("push: images %s and %s both relocate to %s with different digests", other, bi.img.Name, dst+":"+bi.img.Tag)
			}
		}
		targets[key] = bi.img.Name
		if !repoSeen[repo.RepositoryStr()] {
			repoSeen[repo.RepositoryStr()] = true
			repos = append(repos, repo.RepositoryStr())
		}
		todo = append(todo, pushImage{bi: bi, repo: repo.RepositoryStr(), tag: bi.img.Tag})
		sum.Images = append(sum.Images, PushedImage{Name: bi.img.Name, Reference: dst + ":" + bi.img.Tag + "@" + bi.img.Digest, Digest: bi.img.Digest})
		for _, d := range append([]v1.Descriptor{bi.manifest.Config}, bi.manifest.Layers...) {
			t := byDigest[d.Digest]
			if t == nil {
				t = &blobTask{digest: d.Digest, size: d.Size}
				byDigest[d.Digest] = t
				tasks = append(tasks, t)
			}
			if !containsString(t.repos, repo.RepositoryStr()) {
				t.repos = append(t.repos, repo.RepositoryStr())
			}
		}
	}

	auth := opts.Auth
	if auth == nil && opts.Keychain != nil {
		if auth, err = authn.Resolve(ctx, opts.Keychain, reg); err != nil {
			return nil, fmt.Errorf("push: credentials for %s: %w", opts.Host, err)
		}
	}
	if auth == nil {
		auth = authn.Anonymous
	}
	rc, err := newRegistryClient(ctx, reg, opts.Insecure, auth, opts.Transport, repos, opts.Concurrency)
	if err != nil {
		return nil, fmt.Errorf("push: %w", err)
	}
	p := &pusher{
		c: rc, b: b, retry: retryPolicy{attempts: opts.Attempts, initial: opts.RetryDelay, max: 30 * time.Second},
		meter: newMeter("push", opts.Progress),
	}
	var total int64
	for _, t := range tasks {
		total += t.size
	}
	p.meter.total.Store(total)
	slog.Info("bundle: pushing", "registry", sum.Registry, "images", len(todo), "blobs", len(tasks), "bytes", total)

	// Blobs, in parallel; the first error stops the others.
	err = parallel(ctx, opts.Concurrency, len(tasks), func(ctx context.Context, i int) error {
		return p.pushBlob(ctx, tasks[i])
	})
	if err == nil {
		// Manifests, after all their blobs.
		err = parallel(ctx, opts.Concurrency, len(todo), func(ctx context.Context, i int) error {
			return p.pushManifest(ctx, todo[i])
		})
	}
	if err == nil {
		// Signatures, once their images are there.
		err = parallel(ctx, opts.Concurrency, len(todo), func(ctx context.Context, i int) error {
			return p.pushSignatures(ctx, todo[i], nopts)
		})
	}
	p.meter.finish()
	sum.SignaturesAttached = int(p.sigsAttached.Load())
	sum.SignaturesUpToDate = int(p.sigsUpToDate.Load())
	sum.BlobsCopied = int(p.copied.Load())
	sum.BlobsMounted = int(p.mounted.Load())
	sum.BlobsSkipped = int(p.skipped.Load())
	sum.BytesCopied = p.bytes.Load()
	sum.ManifestsPushed = int(p.manifests.Load())
	sum.ManifestsSkipped = int(p.manifestsSkipped.Load())
	sum.Retries = int(p.retries.Load())
	sum.Seconds = time.Since(start).Seconds()
	if err != nil {
		return sum, fmt.Errorf("push to %s: %w", sum.Registry, err)
	}
	slog.Info("bundle: pushed", "registry", sum.Registry, "copied", sum.BlobsCopied, "skipped", sum.BlobsSkipped, "bytes", sum.BytesCopied)
	return sum, nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// parallel runs fn(0..n-1) on at most workers goroutines and returns the
// first error (after which the context given to fn is cancelled and no
// new calls start).
func parallel(ctx context.Context, workers, n int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := atomic.Int64{}
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for w := 0; w < workers && w < n; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := fn(ctx, i); err != nil {
					once.Do(func() { first = err })
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return context.Cause(ctx)
}

type pusher struct {
	c     *registryClient
	b     *Bundle
	retry retryPolicy
	meter *meter

	copied, mounted, skipped, bytes, manifests, manifestsSkipped, retries atomic.Int64
	sigsAttached, sigsUpToDate                                            atomic.Int64
}

func (p *pusher) do(ctx context.Context, op func() error) error {
	n, err := p.retry.do(ctx, op)
	p.retries.Add(int64(n))
	return err
}

// pushBlob makes every repository of t have the blob: skipped where it
// is, mounted from a repository that has it, uploaded otherwise.
func (p *pusher) pushBlob(ctx context.Context, t *blobTask) error {
	p.meter.setItem(t.digest.String()[:19])
	have := "" // a repository of this registry known to hold the blob
	counted := false
	for _, repo := range t.repos {
		var exists bool
		if err := p.do(ctx, func() (err error) {
			exists, err = p.c.blobExists(ctx, repo, t.digest)
			return err
		}); err != nil {
			return err
		}
		if exists {
			p.skipped.Add(1)
			if !counted {
				p.meter.skipped(t.size)
				counted = true
			}
			if have == "" {
				have = repo
			}
			continue
		}
		mounted := false
		err := p.do(ctx, func() error {
			loc, ok, err := p.c.startUpload(ctx, repo, t.digest, have)
			if err != nil {
				return err
			}
			if ok {
				mounted = true
				return nil
			}
			return p.upload(ctx, loc, t)
		})
		if err != nil {
			return err
		}
		if mounted {
			p.mounted.Add(1)
		} else {
			p.copied.Add(1)
			p.bytes.Add(t.size)
			if counted { // done already counted for this blob
				p.meter.done.Add(-t.size)
			}
		}
		if !counted {
			if mounted {
				p.meter.skipped(t.size)
			}
			counted = true
		}
		have = repo
	}
	return nil
}

// upload sends the blob; on failure the bytes it counted are taken back
// from the progress so that a retry does not count them twice as done.
func (p *pusher) upload(ctx context.Context, loc string, t *blobTask) error {
	var readers []*meterReader
	open := func() io.Reader {
		sr, err := p.b.blobReader(t.digest)
		if err != nil {
			return &errReader{err}
		}
		r := &meterReader{ctx: ctx, r: sr, m: p.meter}
		readers = append(readers, r)
		return r
	}
	err := p.c.putBlob(ctx, loc, t.digest, t.size, open)
	if err != nil {
		for _, r := range readers {
			p.meter.done.Add(-r.n)
		}
	} else if len(readers) > 1 { // a redirect re-sent the body
		for _, r := range readers[:len(readers)-1] {
			p.meter.done.Add(-r.n)
		}
	}
	return err
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }

// pushManifest pushes an image's manifest by digest and by tag, unless the
// tag already points to it.
func (p *pusher) pushManifest(ctx context.Context, pi pushImage) error {
	mt := pi.bi.desc.MediaType
	if pi.bi.manifest.MediaType != "" {
		mt = pi.bi.manifest.MediaType
	}
	var cur v1.Hash
	var ok bool
	if err := p.do(ctx, func() (err error) {
		cur, ok, err = p.c.manifestDigest(ctx, pi.repo, pi.tag, mt)
		return err
	}); err != nil {
		return fmt.Errorf("image %s: %w", pi.bi.img.Name, err)
	}
	if ok && cur.String() == pi.bi.img.Digest {
		p.manifestsSkipped.Add(1)
		return nil
	}
	for _, ref := range []string{pi.bi.img.Digest, pi.tag} {
		if err := p.do(ctx, func() error { return p.c.putManifest(ctx, pi.repo, ref, mt, pi.bi.raw) }); err != nil {
			return fmt.Errorf("image %s: %w", pi.bi.img.Name, err)
		}
	}
	p.manifests.Add(1)
	return nil
}

// pushSignatures attaches the image signatures the bundle carries for an
// image to its relocated copy (cosign's sha256-<hex>.sig tag), beside any
// the registry holds already.
func (p *pusher) pushSignatures(ctx context.Context, pi pushImage, nopts []name.Option) error {
	is, err := p.b.ImageSignatures(pi.bi.img.Name)
	if err != nil || is == nil {
		return err
	}
	d, err := v1.NewHash(is.Digest)
	if err != nil {
		return fmt.Errorf("image %s: %w", pi.bi.img.Name, err)
	}
	repo, err := name.NewRepository(p.c.reg.RegistryStr()+"/"+pi.repo, nopts...)
	if err != nil {
		return fmt.Errorf("image %s: %w", pi.bi.img.Name, err)
	}
	sigs := make([]imagesig.Signature, len(is.Signatures))
	for i, s := range is.Signatures {
		sigs[i] = s.Signature
	}
	var wrote bool
	if err := p.do(ctx, func() (err error) {
		wrote, err = imagesig.Attach(ctx, repo, d, sigs, remote.WithTransport(p.c.client.Transport))
		return err
	}); err != nil {
		return fmt.Errorf("image %s: %w", pi.bi.img.Name, classify(p.c.reg, err))
	}
	if wrote {
		p.sigsAttached.Add(1)
	} else {
		p.sigsUpToDate.Add(1)
	}
	return nil
}
