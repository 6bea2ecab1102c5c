//go:build linux

package sandbox

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"unsafe"

	securejoin "github.com/cyphar/filepath-securejoin"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Unpack writes img's file system (its layers flattened) into dir, with
// owners, modes and links as in the image. Device nodes are left out (the
// sandbox brings its own /dev). Paths that would leave dir, also through
// symbolic links, are refused.
func Unpack(img v1.Image, dir string) error {
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	type dirMode struct {
		path string
		mode os.FileMode
	}
	var dirs []dirMode
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the image's file system: %w", err)
		}
		name := strings.TrimPrefix(filepath.Clean("/"+h.Name), "/")
		if name == "" {
			continue
		}
		parent, err := resolve(dir, filepath.Dir(name))
		if err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		if err := os.MkdirAll(parent, 0o755); err != nil {
			return err
		}
		p := filepath.Join(parent, filepath.Base(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
			dirs = append(dirs, dirMode{p, os.FileMode(h.Mode)})
		case tar.TypeReg:
			_ = os.Remove(p)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, tr); err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			if err := f.Close(); err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = os.Remove(p)
			if err := os.Symlink(h.Linkname, p); err != nil {
				return err
			}
		case tar.TypeLink:
			target, err := resolve(dir, h.Linkname)
			if err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
			_ = os.Remove(p)
			if err := os.Link(target, p); err != nil {
				return err
			}
		default:
			continue // devices, FIFOs
		}
		if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg || h.Typeflag == tar.TypeLink {
			if err := syscall.Chmod(p, uint32(h.Mode&0o7777)); err != nil {
				return err
			}
		}
	}
	// Folder modes last: a read-only folder must not stop its own files.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := syscall.Chmod(dirs[i].path, uint32(int64(dirs[i].mode)&0o7777)); err != nil {
			return err
		}
	}
	return nil
}

// resolve is path inside root, symbolic links followed within root.
func resolve(root, path string) (string, error) {
	return securejoin.SecureJoin(root, path)
}

func uintptrOf(ifr *[40]byte) uintptr { return uintptr(unsafe.Pointer(ifr)) }

func notify(c chan os.Signal) { signal.Notify(c, syscall.SIGTERM, syscall.SIGINT) }
