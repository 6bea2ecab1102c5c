package bundle

import (
	"errors"
	"fmt"

	"onprem.dev/onprem/installer/signing"
)

// ErrImageNotFound says that an image source does not have an image.
var ErrImageNotFound = errors.New("image not found")

// ImageError is a problem with one image of the release, naming it.
type ImageError struct {
	// Name is the image's name in the release manifest.
	Name string
	// Reference is where it was looked for.
	Reference string
	Err       error
}

func (e *ImageError) Error() string {
	return fmt.Sprintf("image %s (%s): %v", e.Name, e.Reference, e.Err)
}

func (e *ImageError) Unwrap() error { return e.Err }

// CorruptError says that a bundle is damaged or was modified: a file does
// not match its checksum, is missing, or is not listed.
type CorruptError struct {
	Path string
	// File is the file inside the bundle at fault (empty: the bundle as a
	// whole).
	File   string
	Reason string
}

func (e *CorruptError) Error() string {
	if e.File == "" {
		return fmt.Sprintf("bundle %s is not valid: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("bundle %s is corrupt or was modified: %s %s", e.Path, e.File, e.Reason)
}

// ErrUnsigned is returned when a bundle carries no signature and unsigned
// bundles are not allowed (Trust.AllowUnsigned).
var ErrUnsigned = errors.New("the bundle is not signed")

// UntrustedKeyError says that a bundle is signed by a key that is not
// trusted: not named by onprem's releases, spec.trust or --public-key.
type UntrustedKeyError struct {
	Path string
	// KeyID is the key the bundle is signed with.
	KeyID string
	// Trusted are the keys that were trusted.
	Trusted signing.Keyring
}

func (e *UntrustedKeyError) Error() string {
	return fmt.Sprintf("bundle %s is signed with key %s, which is not trusted (trusted: %s): give its public key with --public-key FILE or in spec.trust, or accept the bundle unverified with --allow-unsigned", e.Path, e.KeyID, e.Trusted)
}

// SignatureError says that the bundle's signature does not verify with the
// trusted key it names: the checksums were changed after signing.
type SignatureError struct {
	Path string
	// BundleKeyID is the id of the key the bundle says it was signed with
	// (empty: it names none).
	BundleKeyID string
	// Keys are the trusted keys it was checked with.
	Keys signing.Keyring
	// What is the signature that failed (default: the bundle's).
	What string
}

func (e *SignatureError) Error() string {
	what := e.What
	if what == "" {
		what = "signature"
	}
	return fmt.Sprintf("bundle %s: %s does not verify with %s: the bundle was changed after it was signed; get it again from its maker", e.Path, what, e.Keys)
}

// AuthError says that a registry refused the credentials (HTTP 401 or 403).
type AuthError struct {
	Host string
	Err  error
}

func (e *AuthError) Error() string {
	return fmt.Sprintf("registry refused credentials for %s: %v", e.Host, e.Err)
}

func (e *AuthError) Unwrap() error { return e.Err }
