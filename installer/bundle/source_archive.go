package bundle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ArchiveSource reads an image from a docker-archive tarball (`docker save`
// output). When the archive holds several images, the one tagged with the
// requested reference is taken.
func ArchiveSource(path string) Source {
	return &archiveSource{path: path}
}

type archiveSource struct{ path string }

func (s *archiveSource) Image(_ context.Context, req ImageRequest) (v1.Image, error) {
	if _, err := os.Stat(s.path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("docker archive %s: %w", s.path, ErrImageNotFound)
		}
		return nil, fmt.Errorf("docker archive %s: %w", s.path, err)
	}
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(s.path) })
	if err != nil {
		return nil, fmt.Errorf("docker archive %s: %w", s.path, err)
	}
	var tag *name.Tag
	if len(m) > 1 {
		t, err := name.NewTag(req.Reference)
		if err != nil {
			return nil, fmt.Errorf("reference %q: %w", req.Reference, err)
		}
		tag = &t
	}
	img, err := tarball.ImageFromPath(s.path, tag)
	if err != nil {
		return nil, fmt.Errorf("docker archive %s: %w", s.path, err)
	}
	if req.Digest != "" {
		d, err := img.Digest()
		if err != nil {
			return nil, fmt.Errorf("docker archive %s: %w", s.path, err)
		}
		if d.String() != req.Digest {
			return nil, fmt.Errorf("docker archive %s holds %s, the release pins %s", s.path, d, req.Digest)
		}
	}
	return img, nil
}
