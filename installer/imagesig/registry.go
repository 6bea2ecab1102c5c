package imagesig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// maxPayload bounds a payload read from a registry: simple signing
// documents are a few hundred bytes.
const maxPayload = 1 << 20

// Tag is the tag, in the image's repository, of the signatures of the
// image digest d: sha256-<hex>.sig.
func Tag(d v1.Hash) string { return d.Algorithm + "-" + d.Hex + ".sig" }

// Image is the OCI image that holds sigs, one layer each, as cosign
// stores them. The same signatures make the same image (digest).
func Image(sigs []Signature) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	for i, s := range sigs {
		if s.Value() == "" {
			return nil, fmt.Errorf("signature %d has no %s annotation", i+1, AnnotationSignature)
		}
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:       static.NewLayer(s.Payload, MediaType),
			Annotations: s.Annotations,
		})
		if err != nil {
			return nil, fmt.Errorf("signature image: %w", err)
		}
	}
	return img, nil
}

// Read reads the signatures an image of signatures holds; layers of
// another media type are skipped.
func Read(img v1.Image) ([]Signature, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, fmt.Errorf("reading the signature manifest: %w", err)
	}
	var out []Signature
	for _, d := range m.Layers {
		if d.MediaType != MediaType {
			continue
		}
		l, err := img.LayerByDigest(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("signature layer %s: %w", d.Digest, err)
		}
		rc, err := l.Compressed()
		if err != nil {
			return nil, fmt.Errorf("signature layer %s: %w", d.Digest, err)
		}
		p, err := io.ReadAll(io.LimitReader(rc, maxPayload+1))
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("signature layer %s: %w", d.Digest, err)
		}
		if len(p) > maxPayload {
			return nil, fmt.Errorf("signature layer %s: larger than %d bytes", d.Digest, maxPayload)
		}
		ann := map[string]string{}
		for k, v := range d.Annotations {
			ann[k] = v
		}
		out = append(out, Signature{Payload: p, Annotations: ann})
	}
	return out, nil
}

// Fetch reads the signatures attached to the image digest d in repo: none
// (nil, nil) when the registry has no signature tag for it.
func Fetch(ctx context.Context, repo name.Repository, d v1.Hash, opts ...remote.Option) ([]Signature, error) {
	ref := repo.Tag(Tag(d))
	img, err := remote.Image(ref, append([]remote.Option{remote.WithContext(ctx)}, opts...)...)
	if err != nil {
		if IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("reading the signatures %s: %w", ref, err)
	}
	sigs, err := Read(img)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	return sigs, nil
}

// Attach makes sure the registry holds sigs for the image digest d in
// repo, beside the signatures it holds already (another signer's are
// kept). It reports whether it wrote anything.
func Attach(ctx context.Context, repo name.Repository, d v1.Hash, sigs []Signature, opts ...remote.Option) (bool, error) {
	have, err := Fetch(ctx, repo, d, opts...)
	if err != nil {
		return false, err
	}
	all := Merge(have, sigs...)
	if len(all) == len(have) {
		return false, nil
	}
	img, err := Image(all)
	if err != nil {
		return false, err
	}
	ref := repo.Tag(Tag(d))
	if err := remote.Write(ref, img, append([]remote.Option{remote.WithContext(ctx)}, opts...)...); err != nil {
		return false, fmt.Errorf("writing the signatures %s: %w", ref, err)
	}
	return true, nil
}

// IsNotFound says whether a registry error is a missing manifest or
// repository.
func IsNotFound(err error) bool {
	var te *transport.Error
	if !errors.As(err, &te) {
		return false
	}
	if te.StatusCode == http.StatusNotFound {
		return true
	}
	for _, d := range te.Errors {
		switch d.Code {
		case transport.ManifestUnknownErrorCode, transport.NameUnknownErrorCode:
			return true
		}
	}
	return false
}
