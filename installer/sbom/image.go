package sbom

import (
	"context"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Catalog makes the inventory of an image by scanning each of its layers
// (see ScanLayer and Merge).
func Catalog(ctx context.Context, name, reference string, img v1.Image) (*Inventory, error) {
	digest, err := img.Digest()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	var scanned []*Layer
	for _, l := range layers {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		s, err := scanCompressed(l)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", name, err)
		}
		scanned = append(scanned, s)
	}
	return Merge(name, reference, digest.String(), scanned), nil
}

func scanCompressed(l v1.Layer) (*Layer, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr, err := Uncompress(rc)
	if err != nil {
		return nil, err
	}
	defer tr.Close()
	return ScanLayer(tr)
}
