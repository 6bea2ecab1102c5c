//go:build linux

package images

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Annotations of the index entries WriteOCILayout writes: containerd's
// image name (what `ctr images import` and onprem's bundle LayoutSource
// read) and the OCI reference name (the tag).
const (
	annotationContainerdName = "io.containerd.image.name"
	annotationRefName        = "org.opencontainers.image.ref.name"
)

// WriteDockerArchive writes imgs to path as one docker-archive tarball
// (what `docker save` writes, and `kind load image-archive`, `docker load`
// and `ctr images import` read). An image under several references is
// stored once, with every reference as a tag. The file is written under a
// temporary name and renamed: path is complete or absent.
func WriteDockerArchive(path string, imgs []Image) error {
	if len(imgs) == 0 {
		return errors.New("images: no image to write to " + path)
	}
	refs := map[name.Reference]v1.Image{}
	for _, img := range imgs {
		if img.Image == nil {
			return fmt.Errorf("images: %s (%s) has no image", img.Ref, img.Name)
		}
		tag, err := name.NewTag(img.Ref)
		if err != nil {
			return fmt.Errorf("images: %s: the reference %q must be repository:tag: %w", img.Name, img.Ref, err)
		}
		refs[tag] = img.Image
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("images: writing %s: %w", path, err)
	}
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("images: writing the docker archive %s (is the disk full?): %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("images: writing %s: %w", path, err)
	}
	return nil
}

// WriteOCILayout adds imgs to the OCI image layout in dir (created when
// missing): blobs are stored once however many images share them, and
// each image gets an index entry annotated with its reference
// (io.containerd.image.name = the full reference,
// org.opencontainers.image.ref.name = the tag), which is how `onprem bundle
// create` finds images in a layout source. An entry with the same
// reference is replaced, so writing the same images twice leaves one entry
// each.
func WriteOCILayout(dir string, imgs []Image) error {
	lp, err := layout.FromPath(dir)
	if errors.Is(err, fs.ErrNotExist) {
		lp, err = layout.Write(dir, empty.Index)
	}
	if err != nil {
		return fmt.Errorf("images: opening the OCI layout %s: %w", dir, err)
	}
	for _, img := range imgs {
		if img.Image == nil {
			return fmt.Errorf("images: %s (%s) has no image", img.Ref, img.Name)
		}
		tag, err := name.NewTag(img.Ref)
		if err != nil {
			return fmt.Errorf("images: %s: the reference %q must be repository:tag: %w", img.Name, img.Ref, err)
		}
		// The reference as given: containerd takes the annotation literally
		// (docker.io/library/x, never index.docker.io/library/x).
		ann := map[string]string{annotationContainerdName: img.Ref, annotationRefName: tag.TagStr()}
		if err := lp.ReplaceImage(img.Image, match.Annotation(annotationContainerdName, img.Ref), layout.WithAnnotations(ann)); err != nil {
			return fmt.Errorf("images: writing %s to the OCI layout %s (is the disk full?): %w", img.Ref, dir, err)
		}
	}
	return nil
}
