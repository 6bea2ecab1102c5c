package bundle

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/chartfetch"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/sbom"
	"onprem.dev/onprem/installer/signing"
	"onprem.dev/onprem/installer/version"
	"onprem.dev/onprem/manifests"
)

// CreateOptions say what goes into a bundle and where it is written.
type CreateOptions struct {
	// Release is the release to bundle (required). Images the release pins
	// must match; the others are pinned to what the source gives.
	Release *release.Release
	// Output is the bundle file. It is written to a temporary file next to
	// it and renamed when complete; on any error nothing is left behind.
	Output string
	// Source gives the images (default: their registries, RemoteSource).
	Source Source
	// PlatformImages is where the platform's own images are published
	// (spec.images.platform; default quay.io/codefresh).
	PlatformImages string
	// Platform is recorded in bundle.json (default linux/amd64); it should
	// be the platform the Source picks.
	Platform *v1.Platform
	// Charts and Manifests are the trees to carry (default: the ones
	// embedded in this onprem, charts.FS and manifests.FS).
	Charts    fs.FS
	Manifests fs.FS
	// RuntimeChart says how the release's runtime chart (release.Runtime,
	// a chart of a remote repository) is fetched: credentials, CA, plain
	// HTTP, cache. The bundle carries it unpacked under charts/<chart>/
	// and its release manifest pins the archive's digest (runtime.digest).
	RuntimeChart chartfetch.Options
	// RuntimeChartRepository, when set, is used instead of the release's
	// runtime.repository: a mirror of it (oci://HOST/PATH or an https
	// Helm repository).
	RuntimeChartRepository string
	// RenderedImages, when set, returns every image the release's charts
	// render with its values (render.ReleaseImages), given the runtime
	// chart the bundle carries (nil without one): the bundle carries them
	// all, the release's images and, named by their reference, the ones
	// an upstream chart runs by itself. Without it, the release's images.
	RenderedImages func(ctx context.Context, runtimeChart *chartv2.Chart) ([]string, error)
	// SigningKey signs the checksums and every image (cosign's form, which
	// push attaches to the relocated images) (optional).
	SigningKey ed25519.PrivateKey
	// SourceKeys, when given, are the keys the source registry's image
	// signatures must verify with: an image whose source holds signatures
	// of which none is valid with them is refused (SourceSignatureError).
	// Without them, the source's signatures are carried unverified.
	SourceKeys signing.Keyring
	// SBOMCache keeps each layer's scan by digest, so that a layer
	// another bundle carried already is not scanned again (the zero
	// value: none; sbom.DefaultLayerCache is the user's).
	SBOMCache sbom.LayerCache
	// Concurrency bounds the images resolved at once (default 4).
	Concurrency int
	// Progress receives byte counts while blobs are copied.
	Progress ProgressFunc
	// Created is recorded as the creation time (default: now).
	Created time.Time
}

// CreateResult describes a bundle written by Create.
type CreateResult struct {
	Path    string `json:"path"`
	Release string `json:"release"`
	Images  int    `json:"images"`
	Blobs   int    `json:"blobs"`
	// SBOMPackages counts the packages the images' SBOMs list.
	SBOMPackages int `json:"sbomPackages"`
	// ImagesSigned counts the images signed with the bundle's key;
	// SourceSigned those whose source registry held signatures (carried),
	// SourceVerified those of which one verified with SourceKeys.
	ImagesSigned int `json:"imagesSigned"`
	// LayersScanned counts the layers scanned for the SBOMs, LayersCached
	// those whose scan the SBOM layer cache had.
	LayersScanned  int `json:"layersScanned"`
	LayersCached   int `json:"layersCached"`
	SourceSigned   int `json:"sourceSigned"`
	SourceVerified int `json:"sourceVerified"`
	// Size is the size of the bundle file in bytes.
	Size   int64  `json:"size"`
	Signed bool   `json:"signed"`
	KeyID  string `json:"keyID,omitempty"`
	// Seconds is how long it took.
	Seconds float64 `json:"seconds"`
}

// resolvedImage is one release image with its manifest, ready to write.
type resolvedImage struct {
	img       release.Image // Digest filled in
	source    string
	raw       []byte
	mediaType types.MediaType
	platform  *v1.Platform
	blobs     []blob // config then layers
}

type blob struct {
	digest v1.Hash
	size   int64
	open   func() (io.ReadCloser, error)
	// layer says the blob is a file system layer, scanned for the SBOM.
	layer bool
}

// Create writes a bundle of a release: its images as one OCI layout (blobs
// stored once), the release manifest with every digest pinned, the charts
// and manifests trees (with the release's runtime chart, fetched from its
// chart repository and unpacked beside the others), the checksums and,
// with a key, their signature.
func Create(ctx context.Context, opts CreateOptions) (res *CreateResult, err error) {
	start := time.Now()
	if opts.Release == nil {
		return nil, errors.New("create bundle: no release")
	}
	if opts.Output == "" {
		return nil, errors.New("create bundle: no output file")
	}
	if opts.Source == nil {
		opts.Source = RemoteSource(RemoteOptions{})
	}
	if opts.PlatformImages == "" {
		opts.PlatformImages = config.DefaultPlatformImages
	}
	if opts.Charts == nil {
		opts.Charts = charts.FS
	}
	if opts.Manifests == nil {
		opts.Manifests = manifests.FS
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Created.IsZero() {
		opts.Created = time.Now()
	}
	opts.Created = opts.Created.UTC().Truncate(time.Second)
	platform := DefaultPlatform
	if opts.Platform != nil {
		platform = *opts.Platform
	}
	rel := opts.Release
	chartNames, err := charts.NamesIn(opts.Charts)
	if err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	for _, c := range rel.Components {
		if !slices.Contains(chartNames, c.Chart) {
			return nil, fmt.Errorf("create bundle: component %s uses chart %q, which is not among the charts (%v)", c.Name, c.Chart, chartNames)
		}
	}
	runtimeChart, err := fetchRuntimeChart(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	if runtimeChart != nil {
		// The fetched chart is the one carried, not a folder of the same
		// name in the charts tree.
		chartNames = slices.DeleteFunc(chartNames, func(n string) bool { return n == rel.Runtime.Chart })
	}

	if opts.RenderedImages != nil {
		var ch *chartv2.Chart
		if runtimeChart != nil {
			if ch, err = loader.LoadArchive(bytes.NewReader(runtimeChart.archive.Data)); err != nil {
				return nil, fmt.Errorf("create bundle: the runtime chart: %w", err)
			}
		}
		refs, err := opts.RenderedImages(ctx, ch)
		if err != nil {
			return nil, fmt.Errorf("create bundle: %w", err)
		}
		withRendered := *rel
		if withRendered.Images, err = CarriedImages(rel, refs, opts.PlatformImages); err != nil {
			return nil, fmt.Errorf("create bundle: %w", err)
		}
		rel = &withRendered
	}

	slog.Info("bundle: resolving images", "release", rel.Version, "images", len(rel.Images))
	resolved, err := resolveImages(ctx, opts.Source, rel, opts.PlatformImages, opts.Concurrency)
	if err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}

	// The pinned release: every image's digest is what the bundle holds.
	pinned := *rel
	pinned.Images = make([]release.Image, len(resolved))
	for i, r := range resolved {
		pinned.Images[i] = r.img
	}
	if runtimeChart != nil {
		rc := *rel.Runtime
		rc.Digest = runtimeChart.archive.Digest
		pinned.Runtime = &rc
	}
	relYAML, err := yaml.Marshal(&pinned)
	if err != nil {
		return nil, fmt.Errorf("create bundle: encoding the release manifest: %w", err)
	}
	if _, err := release.Parse(relYAML); err != nil {
		return nil, fmt.Errorf("create bundle: the pinned release manifest does not validate: %w", err)
	}

	meta := &Metadata{
		FormatVersion: FormatVersion, Release: rel.Version, Created: opts.Created,
		Creator: "onprem " + version.Version, PlatformImages: opts.PlatformImages,
		Platform: platform.String(), SBOM: SBOMFormat,
	}
	if opts.SigningKey != nil {
		pub, ok := opts.SigningKey.Public().(ed25519.PublicKey)
		if !ok || len(opts.SigningKey) != ed25519.PrivateKeySize {
			return nil, errors.New("create bundle: the signing key is not a valid ed25519 private key")
		}
		meta.KeyID = signing.KeyID(pub)
		meta.ImageSignatures = ImageSignatureFormat
	}
	sigs := make([]*ImageSignatures, len(resolved))
	if err := parallel(ctx, opts.Concurrency, len(resolved), func(ctx context.Context, i int) (err error) {
		sigs[i], err = imageSignatures(ctx, opts.Source, &resolved[i], opts.SigningKey, meta.KeyID, opts.SourceKeys)
		return err
	}); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	metaJSON, err := encodeMetadata(meta)
	if err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}

	// Write to a temporary file next to the output; rename when complete.
	dir := filepath.Dir(opts.Output)
	f, err := os.CreateTemp(dir, "."+filepath.Base(opts.Output)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			if rmErr := os.Remove(tmp); rmErr != nil && !errors.Is(rmErr, fs.ErrNotExist) {
				slog.Warn("bundle: could not remove the partial file", "path", tmp, "err", rmErr)
			}
		}
	}()

	m := newMeter("create", opts.Progress)
	seen := map[v1.Hash]bool{}
	var total int64
	for _, r := range resolved {
		for _, b := range r.blobs {
			if !seen[b.digest] {
				seen[b.digest] = true
				total += b.size
			}
		}
	}
	m.total.Store(total)

	var w io.Writer = f
	if testWrapOutput != nil {
		w = testWrapOutput(f)
	}
	out := newTarOut(ctx, w, opts.Created)
	if err := out.bytes(ociLayoutFile, []byte(`{"imageLayoutVersion":"1.0.0"}`+"\n")); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	written := map[v1.Hash]bool{}
	// Every layer is scanned for the SBOM once written (once, however many
	// images share it), read back from the file while the next blobs are
	// copied, on every core.
	scans := newLayerScans(f, runtime.NumCPU())
	scans.cache = opts.SBOMCache
	defer scans.wait() // before the file is closed, on every return
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, r := range resolved {
		m.setItem(r.img.Name)
		for _, b := range r.blobs {
			if written[b.digest] {
				continue
			}
			if err := writeBlob(out, b, m); err != nil {
				return nil, fmt.Errorf("create bundle: %w", &ImageError{Name: r.img.Name, Reference: r.source, Err: err})
			}
			if b.layer {
				scans.start(b.digest, out.dataStart, b.size)
			}
			written[b.digest] = true
		}
		d, err := v1.NewHash(r.img.Digest)
		if err != nil {
			return nil, fmt.Errorf("create bundle: image %s: %w", r.img.Name, err)
		}
		if !written[d] {
			if err := out.bytes(blobPath(d.Hex), r.raw); err != nil {
				return nil, fmt.Errorf("create bundle: %w", err)
			}
			written[d] = true
		}
		index.Manifests = append(index.Manifests, v1.Descriptor{
			MediaType: r.mediaType, Digest: d, Size: int64(len(r.raw)),
			Annotations: map[string]string{
				AnnotationImageName:  r.img.Name,
				AnnotationSource:     r.source,
				annotationContainerd: r.source,
				annotationRefName:    r.img.Tag,
			},
			Platform: r.platform,
		})
	}
	indexJSON, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("create bundle: encoding %s: %w", indexFile, err)
	}
	if err := out.bytes(indexFile, append(indexJSON, '\n')); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	if err := out.bytes(releasePath(rel.Version), relYAML); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	for _, c := range chartNames {
		if _, err := out.tree(opts.Charts, c, chartsDir); err != nil {
			return nil, fmt.Errorf("create bundle: %w", err)
		}
	}
	if runtimeChart != nil {
		for _, f := range runtimeChart.files {
			if err := out.bytes(path.Join(chartsDir, rel.Runtime.Chart, f.Name), f.Data); err != nil {
				return nil, fmt.Errorf("create bundle: the runtime chart: %w", err)
			}
		}
	}
	if _, err := out.tree(opts.Manifests, ".", manifestsDir); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	scanned := scans.wait()
	packages := 0
	for _, r := range resolved {
		var layers []*sbom.Layer
		for _, b := range r.blobs {
			if l := scanned[b.digest]; b.layer && l != nil {
				layers = append(layers, l)
			}
		}
		inv := sbom.Merge(r.img.Name, r.source, r.img.Digest, layers)
		var buf bytes.Buffer
		doc := sbom.Document{
			Name:      inv.Image + " " + inv.Reference,
			Namespace: "https://onprem.dev/spdx/" + rel.Version + "/" + inv.Image + "/" + strings.TrimPrefix(inv.Digest, "sha256:"),
			Tool:      "onprem-" + version.Version, Created: opts.Created,
		}
		if err := sbom.WriteSPDX(&buf, doc, inv); err != nil {
			return nil, fmt.Errorf("create bundle: the SBOM of image %s: %w", inv.Image, err)
		}
		if err := out.bytes(sbomPath(inv.Image), buf.Bytes()); err != nil {
			return nil, fmt.Errorf("create bundle: %w", err)
		}
		packages += len(inv.Packages)
	}
	signed, sourceSigned, sourceVerified := 0, 0, 0
	for _, is := range sigs {
		if is == nil {
			continue
		}
		src, verified := false, false
		for _, s := range is.Signatures {
			switch s.From {
			case FromBundle:
				signed++
			case FromSource:
				src = true
				verified = verified || s.VerifiedBy != ""
			}
		}
		if src {
			sourceSigned++
		}
		if verified {
			sourceVerified++
		}
		data, err := json.MarshalIndent(is, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("create bundle: the signatures of image %s: %w", is.Image, err)
		}
		if err := out.bytes(signaturesPath(is.Image), append(data, '\n')); err != nil {
			return nil, fmt.Errorf("create bundle: %w", err)
		}
	}
	if err := out.bytes(metadataFile, metaJSON); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	sums := encodeChecksums(out.sums)
	if err := out.bytes(checksumsFile, sums); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	if opts.SigningKey != nil {
		if err := out.bytes(signatureFile, ed25519.Sign(opts.SigningKey, sums)); err != nil {
			return nil, fmt.Errorf("create bundle: %w", err)
		}
	}
	if err := out.close(); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	if err := os.Rename(tmp, opts.Output); err != nil {
		return nil, fmt.Errorf("create bundle: %w", err)
	}
	syncDir(dir)
	m.finish()
	res = &CreateResult{
		Path: opts.Output, Release: rel.Version, Images: len(resolved), Blobs: len(written), SBOMPackages: packages,
		ImagesSigned: signed, SourceSigned: sourceSigned, SourceVerified: sourceVerified,
		LayersScanned: len(scanned) - scans.cached, LayersCached: scans.cached,
		Size: st.Size(), Signed: opts.SigningKey != nil, KeyID: meta.KeyID,
		Seconds: time.Since(start).Seconds(),
	}
	slog.Info("bundle: written", "path", res.Path, "size", res.Size, "images", res.Images, "blobs", res.Blobs)
	return res, nil
}

// runtimeChart is the release's runtime chart, fetched, and its files.
type runtimeChart struct {
	archive *chartfetch.Archive
	files   []chartfetch.File
}

// fetchRuntimeChart fetches the release's runtime chart (nil when the
// release has none) from its repository or opts.RuntimeChartRepository.
// A digest the release pins must match.
func fetchRuntimeChart(ctx context.Context, opts CreateOptions) (*runtimeChart, error) {
	rel := opts.Release
	if rel.Runtime == nil {
		return nil, nil
	}
	for _, c := range rel.Components {
		if c.Chart == rel.Runtime.Chart {
			return nil, fmt.Errorf("component %s uses chart %q, the name of the release's runtime chart: a bundle cannot carry both", c.Name, c.Chart)
		}
	}
	src := chartfetch.FromRelease(rel.Runtime)
	if opts.RuntimeChartRepository != "" {
		src.Repository = opts.RuntimeChartRepository
	}
	slog.Info("bundle: fetching the runtime chart", "chart", src.Chart, "version", src.Version, "repository", src.Repository)
	a, err := chartfetch.Fetch(ctx, src, opts.RuntimeChart)
	if err != nil {
		return nil, fmt.Errorf("the runtime chart: %w", err)
	}
	files, err := a.Files()
	if err != nil {
		return nil, fmt.Errorf("the runtime chart %s: %w", src, err)
	}
	for _, f := range files {
		if p := path.Join(chartsDir, src.Chart, f.Name); !validEntryName(p) {
			return nil, fmt.Errorf("the runtime chart %s: file %q cannot be stored in a bundle", src, f.Name)
		}
	}
	return &runtimeChart{archive: a, files: files}, nil
}

// testWrapOutput lets tests put a failing writer (a full disk) between
// Create and its file.
var testWrapOutput func(io.Writer) io.Writer

// syncDir makes a rename in dir durable (best effort).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

// writeBlob copies one blob into the bundle and checks its digest.
func writeBlob(out *tarOut, b blob, m *meter) error {
	rc, err := b.open()
	if err != nil {
		return fmt.Errorf("blob %s: %w", b.digest, err)
	}
	defer rc.Close()
	sum, err := out.copyFile(blobPath(b.digest.Hex), b.size, rc, m)
	if err != nil {
		return fmt.Errorf("blob %s: %w", b.digest, err)
	}
	if sum != b.digest.Hex {
		return fmt.Errorf("blob %s: the source's content has digest sha256:%s", b.digest, sum)
	}
	return nil
}

// layerScans scans written layers for the SBOM in the background, a few
// at a time, reading them back from the bundle file (the page cache, not
// the source again).
type layerScans struct {
	ra     io.ReaderAt
	sem    chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	layers map[v1.Hash]*sbom.Layer
	cache  sbom.LayerCache
	// cached counts the layers the cache had.
	cached int
}

func newLayerScans(ra io.ReaderAt, n int) *layerScans {
	return &layerScans{ra: ra, sem: make(chan struct{}, max(1, n)), layers: map[v1.Hash]*sbom.Layer{}}
}

// start scans the layer d written at off (size bytes). A layer that cannot
// be scanned (not a tar) gets a note in the SBOM, not an error.
func (s *layerScans) start(d v1.Hash, off, size int64) {
	if l, ok := s.cache.Get(d); ok {
		s.mu.Lock()
		s.layers[d] = l
		s.cached++
		s.mu.Unlock()
		return
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.sem <- struct{}{}
		defer func() { <-s.sem }()
		l, err := scanLayerStream(io.NewSectionReader(s.ra, off, size))
		if err != nil {
			l = &sbom.Layer{Notes: []string{fmt.Sprintf("layer %s was not scanned: %v", d, err)}}
		} else if err := s.cache.Put(d, l); err != nil {
			slog.Warn("bundle: the SBOM layer cache", "layer", d, "err", err)
		}
		s.mu.Lock()
		s.layers[d] = l
		s.mu.Unlock()
	}()
}

// wait waits for every scan and returns the layers by digest.
func (s *layerScans) wait() map[v1.Hash]*sbom.Layer {
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.layers
}

func scanLayerStream(r io.Reader) (*sbom.Layer, error) {
	u, err := sbom.Uncompress(r)
	if err != nil {
		return nil, err
	}
	defer u.Close()
	return sbom.ScanLayer(u)
}

// resolveImages asks the source for every image of the release, a few at a
// time, and reads their manifests.
func resolveImages(ctx context.Context, src Source, rel *release.Release, platformImages string, concurrency int) ([]resolvedImage, error) {
	out := make([]resolvedImage, len(rel.Images))
	errs := make([]error, len(rel.Images))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, img := range rel.Images {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				errs[i] = ctx.Err()
				return
			}
			defer func() { <-sem }()
			r, err := resolveImage(ctx, src, img, platformImages)
			if err != nil {
				errs[i] = err
				return
			}
			out[i] = *r
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func resolveImage(ctx context.Context, src Source, img release.Image, platformImages string) (*resolvedImage, error) {
	ref := images.Repository(img, platformImages) + ":" + img.Tag
	fail := func(err error) error { return &ImageError{Name: img.Name, Reference: ref, Err: err} }
	vi, err := src.Image(ctx, ImageRequest{Name: img.Name, Reference: ref, Digest: img.Digest})
	if err != nil {
		return nil, fail(err)
	}
	raw, err := vi.RawManifest()
	if err != nil {
		return nil, fail(fmt.Errorf("reading the manifest: %w", err))
	}
	digest, _, err := v1.SHA256(bytes.NewReader(raw))
	if err != nil {
		return nil, fail(err)
	}
	if img.Digest != "" && digest.String() != img.Digest {
		if idx, ok := indexDigest(vi); !ok || idx.String() != img.Digest {
			return nil, fail(fmt.Errorf("the source has %s, the release pins %s", digest, img.Digest))
		}
	}
	mt, err := vi.MediaType()
	if err != nil {
		return nil, fail(err)
	}
	if !mt.IsImage() {
		return nil, fail(fmt.Errorf("media type %s is not an image manifest", mt))
	}
	man, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fail(fmt.Errorf("parsing the manifest: %w", err))
	}
	cfg, err := vi.RawConfigFile()
	if err != nil {
		return nil, fail(fmt.Errorf("reading the config: %w", err))
	}
	cfgDigest, cfgSize, err := v1.SHA256(bytes.NewReader(cfg))
	if err != nil {
		return nil, fail(err)
	}
	if cfgDigest != man.Config.Digest || cfgSize != man.Config.Size {
		return nil, fail(fmt.Errorf("the config is %s (%d bytes), the manifest says %s (%d bytes)", cfgDigest, cfgSize, man.Config.Digest, man.Config.Size))
	}
	r := &resolvedImage{source: ref, raw: raw, mediaType: mt}
	if cf, err := v1.ParseConfigFile(bytes.NewReader(cfg)); err == nil && cf.OS != "" {
		r.platform = cf.Platform()
	}
	r.img = img
	r.img.Digest = digest.String()
	r.blobs = append(r.blobs, blob{digest: cfgDigest, size: cfgSize, open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(cfg)), nil
	}})
	for _, l := range man.Layers {
		if len(l.URLs) > 0 {
			return nil, fail(fmt.Errorf("layer %s is a foreign layer (fetched from %v), which a bundle cannot carry", l.Digest, l.URLs))
		}
		layer, err := vi.LayerByDigest(l.Digest)
		if err != nil {
			return nil, fail(fmt.Errorf("layer %s: %w", l.Digest, err))
		}
		r.blobs = append(r.blobs, blob{digest: l.Digest, size: l.Size, open: layer.Compressed, layer: l.MediaType.IsLayer()})
	}
	return r, nil
}

// CarriedImages is the release's images and, after them, every rendered
// reference that is none of them: an image an upstream chart runs by
// itself (the runtime chart's), named by its reference and marked with
// the runtime chart that brought it.
func CarriedImages(rel *release.Release, refs []string, platformImages string) ([]release.Image, error) {
	out := slices.Clone(rel.Images)
	have := map[string]bool{}
	for _, img := range rel.Images {
		have[images.Repository(img, platformImages)+":"+img.Tag] = true
		if img.Chart != "" {
			// Already carried (a bundle's release made again): named by
			// the reference the chart renders, wherever it is taken from.
			have[img.Name] = true
		}
	}
	chart := ""
	if rel.Runtime != nil {
		chart = rel.Runtime.Chart + "-" + rel.Runtime.ChartVersion
	}
	for _, ref := range refs {
		repo, tag, digest := images.SplitReference(ref)
		if have[repo+":"+tag] || have[ref] {
			continue
		}
		if tag == "" {
			return nil, fmt.Errorf("image %s, which the charts render, names no tag: a bundle carries images by tag", ref)
		}
		have[ref] = true
		out = append(out, release.Image{Name: ref, Repository: repo, Tag: tag, Digest: digest, Chart: chart})
	}
	return out, nil
}
