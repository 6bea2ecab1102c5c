package bundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"onprem.dev/onprem/installer/images"
)

// registryClient speaks the OCI distribution API to one registry, with one
// authenticated transport for all the repositories a push touches (one
// ping, one token).
type registryClient struct {
	reg    name.Registry
	client *http.Client
}

func newRegistryClient(ctx context.Context, reg name.Registry, insecure bool, auth authn.Authenticator, base http.RoundTripper, repos []string, conns int) (*registryClient, error) {
	if base == nil {
		t := images.Transport(insecure)
		t.MaxIdleConnsPerHost = conns + 2
		base = t
	}
	scopes := make([]string, 0, len(repos))
	for _, r := range repos {
		scopes = append(scopes, reg.Repo(r).Scope(transport.PushScope))
	}
	rt, err := transport.NewWithContext(ctx, reg, auth, base, scopes)
	if err != nil {
		return nil, classify(reg, fmt.Errorf("connecting to registry %s: %w", reg, err))
	}
	return &registryClient{reg: reg, client: &http.Client{Transport: rt}}, nil
}

// classify turns 401 and 403 answers into an *AuthError.
func classify(reg name.Registry, err error) error {
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden) {
		return &AuthError{Host: reg.RegistryStr(), Err: err}
	}
	return err
}

func (c *registryClient) url(repo, kind, ref string) string {
	return fmt.Sprintf("%s://%s/v2/%s/%s/%s", c.reg.Scheme(), c.reg.RegistryStr(), repo, kind, ref)
}

func (c *registryClient) do(req *http.Request, codes ...int) (*http.Response, error) {
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, err
	}
	if err := transport.CheckError(resp, codes...); err != nil {
		resp.Body.Close()
		return nil, classify(c.reg, err)
	}
	return resp, nil
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
	_ = resp.Body.Close()
}

// blobExists asks (HEAD) whether repo has the blob.
func (c *registryClient) blobExists(ctx context.Context, repo string, d v1.Hash) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, c.url(repo, "blobs", d.String()), nil)
	if err != nil {
		return false, err
	}
	resp, err := c.do(req, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return false, fmt.Errorf("checking blob %s in %s: %w", d, repo, err)
	}
	drain(resp)
	return resp.StatusCode == http.StatusOK, nil
}

// startUpload opens an upload session in repo. With from set, it first
// asks the registry to mount the blob from that repository: mounted is
// true if it did (no upload needed).
func (c *registryClient) startUpload(ctx context.Context, repo string, d v1.Hash, from string) (location string, mounted bool, err error) {
	u := c.url(repo, "blobs", "uploads/")
	if from != "" {
		u += "?" + url.Values{"mount": {d.String()}, "from": {from}}.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return "", false, err
	}
	resp, err := c.do(req, http.StatusAccepted, http.StatusCreated)
	if err != nil {
		return "", false, fmt.Errorf("starting the upload of %s to %s: %w", d, repo, err)
	}
	defer drain(resp)
	if resp.StatusCode == http.StatusCreated {
		return "", true, nil
	}
	loc := resp.Header.Get("Location")
	if loc == "" {
		return "", false, fmt.Errorf("starting the upload of %s to %s: the registry gave no Location", d, repo)
	}
	next, err := resp.Request.URL.Parse(loc)
	if err != nil {
		return "", false, fmt.Errorf("starting the upload of %s to %s: Location %q: %w", d, repo, loc, err)
	}
	return next.String(), false, nil
}

// putBlob completes an upload session with the whole blob in one PUT
// (the distribution spec's monolithic upload).
func (c *registryClient) putBlob(ctx context.Context, location string, d v1.Hash, size int64, open func() io.Reader) error {
	u, err := url.Parse(location)
	if err != nil {
		return fmt.Errorf("upload location %q: %w", location, err)
	}
	q := u.Query()
	q.Set("digest", d.String())
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u.String(), io.NopCloser(open()))
	if err != nil {
		return err
	}
	req.ContentLength = size
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(open()), nil }
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.do(req, http.StatusCreated, http.StatusAccepted, http.StatusNoContent)
	if err != nil {
		return fmt.Errorf("uploading blob %s: %w", d, err)
	}
	drain(resp)
	return nil
}

// manifestDigest asks (HEAD) which manifest a tag points to; ok is false
// if the tag does not exist or the registry does not say.
func (c *registryClient) manifestDigest(ctx context.Context, repo, ref string, mt types.MediaType) (d v1.Hash, ok bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, c.url(repo, "manifests", ref), nil)
	if err != nil {
		return v1.Hash{}, false, err
	}
	req.Header.Set("Accept", strings.Join([]string{string(mt), string(types.OCIManifestSchema1), string(types.DockerManifestSchema2)}, ", "))
	resp, err := c.do(req, http.StatusOK, http.StatusNotFound)
	if err != nil {
		return v1.Hash{}, false, fmt.Errorf("checking manifest %s:%s: %w", repo, ref, err)
	}
	drain(resp)
	if resp.StatusCode != http.StatusOK {
		return v1.Hash{}, false, nil
	}
	h, err := v1.NewHash(resp.Header.Get("Docker-Content-Digest"))
	if err != nil {
		return v1.Hash{}, false, nil
	}
	return h, true, nil
}

// putManifest stores a manifest under ref (a tag or its digest).
func (c *registryClient) putManifest(ctx context.Context, repo, ref string, mt types.MediaType, raw []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, c.url(repo, "manifests", ref), strings.NewReader(string(raw)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", string(mt))
	resp, err := c.do(req, http.StatusCreated, http.StatusOK, http.StatusAccepted)
	if err != nil {
		return fmt.Errorf("pushing manifest %s:%s: %w", repo, ref, err)
	}
	drain(resp)
	return nil
}
