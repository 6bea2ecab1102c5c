package bundle

import (
	"errors"
	"io"
	"io/fs"
	"path"
	"sort"
	"time"
)

// entry is one regular file of the bundle's tar: where its content is.
type entry struct {
	name  string
	off   int64
	size  int64
	mtime time.Time
}

// tarFS serves files of the bundle in place (an io.SectionReader per open
// file), with the directories implied by their paths. It implements
// fs.FS, fs.ReadDirFS, fs.ReadFileFS and fs.StatFS.
type tarFS struct {
	ra    io.ReaderAt
	files map[string]*entry
	dirs  map[string][]string // directory -> sorted names of its children
}

func newTarFS(ra io.ReaderAt, files map[string]*entry) *tarFS {
	t := &tarFS{ra: ra, files: files, dirs: map[string][]string{".": nil}}
	seen := map[string]bool{}
	for p := range files {
		for child := p; child != "."; {
			dir := path.Dir(child)
			key := dir + "\x00" + path.Base(child)
			if seen[key] {
				break
			}
			seen[key] = true
			t.dirs[dir] = append(t.dirs[dir], path.Base(child))
			child = dir
		}
	}
	for d := range t.dirs {
		sort.Strings(t.dirs[d])
	}
	return t
}

func (t *tarFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	if e, ok := t.files[name]; ok {
		return &tarFile{SectionReader: io.NewSectionReader(t.ra, e.off, e.size), info: fileInfo{name: path.Base(name), size: e.size, mtime: e.mtime}}, nil
	}
	if _, ok := t.dirs[name]; ok {
		return &tarDir{fsys: t, path: name}, nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
}

func (t *tarFS) ReadFile(name string) ([]byte, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrInvalid}
	}
	e, ok := t.files[name]
	if !ok {
		if _, dir := t.dirs[name]; dir {
			return nil, &fs.PathError{Op: "readfile", Path: name, Err: errors.New("is a directory")}
		}
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: fs.ErrNotExist}
	}
	b := make([]byte, e.size)
	if _, err := t.ra.ReadAt(b, e.off); err != nil && !(errors.Is(err, io.EOF) && e.size == 0) {
		return nil, &fs.PathError{Op: "readfile", Path: name, Err: err}
	}
	return b, nil
}

func (t *tarFS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	if fi, ok := t.info(name); ok {
		return fi, nil
	}
	return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
}

func (t *tarFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrInvalid}
	}
	children, ok := t.dirs[name]
	if !ok {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: fs.ErrNotExist}
	}
	out := make([]fs.DirEntry, 0, len(children))
	for _, c := range children {
		fi, _ := t.info(path.Join(name, c))
		out = append(out, fs.FileInfoToDirEntry(fi))
	}
	return out, nil
}

func (t *tarFS) info(name string) (fileInfo, bool) {
	if e, ok := t.files[name]; ok {
		return fileInfo{name: path.Base(name), size: e.size, mtime: e.mtime}, true
	}
	if _, ok := t.dirs[name]; ok {
		return fileInfo{name: path.Base(name), dir: true}, true
	}
	return fileInfo{}, false
}

type fileInfo struct {
	name  string
	size  int64
	dir   bool
	mtime time.Time
}

func (fi fileInfo) Name() string       { return fi.name }
func (fi fileInfo) Size() int64        { return fi.size }
func (fi fileInfo) ModTime() time.Time { return fi.mtime }
func (fi fileInfo) IsDir() bool        { return fi.dir }
func (fi fileInfo) Sys() any           { return nil }
func (fi fileInfo) Mode() fs.FileMode {
	if fi.dir {
		return fs.ModeDir | 0o555
	}
	return 0o444
}

type tarFile struct {
	*io.SectionReader
	info fileInfo
}

func (f *tarFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *tarFile) Close() error               { return nil }

type tarDir struct {
	fsys *tarFS
	path string
	pos  int
}

func (d *tarDir) Stat() (fs.FileInfo, error) {
	fi, _ := d.fsys.info(d.path)
	return fi, nil
}

func (d *tarDir) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.path, Err: errors.New("is a directory")}
}

func (d *tarDir) Close() error { return nil }

func (d *tarDir) ReadDir(n int) ([]fs.DirEntry, error) {
	all, err := d.fsys.ReadDir(d.path)
	if err != nil {
		return nil, err
	}
	rest := all[d.pos:]
	if n <= 0 {
		d.pos = len(all)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if n > len(rest) {
		n = len(rest)
	}
	d.pos += n
	return rest[:n], nil
}
