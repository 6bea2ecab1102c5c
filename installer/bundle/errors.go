package bundle

import (
	"errors"
	"fmt"
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

// ErrUnsigned is returned when a public key is given but the bundle
// carries no signature.
var ErrUnsigned = errors.New("the bundle is not signed")

// SignatureError says that the bundle's signature does not verify with the
// given public key.
type SignatureError struct {
	Path string
	// BundleKeyID is the id of the key the bundle says it was signed with.
	BundleKeyID string
	// KeyID is the id of the key given to check it.
	KeyID string
}

func (e *SignatureError) Error() string {
	if e.BundleKeyID != "" && e.BundleKeyID != e.KeyID {
		return fmt.Sprintf("bundle %s: signature does not verify: it was signed with key %s, the public key given is %s", e.Path, e.BundleKeyID, e.KeyID)
	}
	return fmt.Sprintf("bundle %s: signature does not verify with public key %s: the checksums were modified or signed with another key", e.Path, e.KeyID)
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
