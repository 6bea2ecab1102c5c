package chartfetch

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// Archive is a fetched chart: the .tgz as the repository serves it, its
// digest and the chart loaded from it.
type Archive struct {
	Data []byte
	// Digest is the SHA-256 of Data: sha256:<64 hex>.
	Digest string
	Chart  *chartv2.Chart
}

// File is one file of a chart archive.
type File struct {
	// Name is the file's slash path inside the chart's folder
	// (Chart.yaml, templates/deployment.yaml, charts/dep-1.0.0.tgz).
	Name string
	Data []byte
}

// Files lists the archive's files, sorted by name, paths relative to the
// chart's folder: writing each to DIR/CHART/NAME gives a chart tree that
// charts.LoadFrom (and Resolve) load. Names are checked clean relative
// paths, each once.
func (a *Archive) Files() ([]File, error) {
	bf, err := archive.LoadArchiveFiles(bytes.NewReader(a.Data))
	if err != nil {
		return nil, fmt.Errorf("unpacking chart archive %s: %w", a.Digest, err)
	}
	out := make([]File, 0, len(bf))
	seen := map[string]bool{}
	for _, f := range bf {
		if !fs.ValidPath(f.Name) || f.Name == "." || strings.Contains(f.Name, "\\") {
			return nil, fmt.Errorf("unpacking chart archive %s: %q is not a valid file name", a.Digest, f.Name)
		}
		if seen[f.Name] {
			return nil, fmt.Errorf("unpacking chart archive %s: %s appears twice", a.Digest, f.Name)
		}
		seen[f.Name] = true
		out = append(out, File{Name: f.Name, Data: f.Data})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Fetch downloads the chart's archive from its repository (or takes it
// from Options.CacheDir) and checks it: the pinned digest (or, unpinned,
// the digest an HTTP repository's index lists), a valid chart, the name
// and version asked for. Failures are *Error values (see the package
// documentation); a cancelled ctx is returned as such.
func Fetch(ctx context.Context, src Source, o Options) (*Archive, error) {
	u, err := src.check()
	if err != nil {
		return nil, err
	}
	var cached string
	if o.CacheDir != "" {
		cached = cachePath(o.CacheDir, src)
		if a := readCache(cached, src); a != nil {
			slog.Debug("chartfetch: from the cache", "chart", src.Chart, "version", src.Version, "file", cached)
			return a, nil
		}
	}
	base, err := newTransport(o)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", src, err)
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	slog.Debug("chartfetch: fetching", "chart", src.Chart, "version", src.Version, "repository", src.Repository)
	var data []byte
	var indexDigest string
	if u.Scheme == "oci" {
		data, err = fetchOCI(fctx, src, u, o, base)
	} else {
		data, indexDigest, err = fetchHTTP(fctx, src, u, o, base)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("fetching chart %s: %w", src, ctx.Err())
		}
		if fctx.Err() != nil {
			return nil, &Error{Kind: ErrUnreachable, Repository: src.Repository, Chart: src.Chart, Version: src.Version,
				Err: fmt.Errorf("no answer within %s: %w", timeout, fctx.Err())}
		}
		return nil, err
	}
	a, err := check(src, data, indexDigest)
	if err != nil {
		return nil, err
	}
	if cached != "" {
		if err := writeCache(cached, data); err != nil {
			slog.Warn("chartfetch: could not cache the chart", "chart", src.Chart, "version", src.Version, "err", err)
		}
	}
	return a, nil
}

// check makes an Archive of data if it is the chart asked for: its digest
// the pinned one (or the one the index lists when nothing is pinned), a
// valid chart, the right name and version.
func check(src Source, data []byte, indexDigest string) (*Archive, error) {
	sum := sha256.Sum256(data)
	a := &Archive{Data: data, Digest: "sha256:" + hex.EncodeToString(sum[:])}
	fail := func(kind error) *Error {
		return &Error{Kind: kind, Repository: src.Repository, Chart: src.Chart, Version: src.Version}
	}
	if src.Digest != "" && a.Digest != src.Digest {
		e := fail(ErrDigestMismatch)
		e.Want, e.Got = src.Digest, a.Digest
		return nil, e
	}
	if src.Digest == "" && indexDigest != "" {
		want := indexDigest
		if !strings.HasPrefix(want, "sha256:") {
			want = "sha256:" + want
		}
		if a.Digest != strings.ToLower(want) {
			e := fail(ErrDigestMismatch)
			e.Want, e.Got = want, a.Digest
			e.Err = errors.New("the digest the repository's index.yaml lists")
			return nil, e
		}
	}
	ch, err := loader.LoadArchive(bytes.NewReader(data))
	if err == nil {
		err = ch.Validate()
	}
	if err != nil {
		e := fail(ErrInvalidChart)
		e.Err = err
		return nil, e
	}
	if ch.Metadata.Name != src.Chart || ch.Metadata.Version != src.Version {
		e := fail(ErrWrongChart)
		e.Want, e.Got = src.Chart+" "+src.Version, ch.Metadata.Name+" "+ch.Metadata.Version
		return nil, e
	}
	a.Chart = ch
	return a, nil
}
