package bundle

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/imagesig"
	"onprem.dev/onprem/installer/signing"
)

// ImageSignatureFormat is the form of the image signatures a signed
// bundle carries (signatures/<image>.json): cosign's.
const ImageSignatureFormat = "cosign"

// Where a carried image signature comes from.
const (
	// FromBundle: made by bundle create with the bundle's key.
	FromBundle = "bundle"
	// FromSource: found beside the image in its source registry.
	FromSource = "source"
)

// ImageSignatures are the signatures a bundle carries for one image: the
// one bundle create made with the bundle's key, and those the source
// registry held for it. Push attaches them all to the relocated image.
type ImageSignatures struct {
	Image      string             `json:"image"`
	Digest     string             `json:"digest"`
	Signatures []CarriedSignature `json:"signatures"`
}

// CarriedSignature is one image signature in a bundle.
type CarriedSignature struct {
	imagesig.Signature
	// From is FromBundle or FromSource.
	From string `json:"from"`
	// VerifiedBy names the key that verified it when the bundle was made
	// (the bundle's own key, or a key given for the source's signatures);
	// empty: not verified (another signer, or keyless).
	VerifiedBy string `json:"verifiedBy,omitempty"`
}

// signaturesPath is where the image signatures of image name are.
func signaturesPath(name string) string { return signaturesDir + "/" + name + ".json" }

// SignatureSource is a Source that can also give the signatures its
// registry holds for an image (RemoteSource).
type SignatureSource interface {
	Signatures(ctx context.Context, req ImageRequest, d v1.Hash) ([]imagesig.Signature, error)
}

// Signatures reads the cosign signatures of digest d in the repository of
// req.Reference.
func (s *remoteSource) Signatures(ctx context.Context, req ImageRequest, d v1.Hash) ([]imagesig.Signature, error) {
	var nopts []name.Option
	if s.opts.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	tag, err := name.NewTag(req.Reference, nopts...)
	if err != nil {
		return nil, fmt.Errorf("reference %q: %w", req.Reference, err)
	}
	return imagesig.Fetch(ctx, tag.Repository, d, s.remoteOptions(ctx)...)
}

// SourceSignatureError says that an image's source registry holds
// signatures for it, none of them valid with the keys given for the
// source (CreateOptions.SourceKeys): the image is not the one its
// publisher signed, or another publisher signed it.
type SourceSignatureError struct {
	Image     string
	Reference string
	Err       error
}

func (e *SourceSignatureError) Error() string {
	return fmt.Sprintf("image %s (%s): its source registry holds signatures, none valid: %v; check that the source is the publisher's, or give the publisher's public key with --source-public-key", e.Image, e.Reference, e.Err)
}

func (e *SourceSignatureError) Unwrap() error { return e.Err }

// imageSignatures makes the signatures create carries for one image: the
// source registry's (checked against keys when given) and, with a key,
// the bundle's own.
func imageSignatures(ctx context.Context, src Source, r *resolvedImage, priv ed25519.PrivateKey, keyID string, keys signing.Keyring) (*ImageSignatures, error) {
	d, err := v1.NewHash(r.img.Digest)
	if err != nil {
		return nil, err
	}
	out := &ImageSignatures{Image: r.img.Name, Digest: r.img.Digest}
	if ss, ok := src.(SignatureSource); ok {
		found, err := ss.Signatures(ctx, ImageRequest{Name: r.img.Name, Reference: r.source, Digest: r.img.Digest}, d)
		if err != nil {
			return nil, &ImageError{Name: r.img.Name, Reference: r.source, Err: fmt.Errorf("reading its signatures: %w", err)}
		}
		if len(found) > 0 && len(keys) > 0 {
			if _, err := imagesig.Verify(found, d, keys); err != nil {
				return nil, &SourceSignatureError{Image: r.img.Name, Reference: r.source, Err: err}
			}
		}
		for _, s := range found {
			c, err := s.Claims()
			if err != nil || c.Digest != r.img.Digest {
				slog.Warn("bundle: a source signature of the image does not sign it; not carried", "image", r.img.Name, "reference", r.source, "err", err)
				continue
			}
			cs := CarriedSignature{Signature: s, From: FromSource}
			if k, ok := imagesig.KeyOf(s, keys); ok {
				cs.VerifiedBy = k.String()
			}
			out.Signatures = append(out.Signatures, cs)
		}
	}
	if priv != nil {
		repo, _, _ := images.SplitReference(r.source)
		s, err := imagesig.Sign(priv, repo, d)
		if err != nil {
			return nil, err
		}
		out.Signatures = append(out.Signatures, CarriedSignature{Signature: s, From: FromBundle, VerifiedBy: keyID})
	}
	if len(out.Signatures) == 0 {
		return nil, nil
	}
	return out, nil
}

// ErrNoImageSignatures says that a bundle carries no image signatures:
// it is unsigned, or an onprem that made none created it.
var ErrNoImageSignatures = errors.New("the bundle carries no image signatures")

// ImageSignatures returns the signatures the bundle carries for the
// image name (nil: none).
func (b *Bundle) ImageSignatures(name string) (*ImageSignatures, error) {
	if _, ok := b.fsys.files[signaturesPath(name)]; !ok {
		return nil, nil
	}
	data, err := b.readSmall(signaturesPath(name))
	if err != nil {
		return nil, err
	}
	var is ImageSignatures
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&is); err != nil {
		return nil, b.corrupt(signaturesPath(name), "is not valid: %v", err)
	}
	i, ok := b.byName[name]
	if !ok || is.Image != name || is.Digest != b.images[i].img.Digest {
		return nil, b.corrupt(signaturesPath(name), "names image %s %s, not the bundle's %s", is.Image, is.Digest, name)
	}
	for j, s := range is.Signatures {
		c, err := s.Claims()
		if err != nil {
			return nil, b.corrupt(signaturesPath(name), "signature %d: %v", j+1, err)
		}
		if c.Digest != is.Digest {
			return nil, b.corrupt(signaturesPath(name), "signature %d signs %s, not the image %s", j+1, c.Digest, is.Digest)
		}
	}
	return &is, nil
}

// checkImageSignatures verifies, once the bundle's key is trusted, that
// each image's bundle signature is that key's.
func (b *Bundle) checkImageSignatures(k signing.Key) error {
	if b.meta.ImageSignatures == "" {
		return nil
	}
	for _, bi := range b.images {
		is, err := b.ImageSignatures(bi.img.Name)
		if err != nil {
			return err
		}
		ok := false
		if is != nil {
			for _, s := range is.Signatures {
				if s.From == FromBundle && s.VerifyWith(k) {
					ok = true
				}
			}
		}
		if !ok {
			return &SignatureError{Path: b.path, BundleKeyID: b.meta.KeyID, Keys: signing.Keyring{k}, What: "the signature of image " + bi.img.Name}
		}
	}
	return nil
}
