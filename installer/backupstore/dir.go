package backupstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"onprem.dev/onprem/installer/backupfile"
)

// Dir keeps backups in a folder of the operator's machine.
type Dir struct{ Path string }

func (d Dir) String() string { return d.Path }

// partialSuffix ends the temporary name of a backup being written.
const partialSuffix = ".partial"

// Create writes name as .NAME.RANDOM.partial in the folder (made if
// missing, mode 0700) and renames it on Commit.
func (d Dir) Create(_ context.Context, name string) (Upload, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d.Path, 0o700); err != nil {
		return nil, fmt.Errorf("backup destination %s: %w", d.Path, err)
	}
	final := filepath.Join(d.Path, name)
	if _, err := os.Lstat(final); err == nil {
		return nil, &ExistsError{Name: name, Where: d.Path}
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	tmp := filepath.Join(d.Path, "."+name+"."+hex.EncodeToString(b)+partialSuffix)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("backup destination %s: %w", d.Path, describe(err))
	}
	return &dirUpload{f: f, tmp: tmp, final: final, dir: d.Path}, nil
}

type dirUpload struct {
	f          *os.File
	tmp, final string
	dir        string
	done       bool
}

func (u *dirUpload) Write(p []byte) (int, error) {
	n, err := u.f.Write(p)
	if err != nil {
		return n, fmt.Errorf("writing the backup to %s: %w", u.dir, describe(err))
	}
	return n, nil
}

func (u *dirUpload) Commit() error {
	if u.done {
		return errors.New("backup: already committed or aborted")
	}
	u.done = true
	err := u.f.Sync()
	if cerr := u.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Link, not rename: it fails if the name appeared meanwhile.
		if err = os.Link(u.tmp, u.final); errors.Is(err, fs.ErrExist) {
			err = &ExistsError{Name: filepath.Base(u.final), Where: u.dir}
		}
	}
	_ = os.Remove(u.tmp)
	if err != nil {
		return fmt.Errorf("writing the backup to %s: %w", u.dir, describe(err))
	}
	if d, err := os.Open(u.dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}

func (u *dirUpload) Abort() {
	if u.done {
		return
	}
	u.done = true
	u.f.Close()
	_ = os.Remove(u.tmp)
}

func (d Dir) Open(_ context.Context, name string) (io.ReadCloser, int64, error) {
	if err := checkName(name); err != nil {
		return nil, 0, err
	}
	f, err := os.Open(filepath.Join(d.Path, name))
	if errors.Is(err, fs.ErrNotExist) {
		objs, _ := d.List(context.Background())
		return nil, 0, &NotFoundError{Name: name, Where: d.Path, Available: names(objs)}
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

func (d Dir) List(context.Context) ([]Object, error) {
	ents, err := os.ReadDir(d.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing backups in %s: %w", d.Path, err)
	}
	var out []Object
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), backupfile.Extension) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		out = append(out, Object{Name: e.Name(), Size: info.Size(), Modified: info.ModTime().UTC()})
	}
	sortObjects(out)
	return out, nil
}

func (d Dir) Delete(_ context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	err := os.Remove(filepath.Join(d.Path, name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting backup %s from %s: %w", name, d.Path, err)
	}
	return nil
}

// describe names a full disk in words an operator searches for.
func describe(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("the destination is full (%w): free space there or choose another --to; nothing was kept of this backup", err)
	}
	return err
}
