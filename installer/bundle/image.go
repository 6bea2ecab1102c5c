package bundle

import (
	"fmt"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Image returns the bundle's image of a release image name, read in place
// (a go-containerregistry image: its layers stream from the bundle file).
func (b *Bundle) Image(name string) (v1.Image, error) {
	i, ok := b.byName[name]
	if !ok {
		return nil, fmt.Errorf("bundle %s has no image %q", b.path, name)
	}
	img, err := partial.CompressedToImage(&layoutImage{b: b, bi: &b.images[i]})
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	return img, nil
}

// ImageNames lists the release image names, in release order.
func (b *Bundle) ImageNames() []string {
	out := make([]string, 0, len(b.images))
	for _, i := range b.images {
		out = append(out, i.img.Name)
	}
	return out
}

type layoutImage struct {
	b  *Bundle
	bi *bundleImage
}

func (li *layoutImage) RawManifest() ([]byte, error) { return li.bi.raw, nil }

func (li *layoutImage) MediaType() (types.MediaType, error) {
	if li.bi.manifest.MediaType != "" {
		return li.bi.manifest.MediaType, nil
	}
	return li.bi.desc.MediaType, nil
}

func (li *layoutImage) RawConfigFile() ([]byte, error) {
	c := li.bi.manifest.Config
	return li.b.blobBytes(c.Digest, c.Size)
}

func (li *layoutImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	m := li.bi.manifest
	for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		if d.Digest == h {
			return &layoutBlob{b: li.b, desc: d}, nil
		}
	}
	return nil, fmt.Errorf("image %s has no blob %s", li.bi.img.Name, h)
}

type layoutBlob struct {
	b    *Bundle
	desc v1.Descriptor
}

func (l *layoutBlob) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *layoutBlob) Size() (int64, error)                { return l.desc.Size, nil }
func (l *layoutBlob) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }
func (l *layoutBlob) Compressed() (io.ReadCloser, error) {
	r, err := l.b.blobReader(l.desc.Digest)
	if err != nil {
		return nil, err
	}
	return io.NopCloser(r), nil
}
