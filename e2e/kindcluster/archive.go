package kindcluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// File is one file of an image layer.
type File struct {
	// Path is the file's absolute path in the image, e.g. /usr/local/bin/app.
	Path string
	// Source is a file on the host to copy; Data is used when it is empty.
	Source string
	// Data is the file's content when Source is empty.
	Data []byte
	// Mode is the file's permission bits; 0 means 0755 for a Source file
	// and 0644 for Data.
	Mode os.FileMode
}

// ImageSpec describes an image made of files, without any build tool: an
// optional base layer (a root filesystem tarball), then one layer with the
// files. Images are for linux and the architecture of this Go build.
type ImageSpec struct {
	// Ref is the image reference, e.g. registry.k8s.io/pause:3.10.2 or
	// onprem.dev/app:dev.
	Ref string
	// BaseTar is an optional uncompressed tarball of a root filesystem,
	// used as the first layer.
	BaseTar string
	// Files go into the image's top layer; their parent folders are made.
	Files []File
	// Entrypoint and Cmd are the image's entrypoint and default arguments.
	Entrypoint []string
	Cmd        []string
	// Env is added to PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin.
	Env []string
	// WorkingDir is the image's working folder; "/" when empty.
	WorkingDir string
	// User is the image's user, e.g. "65532"; root when empty.
	User string
}

// WriteImageArchive writes the images to path as one docker-archive
// tarball (what `docker save` writes, and what `docker load`,
// `ctr images import` and Cluster.LoadImages read). The images are built
// from files alone: no docker, no registry.
func WriteImageArchive(path string, specs ...ImageSpec) error {
	refs := map[name.Reference]v1.Image{}
	for _, s := range specs {
		ref, err := name.ParseReference(s.Ref)
		if err != nil {
			return fmt.Errorf("image %q: %w", s.Ref, err)
		}
		img, err := buildImage(s)
		if err != nil {
			return fmt.Errorf("image %s: %w", s.Ref, err)
		}
		refs[ref] = img
	}
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	if err := tarball.MultiRefWriteToFile(tmp, refs); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

func buildImage(s ImageSpec) (v1.Image, error) {
	var layers []v1.Layer
	if s.BaseTar != "" {
		l, err := tarball.LayerFromFile(s.BaseTar, tarball.WithCompressionLevel(gzip.BestSpeed))
		if err != nil {
			return nil, fmt.Errorf("base layer %s: %w", s.BaseTar, err)
		}
		layers = append(layers, l)
	}
	if len(s.Files) > 0 {
		data, err := filesTar(s.Files)
		if err != nil {
			return nil, err
		}
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(data)), nil
		}, tarball.WithCompressionLevel(gzip.BestSpeed))
		if err != nil {
			return nil, err
		}
		layers = append(layers, l)
	}
	img, err := mutate.AppendLayers(empty.Image, layers...)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Created = v1.Time{Time: time.Unix(0, 0).UTC()}
	cf.Config.Entrypoint = s.Entrypoint
	cf.Config.Cmd = s.Cmd
	cf.Config.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}, s.Env...)
	cf.Config.WorkingDir = s.WorkingDir
	if cf.Config.WorkingDir == "" {
		cf.Config.WorkingDir = "/"
	}
	cf.Config.User = s.User
	return mutate.ConfigFile(img, cf)
}

// filesTar makes a layer tarball of files with their parent folders, plus
// /tmp (world-writable), owned by root.
func filesTar(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0).UTC()
	dirs := map[string]bool{}
	var addDir func(string) error
	addDir = func(d string) error {
		if d == "/" || d == "." || dirs[d] {
			return nil
		}
		if err := addDir(path.Dir(d)); err != nil {
			return err
		}
		dirs[d] = true
		mode := int64(0o755)
		if d == "/tmp" {
			mode = 0o1777
		}
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: mode, ModTime: epoch})
	}
	if err := addDir("/tmp"); err != nil {
		return nil, err
	}
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, f := range sorted {
		p := path.Clean("/" + f.Path)
		if err := addDir(path.Dir(p)); err != nil {
			return nil, err
		}
		data, mode := f.Data, f.Mode
		if f.Source != "" {
			var err error
			if data, err = os.ReadFile(f.Source); err != nil {
				return nil, err
			}
			if mode == 0 {
				mode = 0o755
			}
		} else if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(p, "/"), Mode: int64(mode.Perm()), Size: int64(len(data)), ModTime: epoch}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
