// Package imagesig reads, makes, verifies and stores container image
// signatures in the form cosign (sigstore) keeps them in a registry, so
// that an operator's own tools read what onprem writes and onprem reads
// what a vendor's cosign wrote:
//
//   - the signed payload is a "simple signing" JSON document naming the
//     image's manifest digest;
//   - each signature is one layer of a small OCI image, the payload as the
//     layer's content and the base64 signature in the layer's annotation
//     dev.cosignproject.cosign/signature;
//   - that image is tagged sha256-<hex>.sig in the image's own repository.
//
// onprem signs with its ed25519 keys (installer/signing): the signature is
// ed25519 over the payload's bytes, which cosign verifies with the public
// key's PEM file. It verifies those and cosign's own ECDSA P-256 ones
// (over the payload's SHA-256), for images an operator signs with cosign.
package imagesig

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"onprem.dev/onprem/installer/signing"
)

// Media type and annotations of cosign's signature layers.
const (
	// MediaType is the media type of a signature layer (its content is the
	// simple signing payload).
	MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// AnnotationSignature holds the base64 signature of the layer's payload.
	AnnotationSignature = "dev.cosignproject.cosign/signature"
	// AnnotationCertificate holds the signer's certificate of a keyless
	// (Fulcio) signature; onprem carries such signatures but cannot verify
	// them offline.
	AnnotationCertificate = "dev.sigstore.cosign/certificate"
	// payloadType is the type simple signing payloads of images carry.
	payloadType = "cosign container image signature"
)

// ErrNoSignature says that an image has no signature at all.
var ErrNoSignature = errors.New("no signature")

// Signature is one signature of an image: the payload it signs and the
// annotations of its layer (the signature itself, and for a keyless one
// its certificate and transparency-log entry, carried as they are).
type Signature struct {
	Payload     []byte            `json:"payload"`
	Annotations map[string]string `json:"annotations"`
}

// Value is the signature's base64 text.
func (s Signature) Value() string { return s.Annotations[AnnotationSignature] }

// Keyless says that the signature carries a certificate instead of naming
// a key (a Fulcio signature), which needs sigstore's roots to verify.
func (s Signature) Keyless() bool { return s.Annotations[AnnotationCertificate] != "" }

// Claims is what a payload says.
type Claims struct {
	// DockerReference is the repository the image was signed under.
	DockerReference string
	// Digest is the signed manifest digest.
	Digest string
}

type payload struct {
	Critical struct {
		Identity struct {
			DockerReference string `json:"docker-reference"`
		} `json:"identity"`
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
	Optional map[string]any `json:"optional"`
}

// NewPayload is the simple signing payload for the image digest d in
// repository repo.
func NewPayload(repo string, d v1.Hash) ([]byte, error) {
	var p payload
	p.Critical.Identity.DockerReference = repo
	p.Critical.Image.DockerManifestDigest = d.String()
	p.Critical.Type = payloadType
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("image signature payload: %w", err)
	}
	return b, nil
}

// Claims parses the signature's payload.
func (s Signature) Claims() (Claims, error) {
	var p payload
	dec := json.NewDecoder(bytes.NewReader(s.Payload))
	if err := dec.Decode(&p); err != nil {
		return Claims{}, fmt.Errorf("signature payload is not simple signing JSON: %w", err)
	}
	if p.Critical.Type != payloadType {
		return Claims{}, fmt.Errorf("signature payload has type %q, want %q", p.Critical.Type, payloadType)
	}
	if p.Critical.Image.DockerManifestDigest == "" {
		return Claims{}, errors.New("signature payload names no image digest")
	}
	return Claims{DockerReference: p.Critical.Identity.DockerReference, Digest: p.Critical.Image.DockerManifestDigest}, nil
}

// Sign signs the image digest d of repository repo with key.
func Sign(key ed25519.PrivateKey, repo string, d v1.Hash) (Signature, error) {
	if len(key) != ed25519.PrivateKeySize {
		return Signature{}, errors.New("image signature: not an ed25519 private key")
	}
	p, err := NewPayload(repo, d)
	if err != nil {
		return Signature{}, err
	}
	sig := ed25519.Sign(key, p)
	return Signature{Payload: p, Annotations: map[string]string{AnnotationSignature: base64.StdEncoding.EncodeToString(sig)}}, nil
}

// VerifyWith says whether key made the signature over its payload.
func (s Signature) VerifyWith(key signing.Key) bool {
	raw, err := base64.StdEncoding.DecodeString(s.Value())
	if err != nil {
		return false
	}
	return key.Verify(s.Payload, raw)
}

// Verified is a signature that a trusted key verified.
type Verified struct {
	Signature Signature
	Key       signing.Key
}

// NotTrustedError says that an image has signatures, none of them valid
// for its digest with a trusted key.
type NotTrustedError struct {
	Digest string
	// Reasons says, per signature, why it was not accepted.
	Reasons []string
	Keys    signing.Keyring
}

func (e *NotTrustedError) Error() string {
	return fmt.Sprintf("%d signature(s), none from a trusted key for %s (%s); trusted keys: %s",
		len(e.Reasons), e.Digest, strings.Join(e.Reasons, "; "), e.Keys)
}

// Verify finds a signature of the image digest d made by a key of keys.
// It returns ErrNoSignature when sigs is empty, and a *NotTrustedError
// naming why each signature failed otherwise: one that names another
// digest (copied from another image), a keyless one, or one made by no
// trusted key.
func Verify(sigs []Signature, d v1.Hash, keys signing.Keyring) (*Verified, error) {
	if len(sigs) == 0 {
		return nil, ErrNoSignature
	}
	nt := &NotTrustedError{Digest: d.String(), Keys: keys}
	for i, s := range sigs {
		c, err := s.Claims()
		if err != nil {
			nt.Reasons = append(nt.Reasons, fmt.Sprintf("signature %d: %v", i+1, err))
			continue
		}
		if c.Digest != d.String() {
			nt.Reasons = append(nt.Reasons, fmt.Sprintf("signature %d signs %s, another image", i+1, c.Digest))
			continue
		}
		for _, k := range keys {
			if s.VerifyWith(k) {
				return &Verified{Signature: s, Key: k}, nil
			}
		}
		if s.Keyless() {
			nt.Reasons = append(nt.Reasons, fmt.Sprintf("signature %d is keyless (a certificate), which onprem cannot verify offline", i+1))
			continue
		}
		nt.Reasons = append(nt.Reasons, fmt.Sprintf("signature %d is made by none of the trusted keys", i+1))
	}
	return nil, nt
}

// KeyOf is the trusted key that verifies s, if any.
func KeyOf(s Signature, keys signing.Keyring) (signing.Key, bool) {
	for _, k := range keys {
		if s.VerifyWith(k) {
			return k, true
		}
	}
	return signing.Key{}, false
}

// Merge adds the signatures of more that sigs does not hold (same
// signature value), keeping order.
func Merge(sigs []Signature, more ...Signature) []Signature {
	out := append([]Signature(nil), sigs...)
	for _, m := range more {
		dup := false
		for _, s := range out {
			if s.Value() == m.Value() && bytes.Equal(s.Payload, m.Payload) {
				dup = true
				break
			}
		}
		if !dup {
			out = append(out, m)
		}
	}
	return out
}
