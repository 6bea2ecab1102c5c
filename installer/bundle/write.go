package bundle

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"time"

	"onprem.dev/onprem/internal/counting"
)

// tarOut writes a bundle's tar entries and records the SHA-256 of each for
// the checksums file.
type tarOut struct {
	ctx   context.Context
	tw    *tar.Writer
	cw    *counting.Writer
	mtime time.Time
	sums  map[string]string
	buf   []byte
	// dataStart is where the content of the last entry written starts in
	// the output (after its header).
	dataStart int64
}

func newTarOut(ctx context.Context, w io.Writer, mtime time.Time) *tarOut {
	cw := &counting.Writer{W: w}
	return &tarOut{ctx: ctx, tw: tar.NewWriter(cw), cw: cw, mtime: mtime, sums: map[string]string{}, buf: make([]byte, 1<<20)}
}

// file writes an entry of exactly size bytes read from r and returns the
// hex SHA-256 of its content. Fewer or more bytes than size is an error.
func (t *tarOut) file(name string, size int64, r io.Reader) (string, error) {
	return t.copyFile(name, size, r, nil)
}

// copyFile is file, counting the bytes on m (nil: not counted).
func (t *tarOut) copyFile(name string, size int64, r io.Reader, m *meter) (string, error) {
	if _, dup := t.sums[name]; dup {
		return "", fmt.Errorf("%s: written twice", name)
	}
	hdr := &tar.Header{
		Typeflag: tar.TypeReg, Name: name, Size: size, Mode: 0o644,
		ModTime: t.mtime, Format: tar.FormatPAX,
	}
	if err := t.tw.WriteHeader(hdr); err != nil {
		return "", fmt.Errorf("writing %s: %w", name, err)
	}
	// tar.Writer writes the header at once: the content starts here.
	t.dataStart = t.cw.N
	h := sha256.New()
	src := &meterReader{ctx: t.ctx, r: r, m: m}
	n, err := io.CopyBuffer(io.MultiWriter(t.tw, h), io.LimitReader(src, size), t.buf)
	if err != nil {
		return "", fmt.Errorf("writing %s: %w", name, err)
	}
	if n != size {
		return "", fmt.Errorf("writing %s: the source gave %d bytes, %d expected", name, n, size)
	}
	var one [1]byte
	if k, _ := io.ReadFull(r, one[:]); k > 0 {
		return "", fmt.Errorf("writing %s: the source gave more than the %d bytes expected", name, size)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	t.sums[name] = sum
	return sum, nil
}

// bytes writes a small entry.
func (t *tarOut) bytes(name string, data []byte) error {
	_, err := t.file(name, int64(len(data)), bytes.NewReader(data))
	return err
}

// tree copies every regular file of fsys under root (skipping Go sources
// and files for which skip is true) to prefix/<path>.
func (t *tarOut) tree(fsys fs.FS, root, prefix string) (int, error) {
	n := 0
	err := fs.WalkDir(fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(p, ".go") {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		n++
		return t.bytes(path.Join(prefix, p), data)
	})
	if err != nil {
		return n, fmt.Errorf("copying %s: %w", prefix, err)
	}
	return n, nil
}

// close finishes the tar stream (the checksums and signature must have been
// written).
func (t *tarOut) close() error {
	if err := t.tw.Close(); err != nil {
		return fmt.Errorf("finishing the tar stream: %w", err)
	}
	return nil
}
