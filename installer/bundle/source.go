package bundle

import (
	"context"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"onprem.dev/onprem/installer/imagesig"
)

// ImageRequest asks a Source for one image of the release.
type ImageRequest struct {
	// Name is the image's name in the release manifest.
	Name string
	// Reference is the source reference, repository:tag, with the platform
	// prefix applied to platform images (images.Repository).
	Reference string
	// Digest is the digest the release pins, if any. A source must then
	// return that image, or the platform's image of that index.
	Digest string
}

// Source finds the images of a release. Create asks it for every image of
// the release; an image it does not have is an error wrapping
// ErrImageNotFound.
type Source interface {
	Image(ctx context.Context, req ImageRequest) (v1.Image, error)
}

// SourceFunc adapts a function to Source (tests build images in memory).
type SourceFunc func(ctx context.Context, req ImageRequest) (v1.Image, error)

// Image calls f.
func (f SourceFunc) Image(ctx context.Context, req ImageRequest) (v1.Image, error) {
	return f(ctx, req)
}

// Sources routes each image to a source by its release name, and every
// other image to Default.
type Sources struct {
	ByName  map[string]Source
	Default Source
}

// pick is the source of the image name (nil: none).
func (s Sources) pick(name string) Source {
	if src, ok := s.ByName[name]; ok && src != nil {
		return src
	}
	return s.Default
}

// Image asks the source of req.Name.
func (s Sources) Image(ctx context.Context, req ImageRequest) (v1.Image, error) {
	src := s.pick(req.Name)
	if src == nil {
		return nil, fmt.Errorf("no source for this image: %w", ErrImageNotFound)
	}
	return src.Image(ctx, req)
}

// Signatures asks the source of req.Name for the image's signatures, if
// it can give them (SignatureSource); none otherwise.
func (s Sources) Signatures(ctx context.Context, req ImageRequest, d v1.Hash) ([]imagesig.Signature, error) {
	if ss, ok := s.pick(req.Name).(SignatureSource); ok {
		return ss.Signatures(ctx, req, d)
	}
	return nil, nil
}

// fromIndex is an image that a source picked from a multi-platform index;
// the release may pin the index's digest.
type fromIndex struct {
	v1.Image
	index v1.Hash
}

// indexDigest is the digest of the index an image was picked from, if any.
func indexDigest(img v1.Image) (v1.Hash, bool) {
	if fi, ok := img.(*fromIndex); ok {
		return fi.index, true
	}
	return v1.Hash{}, false
}

// DefaultPlatform is the platform picked from multi-platform images.
var DefaultPlatform = v1.Platform{OS: "linux", Architecture: "amd64"}
