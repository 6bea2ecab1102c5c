package sbom

import (
	"archive/tar"
	"bufio"
	"bytes"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

// Where the findings come from in an image's file system.
const (
	dpkgStatus    = "var/lib/dpkg/status"
	dpkgStatusDir = "var/lib/dpkg/status.d/"
	osRelease     = "etc/os-release"
	osReleaseLib  = "usr/lib/os-release"
)

// MaxExecutableSize bounds the executables read into memory to look for Go
// build info; a larger one is noted in the inventory, not catalogued.
const MaxExecutableSize = 512 << 20

// Layer is what one layer holds that an inventory needs: the files it
// adds that matter (package databases, os-release, executables) and the
// paths it deletes from the layers below (whiteouts).
type Layer struct {
	// Files are the files of interest by path (no leading slash): the
	// contents of package databases and os-release, and for executables
	// the Go modules found (none: not a Go program).
	Files map[string]*File
	// Deleted are the paths the layer's whiteouts remove, and Opaque the
	// folders it empties, from the layers below.
	Deleted []string
	Opaque  []string
	// Notes say what could not be catalogued.
	Notes []string
}

// File is one file of interest of a layer.
type File struct {
	// Data is the content of a package database or os-release file.
	Data []byte
	// Go is the build info of a Go executable (nil: an executable that is
	// not one).
	Go *buildinfo.BuildInfo
	// Executable says the file is an executable.
	Executable bool
}

// ScanLayer reads one layer as a tar stream (uncompressed; see
// Uncompress) and returns what it holds. It reads the stream to its end.
func ScanLayer(r io.Reader) (*Layer, error) {
	l := &Layer{Files: map[string]*File{}}
	tr := tar.NewReader(r)
	var buf []byte // reused for every executable of the layer
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading the layer: %w", err)
		}
		p := cleanPath(hdr.Name)
		dir, base := path.Split(p)
		switch {
		case base == ".wh..wh..opq":
			l.Opaque = append(l.Opaque, strings.TrimSuffix(dir, "/"))
			continue
		case strings.HasPrefix(base, ".wh."):
			l.Deleted = append(l.Deleted, dir+strings.TrimPrefix(base, ".wh."))
			continue
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		switch {
		case p == dpkgStatus, strings.HasPrefix(p, dpkgStatusDir), p == osRelease, p == osReleaseLib:
			data, err := io.ReadAll(io.LimitReader(tr, 256<<20))
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", p, err)
			}
			l.Files[p] = &File{Data: data}
		case hdr.FileInfo().Mode()&0o111 != 0 && hdr.Size >= 4:
			f, note, err := scanExecutable(tr, hdr.Size, &buf)
			if err != nil {
				return nil, fmt.Errorf("reading %s: %w", p, err)
			}
			if note != "" {
				l.Notes = append(l.Notes, p+": "+note)
			}
			if f != nil {
				l.Files[p] = f
			}
		}
	}
	return l, nil
}

// scanExecutable reads an executable's build info when it is an ELF file
// of a Go program, into *buf (grown as needed; the build info keeps no
// reference to it).
func scanExecutable(r io.Reader, size int64, buf *[]byte) (*File, string, error) {
	br := bufio.NewReader(r)
	magic, err := br.Peek(4)
	if err != nil {
		return nil, "", err
	}
	if !bytes.Equal(magic, []byte("\x7fELF")) {
		return &File{Executable: true}, "", nil // a script: clears what was there
	}
	if size > MaxExecutableSize {
		return &File{Executable: true}, fmt.Sprintf("an executable of %d MiB is not read for Go build info", size>>20), nil
	}
	if int64(cap(*buf)) < size {
		*buf = make([]byte, size)
	}
	data := (*buf)[:size]
	if _, err := io.ReadFull(br, data); err != nil {
		return nil, "", err
	}
	bi, err := buildinfo.Read(bytes.NewReader(data))
	if err != nil {
		return &File{Executable: true}, "", nil // not a Go program
	}
	return &File{Executable: true, Go: bi}, "", nil
}

// cleanPath is a tar entry's name as an image path: no leading "./" or
// "/", no trailing "/".
func cleanPath(name string) string {
	p := path.Clean("/" + name)
	return strings.TrimPrefix(p, "/")
}

// Uncompress returns the tar stream of a layer blob, gzip, zstd or plain
// (found by its first bytes).
func Uncompress(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		return zr, nil
	case len(magic) == 4 && bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	}
	return io.NopCloser(br), nil
}
