package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// LayoutSource reads images from an OCI image layout directory (as written
// by `crane pull --format=oci`, skopeo or Create itself). An image is found
// by the annotation of its index.json entry: io.containerd.image.name,
// dev.onprem.image.source or org.opencontainers.image.ref.name holding the
// full source reference (docker.io/library/redis:7.2.7; short forms such
// as redis:7.2.7 match too), or a release-pinned digest. Multi-platform
// entries are narrowed to platform (nil: linux/amd64).
func LayoutSource(dir string, platform *v1.Platform) Source {
	p := DefaultPlatform
	if platform != nil {
		p = *platform
	}
	return &layoutSource{dir: dir, platform: p}
}

type layoutSource struct {
	dir      string
	platform v1.Platform
}

func (s *layoutSource) Image(_ context.Context, req ImageRequest) (v1.Image, error) {
	lp, err := layout.FromPath(s.dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("OCI layout %s: no index.json: %w", s.dir, err)
		}
		return nil, fmt.Errorf("OCI layout %s: %w", s.dir, err)
	}
	ii, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %w", s.dir, err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: index.json: %w", s.dir, err)
	}
	want := normalizeRef(req.Reference)
	var found *v1.Descriptor
	for i, d := range im.Manifests {
		if req.Digest != "" && d.Digest.String() == req.Digest {
			found = &im.Manifests[i]
			break
		}
		for _, k := range []string{annotationContainerd, AnnotationSource, annotationRefName} {
			if v := d.Annotations[k]; v != "" && normalizeRef(v) == want {
				found = &im.Manifests[i]
				break
			}
		}
		if found != nil {
			break
		}
	}
	if found == nil {
		return nil, fmt.Errorf("OCI layout %s has no image annotated %s: %w", s.dir, req.Reference, ErrImageNotFound)
	}
	if found.MediaType.IsIndex() {
		child, err := ii.ImageIndex(found.Digest)
		if err != nil {
			return nil, fmt.Errorf("OCI layout %s: %w", s.dir, err)
		}
		img, err := pickPlatform(child, s.platform)
		if err != nil {
			return nil, fmt.Errorf("OCI layout %s: %s: %w", s.dir, req.Reference, err)
		}
		return &fromIndex{Image: img, index: found.Digest}, nil
	}
	img, err := ii.Image(found.Digest)
	if err != nil {
		return nil, fmt.Errorf("OCI layout %s: %s: %w", s.dir, req.Reference, err)
	}
	return img, nil
}

// pickPlatform returns the image of an index for a platform.
func pickPlatform(ii v1.ImageIndex, p v1.Platform) (v1.Image, error) {
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range im.Manifests {
		if d.MediaType.IsImage() && d.Platform != nil && d.Platform.Satisfies(p) {
			return ii.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("no image for platform %s: %w", p.String(), ErrImageNotFound)
}

// normalizeRef is the canonical form of a reference (docker.io/library/
// added) or the string itself if it does not parse.
func normalizeRef(s string) string {
	ref, err := name.ParseReference(s)
	if err != nil {
		return s
	}
	return ref.Name()
}
