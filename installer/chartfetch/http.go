package chartfetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	repo "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"
)

// Limits of what is read from a repository.
const (
	maxIndexSize   = 64 << 20
	maxArchiveSize = 64 << 20
)

// fetchHTTP reads the index.yaml of a Helm repository and downloads the
// archive it lists for the chart's version. It returns the archive and
// the digest the index lists for it (may be empty).
func fetchHTTP(ctx context.Context, src Source, u *url.URL, o Options, base http.RoundTripper) ([]byte, string, error) {
	hc := &http.Client{Transport: base}
	repoURL := strings.TrimSuffix(src.Repository, "/")
	fail := func(kind error, at string, err error) *Error {
		return &Error{Kind: kind, Repository: src.Repository, Chart: src.Chart, Version: src.Version, URL: at, Err: err}
	}

	indexURL := repoURL + "/index.yaml"
	data, err := get(ctx, hc, indexURL, u, o, maxIndexSize)
	if err != nil {
		if e, ok := errors.AsType[*Error](err); ok && e.Kind == ErrNotFound {
			e.Err = errors.New("it has no index.yaml: is it a Helm chart repository?")
		}
		return nil, "", fillIn(err, src)
	}
	var index repo.IndexFile
	if err := yaml.Unmarshal(data, &index); err != nil {
		return nil, "", fail(ErrInvalidChart, indexURL, fmt.Errorf("index.yaml is not a valid repository index: %w", err))
	}
	if index.APIVersion == "" {
		return nil, "", fail(ErrInvalidChart, indexURL, errors.New("index.yaml is not a valid repository index: no apiVersion"))
	}
	var versions repo.ChartVersions
	for _, cv := range index.Entries[src.Chart] {
		if cv != nil && cv.Metadata != nil {
			versions = append(versions, cv)
		}
	}
	index.Entries[src.Chart] = versions
	index.SortEntries() // newest first
	var found *repo.ChartVersion
	var available []string
	for _, cv := range versions {
		available = append(available, cv.Version)
		if cv.Version == src.Version && found == nil {
			found = cv
		}
	}
	if found == nil {
		e := fail(ErrNotFound, indexURL, nil)
		e.Available = available
		if len(available) == 0 {
			e.Err = fmt.Errorf("its index has no chart named %s", src.Chart)
		}
		return nil, "", e
	}
	if len(found.URLs) == 0 {
		return nil, "", fail(ErrInvalidChart, indexURL, errors.New("index.yaml lists no URL for this version"))
	}
	chartURL, err := repo.ResolveReferenceURL(repoURL, found.URLs[0])
	if err != nil {
		return nil, "", fail(ErrInvalidChart, indexURL, fmt.Errorf("index.yaml lists a bad URL for this version: %w", err))
	}
	data, err = get(ctx, hc, chartURL, u, o, maxArchiveSize)
	if err != nil {
		if e, ok := errors.AsType[*Error](err); ok && e.Kind == ErrNotFound {
			e.Err = fmt.Errorf("its index lists %s, which the server does not have", chartURL)
		}
		return nil, "", fillIn(err, src)
	}
	return data, found.Digest, nil
}

// get downloads one file of a repository. Credentials go only to the
// repository's own scheme and host.
func get(ctx context.Context, hc *http.Client, target string, repoURL *url.URL, o Options, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, http.NoBody)
	if err != nil {
		return nil, &Error{Kind: ErrInvalidChart, URL: target, Err: err}
	}
	if (o.Username != "" || o.Password != "") && req.URL.Scheme == repoURL.Scheme && req.URL.Host == repoURL.Host {
		req.SetBasicAuth(o.Username, o.Password)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &Error{Kind: ErrUnreachable, URL: req.URL.Redacted(), Err: err, Hint: transportHint(err, o)}
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, &Error{Kind: ErrAuth, URL: req.URL.Redacted(), Err: fmt.Errorf("GET %s: HTTP %s", req.URL.Redacted(), resp.Status)}
	case resp.StatusCode == http.StatusNotFound:
		return nil, &Error{Kind: ErrNotFound, URL: req.URL.Redacted()}
	case resp.StatusCode != http.StatusOK:
		return nil, &Error{Kind: ErrUnreachable, URL: req.URL.Redacted(), Err: fmt.Errorf("HTTP %s", resp.Status)}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, &Error{Kind: ErrUnreachable, URL: req.URL.Redacted(), Err: fmt.Errorf("reading the answer: %w", err)}
	}
	if int64(len(data)) > limit {
		return nil, &Error{Kind: ErrInvalidChart, URL: req.URL.Redacted(), Err: fmt.Errorf("it is larger than %d MiB", limit>>20)}
	}
	return data, nil
}

// fillIn names the chart in an *Error made without it.
func fillIn(err error, src Source) error {
	if e, ok := errors.AsType[*Error](err); ok {
		e.Repository, e.Chart, e.Version = src.Repository, src.Chart, src.Version
	}
	return err
}
