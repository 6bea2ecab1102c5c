package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/sbom"
)

// OpenOptions say how much Open checks.
type OpenOptions struct {
	// Trust says whose signatures are accepted. Open refuses a bundle that
	// is unsigned, signed by a key not in Trust.Keys, or whose signature
	// does not verify (unless Trust.AllowUnsigned, see Trust). The zero
	// value trusts no key: every bundle is refused.
	Trust Trust
	// DeferTrust opens the bundle without judging its signature: the
	// caller must call CheckTrust before it uses anything in it (for a
	// keyring that is only known once the bundle's release is read).
	DeferTrust bool
	// SkipVerify only indexes the file and trusts its content (fast: for
	// inspect). The checksums of blobs' names and the structure are still
	// checked; the file contents are not read.
	SkipVerify bool
	// Progress receives byte counts while the checksums are verified.
	Progress ProgressFunc
}

// Bundle is an opened bundle file. Its files are read in place; Close it
// when done.
type Bundle struct {
	path  string
	f     *os.File
	size  int64
	fsys  *tarFS
	order []string // file names in tar order
	meta  Metadata
	rel   *release.Release

	images []bundleImage
	byName map[string]int

	signed      bool
	verified    bool
	sigVerified bool
	sums, sig   []byte
	provenance  *Provenance
}

// bundleImage is one release image in the bundle's layout.
type bundleImage struct {
	img      release.Image
	source   string
	desc     v1.Descriptor
	raw      []byte
	manifest *v1.Manifest
}

// Limits of the small files read into memory.
const (
	maxChecksumsSize = 64 << 20
	maxSmallFileSize = 64 << 20
)

// Open opens a bundle: it reads the tar's index, verifies the SHA-256 of
// every file against the checksums file (streaming, unless
// opts.SkipVerify) and judges the signature against opts.Trust, then
// reads the metadata, the release manifest and the image index and checks
// that every image the release names is complete in the bundle.
// A mismatch is a *CorruptError naming the file.
func Open(ctx context.Context, p string, opts OpenOptions) (_ *Bundle, err error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("opening bundle: %w", err)
	}
	b := &Bundle{path: p, f: f}
	defer func() {
		if err != nil {
			_ = f.Close()
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("opening bundle: %w", err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("opening bundle: %s is not a file", p)
	}
	b.size = st.Size()
	sumsData, sigData, computed, err := b.scan(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := b.checkSums(sumsData, computed, !opts.SkipVerify); err != nil {
		return nil, err
	}
	b.verified = !opts.SkipVerify
	if err := b.load(); err != nil {
		return nil, err
	}
	b.signed = sigData != nil
	b.sums, b.sig = sumsData, sigData
	// The signature is judged only when the content it covers was checked
	// (not for SkipVerify, which inspect uses to read the index).
	if !opts.SkipVerify && !opts.DeferTrust {
		if _, err := b.CheckTrust(opts.Trust); err != nil {
			return nil, err
		}
	}
	slog.Debug("bundle: opened", "path", p, "release", b.rel.Version, "verified", b.verified, "signatureVerified", b.sigVerified)
	return b, nil
}

func (b *Bundle) corrupt(file, format string, a ...any) error {
	return &CorruptError{Path: b.path, File: file, Reason: fmt.Sprintf(format, a...)}
}

// scan walks the tar once: records where every file is and, when
// verifying, hashes every file.
func (b *Bundle) scan(ctx context.Context, opts OpenOptions) (sums, sig []byte, computed map[string]string, err error) {
	m := newMeter("verify", opts.Progress)
	m.total.Store(b.size)
	files := map[string]*entry{}
	computed = map[string]string{}
	tr := tar.NewReader(b.f)
	buf := make([]byte, 1<<20)
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, nil, fmt.Errorf("opening bundle %s: %w", b.path, err)
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, nil, b.corrupt("", "not a tar file, or truncated: %v", err)
		}
		switch hdr.Typeflag {
		case tar.TypeReg:
		case tar.TypeDir:
			continue
		default:
			return nil, nil, nil, b.corrupt(hdr.Name, "is not a regular file (tar type %q)", hdr.Typeflag)
		}
		if !validEntryName(hdr.Name) {
			return nil, nil, nil, b.corrupt(hdr.Name, "is not a valid path inside a bundle")
		}
		if _, dup := files[hdr.Name]; dup {
			return nil, nil, nil, b.corrupt(hdr.Name, "appears twice")
		}
		off, err := b.f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("opening bundle %s: %w", b.path, err)
		}
		files[hdr.Name] = &entry{name: hdr.Name, off: off, size: hdr.Size, mtime: hdr.ModTime}
		b.order = append(b.order, hdr.Name)
		m.setItem(hdr.Name)
		switch hdr.Name {
		case checksumsFile:
			if hdr.Size > maxChecksumsSize {
				return nil, nil, nil, b.corrupt(hdr.Name, "is too large (%d bytes)", hdr.Size)
			}
			if sums, err = io.ReadAll(tr); err != nil {
				return nil, nil, nil, b.corrupt(hdr.Name, "cannot be read: %v", err)
			}
		case signatureFile:
			if hdr.Size != ed25519.SignatureSize {
				return nil, nil, nil, b.corrupt(hdr.Name, "is %d bytes, an ed25519 signature is %d", hdr.Size, ed25519.SignatureSize)
			}
			if sig, err = io.ReadAll(tr); err != nil {
				return nil, nil, nil, b.corrupt(hdr.Name, "cannot be read: %v", err)
			}
		default:
			if opts.SkipVerify {
				continue
			}
			h := sha256.New()
			if _, err := io.CopyBuffer(h, &meterReader{ctx: ctx, r: tr, m: m}, buf); err != nil {
				if ctx.Err() != nil {
					return nil, nil, nil, fmt.Errorf("verifying bundle %s: %w", b.path, ctx.Err())
				}
				return nil, nil, nil, b.corrupt(hdr.Name, "cannot be read (truncated bundle?): %v", err)
			}
			computed[hdr.Name] = hex.EncodeToString(h.Sum(nil))
		}
	}
	if len(files) == 0 {
		return nil, nil, nil, b.corrupt("", "it holds no files (not a bundle)")
	}
	for name := range files {
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if _, clash := files[dir]; clash {
				return nil, nil, nil, b.corrupt(dir, "is both a file and a folder")
			}
		}
	}
	if sums == nil {
		return nil, nil, nil, b.corrupt("", "it has no %s file: not a bundle, or truncated", checksumsFile)
	}
	b.fsys = newTarFS(b.f, files)
	m.finish()
	return sums, sig, computed, nil
}

// checkSums compares the checksums file with the bundle's files (and, when
// verify is set, with their computed digests).
func (b *Bundle) checkSums(data []byte, computed map[string]string, verify bool) error {
	listed, err := parseChecksums(data)
	if err != nil {
		return b.corrupt(checksumsFile, "is not valid: %v", err)
	}
	for _, name := range b.order {
		if name == checksumsFile || name == signatureFile {
			continue
		}
		want, ok := listed[name]
		if !ok {
			return b.corrupt(name, "is not listed in %s", checksumsFile)
		}
		if verify && computed[name] != want {
			return b.corrupt(name, "does not match its checksum (sha256 %s, %s says %s)", computed[name], checksumsFile, want)
		}
		if h := blobHex(name); h != "" && h != want {
			return b.corrupt(name, "is listed with checksum %s, not its own name", want)
		}
	}
	for name := range listed {
		if _, ok := b.fsys.files[name]; !ok {
			return b.corrupt(name, "is listed in %s but missing", checksumsFile)
		}
	}
	return nil
}

func (b *Bundle) readSmall(name string) ([]byte, error) {
	e, ok := b.fsys.files[name]
	if !ok {
		return nil, b.corrupt(name, "is missing")
	}
	if e.size > maxSmallFileSize {
		return nil, b.corrupt(name, "is too large (%d bytes)", e.size)
	}
	return b.fsys.ReadFile(name)
}

// load reads bundle.json, the release manifest and the image index, and
// checks that every release image is in the layout with all its blobs.
func (b *Bundle) load() error {
	data, err := b.readSmall(metadataFile)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b.meta); err != nil {
		return b.corrupt(metadataFile, "is not valid: %v", err)
	}
	if err := b.meta.validate(); err != nil {
		return &CorruptError{Path: b.path, Reason: err.Error()}
	}
	rels, err := fs.Sub(b.fsys, releasesDir)
	if err != nil {
		return fmt.Errorf("bundle %s: %w", b.path, err)
	}
	set, err := release.LoadFS(rels)
	if err != nil {
		return b.corrupt(releasesDir, "does not hold valid release manifests: %v", err)
	}
	if b.rel, err = set.Get(b.meta.Release); err != nil {
		return b.corrupt(releasePath(b.meta.Release), "is missing: %v", err)
	}

	data, err = b.readSmall(indexFile)
	if err != nil {
		return err
	}
	index, err := v1.ParseIndexManifest(bytes.NewReader(data))
	if err != nil {
		return b.corrupt(indexFile, "is not valid: %v", err)
	}
	descs := map[string]v1.Descriptor{}
	for _, d := range index.Manifests {
		if n := d.Annotations[AnnotationImageName]; n != "" {
			descs[n] = d
		}
	}
	b.byName = map[string]int{}
	for _, img := range b.rel.Images {
		d, ok := descs[img.Name]
		if !ok {
			return b.corrupt(indexFile, "has no entry for image %s", img.Name)
		}
		if img.Digest == "" || d.Digest.String() != img.Digest {
			return b.corrupt(indexFile, "holds %s for image %s, the release pins %q", d.Digest, img.Name, img.Digest)
		}
		raw, err := b.blobBytes(d.Digest, d.Size)
		if err != nil {
			return err
		}
		man, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			return b.corrupt(blobPath(d.Digest.Hex), "is not an image manifest (image %s): %v", img.Name, err)
		}
		for _, l := range append([]v1.Descriptor{man.Config}, man.Layers...) {
			if err := b.checkBlob(l.Digest, l.Size); err != nil {
				return fmt.Errorf("image %s: %w", img.Name, err)
			}
		}
		if b.meta.SBOM != "" {
			if _, ok := b.fsys.files[sbomPath(img.Name)]; !ok {
				return b.corrupt(sbomPath(img.Name), "is missing (%s says the bundle holds an SBOM of every image)", metadataFile)
			}
		}
		if b.meta.ImageSignatures != "" {
			if _, ok := b.fsys.files[signaturesPath(img.Name)]; !ok {
				return b.corrupt(signaturesPath(img.Name), "is missing (%s says the bundle carries the signatures of every image)", metadataFile)
			}
		}
		b.byName[img.Name] = len(b.images)
		b.images = append(b.images, bundleImage{img: img, source: d.Annotations[AnnotationSource], desc: d, raw: raw, manifest: man})
	}
	return nil
}

// ErrNoSBOM says that a bundle holds no SBOMs: an older onprem made it.
var ErrNoSBOM = errors.New("the bundle holds no SBOMs (an onprem that wrote none made it): make it again with this onprem")

// SBOM returns the SPDX JSON SBOM of the release image name.
func (b *Bundle) SBOM(name string) ([]byte, error) {
	if b.meta.SBOM == "" {
		return nil, fmt.Errorf("bundle %s: %w", b.path, ErrNoSBOM)
	}
	if _, ok := b.byName[name]; !ok {
		return nil, fmt.Errorf("bundle %s: release %s has no image %q", b.path, b.rel.Version, name)
	}
	return b.readSmall(sbomPath(name))
}

// Inventories reads the SBOM of every image, in the release's order.
func (b *Bundle) Inventories() ([]*sbom.Inventory, error) {
	var out []*sbom.Inventory
	for _, img := range b.images {
		inv, err := b.inventory(img.img.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, inv)
	}
	return out, nil
}

// inventory reads the SBOM of the image name.
func (b *Bundle) inventory(name string) (*sbom.Inventory, error) {
	data, err := b.SBOM(name)
	if err != nil {
		return nil, err
	}
	invs, err := sbom.ReadSPDX(bytes.NewReader(data))
	if err != nil || len(invs) != 1 {
		return nil, b.corrupt(sbomPath(name), "is not the SPDX SBOM of one image: %v", err)
	}
	return invs[0], nil
}

// checkBlob checks that a blob is in the bundle with the size expected.
func (b *Bundle) checkBlob(d v1.Hash, size int64) error {
	if d.Algorithm != "sha256" {
		return b.corrupt(d.String(), "uses digest algorithm %s; bundles hold sha256 blobs", d.Algorithm)
	}
	e, ok := b.fsys.files[blobPath(d.Hex)]
	if !ok {
		return b.corrupt(blobPath(d.Hex), "is missing")
	}
	if e.size != size {
		return b.corrupt(blobPath(d.Hex), "is %d bytes, its manifest says %d", e.size, size)
	}
	return nil
}

func (b *Bundle) blobBytes(d v1.Hash, size int64) ([]byte, error) {
	if err := b.checkBlob(d, size); err != nil {
		return nil, err
	}
	return b.readSmall(blobPath(d.Hex))
}

// blobReader reads a blob in place.
func (b *Bundle) blobReader(d v1.Hash) (*io.SectionReader, error) {
	e, ok := b.fsys.files[blobPath(d.Hex)]
	if !ok {
		return nil, b.corrupt(blobPath(d.Hex), "is missing")
	}
	return io.NewSectionReader(b.f, e.off, e.size), nil
}

// Close releases the bundle file.
func (b *Bundle) Close() error {
	if err := b.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}

// Path is the bundle's file.
func (b *Bundle) Path() string { return b.path }

// Metadata is the bundle's bundle.json.
func (b *Bundle) Metadata() Metadata { return b.meta }

// Release is the bundle's release manifest: every image digest pinned.
func (b *Bundle) Release() *release.Release { return b.rel }

// Charts is the bundle's charts tree, laid out like charts.FS (one folder
// per chart).
func (b *Bundle) Charts() fs.FS { return b.sub(chartsDir) }

// Manifests is the bundle's kustomize tree, laid out like manifests.FS.
func (b *Bundle) Manifests() fs.FS { return b.sub(manifestsDir) }

func (b *Bundle) sub(dir string) fs.FS {
	s, err := fs.Sub(b.fsys, dir)
	if err != nil { // only for an invalid dir name, which these are not
		return b.fsys
	}
	return s
}

// Verified says whether every file was checked against the checksums.
func (b *Bundle) Verified() bool { return b.verified }

// Signed says whether the bundle carries a signature.
func (b *Bundle) Signed() bool { return b.signed }

// SignatureVerified says whether the signature was verified with a trusted
// key (see CheckTrust).
func (b *Bundle) SignatureVerified() bool { return b.sigVerified }

// VerifyResult is what Verify checked.
type VerifyResult struct {
	Path    string `json:"path"`
	Release string `json:"release"`
	// Files and Bytes count the files checked against the checksums.
	Files             int    `json:"files"`
	Bytes             int64  `json:"bytes"`
	Signed            bool   `json:"signed"`
	KeyID             string `json:"keyID,omitempty"`
	SignatureVerified bool   `json:"signatureVerified"`
	// TrustedBy is the trusted key the signature verified with;
	// Unverified why the bundle was accepted without (see Provenance).
	TrustedBy  string  `json:"trustedBy,omitempty"`
	Unverified string  `json:"unverified,omitempty"`
	Seconds    float64 `json:"seconds"`
}

// Verify opens a bundle with full verification and closes it.
func Verify(ctx context.Context, p string, opts OpenOptions) (*VerifyResult, error) {
	start := time.Now()
	opts.SkipVerify = false
	b, err := Open(ctx, p, opts)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	res := &VerifyResult{Path: p, Release: b.rel.Version, Signed: b.signed, KeyID: b.meta.KeyID, SignatureVerified: b.sigVerified}
	if pv := b.provenance; pv != nil {
		res.TrustedBy, res.Unverified = pv.TrustedBy, pv.Unverified
	}
	for _, name := range b.order {
		if name == checksumsFile || name == signatureFile {
			continue
		}
		res.Files++
		res.Bytes += b.fsys.files[name].size
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}
