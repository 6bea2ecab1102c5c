//go:build linux

package images

import (
	"archive/tar"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// layoutVersion changes whenever the way images are put together changes
// in a way that the hashed inputs do not show: every image is rebuilt.
const layoutVersion = "images-layout-2"

// epoch is the time of every file and image, so that equal inputs give
// equal digests.
var epoch = time.Unix(0, 0).UTC()

// file is one entry of a layer made by filesLayer.
type file struct {
	// path is absolute in the image.
	path string
	// src is a file on the host to copy; data is used when it is empty.
	src  string
	data []byte
	// dir makes a folder; link a symbolic link to link.
	dir  bool
	link string
	mode os.FileMode
	uid  int
	gid  int
}

// filesLayer is a layer holding files, with their parent folders (root's,
// 0755, unless listed). The tarball is written afresh whenever the layer is
// read, straight from the host files, so large binaries are never held in
// memory.
func filesLayer(files []file) (v1.Layer, error) {
	sorted := append([]file(nil), files...)
	for i := range sorted {
		p := path.Clean("/" + sorted[i].path)
		if p == "/" {
			return nil, fmt.Errorf("a layer file has no path: %+v", sorted[i])
		}
		sorted[i].path = p
		if sorted[i].src != "" {
			if _, err := os.Stat(sorted[i].src); err != nil {
				return nil, fmt.Errorf("layer file %s: %w", sorted[i].path, err)
			}
		}
	}
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].path < sorted[j].path })
	opener := func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeFilesTar(pw, sorted)) }()
		return pr, nil
	}
	return tarball.LayerFromOpener(opener, tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithMediaType(types.OCILayer))
}

func writeFilesTar(w io.Writer, files []file) error {
	tw := tar.NewWriter(w)
	listed := map[string]bool{}
	for _, f := range files {
		if f.dir {
			listed[f.path] = true
		}
	}
	made := map[string]bool{}
	var parents func(string) error
	parents = func(d string) error {
		if d == "/" || made[d] || listed[d] {
			return nil
		}
		if err := parents(path.Dir(d)); err != nil {
			return err
		}
		made[d] = true
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX})
	}
	for _, f := range files {
		if err := parents(path.Dir(f.path)); err != nil {
			return err
		}
		name := strings.TrimPrefix(f.path, "/")
		hdr := &tar.Header{Name: name, Mode: int64(f.mode & 0o7777), Uid: f.uid, Gid: f.gid, ModTime: epoch, Format: tar.FormatPAX}
		if f.mode&os.ModeSticky != 0 {
			hdr.Mode |= 0o1000
		}
		switch {
		case f.dir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, name+"/"
			made[f.path] = true
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		case f.link != "":
			hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, f.link, 0o777
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
		case f.src != "":
			src, err := os.Open(f.src)
			if err != nil {
				return fmt.Errorf("layer file %s: %w", f.path, err)
			}
			st, err := src.Stat()
			if err != nil {
				src.Close()
				return err
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size()
			if err := tw.WriteHeader(hdr); err != nil {
				src.Close()
				return err
			}
			n, err := io.Copy(tw, src)
			src.Close()
			if err != nil {
				return fmt.Errorf("layer file %s: %w", f.path, err)
			}
			if n != st.Size() {
				return fmt.Errorf("layer file %s changed while it was read", f.src)
			}
		default:
			hdr.Typeflag, hdr.Size = tar.TypeReg, int64(len(f.data))
			if err := tw.WriteHeader(hdr); err != nil {
				return err
			}
			if _, err := tw.Write(f.data); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

// tarLayer is a layer made of an uncompressed tarball on disk (a root
// filesystem), compressed as it is read.
func tarLayer(path string) (v1.Layer, error) {
	l, err := tarball.LayerFromFile(path, tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("layer from %s: %w", path, err)
	}
	return l, nil
}

// assemble makes a linux/amd64 OCI image of layers with cfg as its run
// configuration. The creation time is the epoch: equal inputs, equal
// digests.
func assemble(layers []v1.Layer, cfg v1.Config) (v1.Image, error) {
	base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		return nil, fmt.Errorf("adding the layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Created = v1.Time{Time: epoch}
	cf.Config = cfg
	if cf.Config.Labels == nil {
		cf.Config.Labels = map[string]string{}
	}
	cf.Config.Labels["org.opencontainers.image.source"] = "onprem.dev/onprem/e2e/images"
	return mutate.ConfigFile(img, cf)
}

// passwd is an /etc/passwd with root and one user (its group has the
// same number).
func passwd(user string, uid int, home string) []byte {
	return fmt.Appendf(nil, "root:x:0:0:root:/root:/sbin/nologin\n%s:x:%d:%d:%s:%s:/sbin/nologin\n", user, uid, uid, user, home)
}

func group(name string, gid int) []byte {
	return fmt.Appendf(nil, "root:x:0:\n%s:x:%d:\n", name, gid)
}

// ports is an image's ExposedPorts.
func ports(ps ...int) map[string]struct{} {
	m := map[string]struct{}{}
	for _, p := range ps {
		m[fmt.Sprintf("%d/tcp", p)] = struct{}{}
	}
	return m
}
