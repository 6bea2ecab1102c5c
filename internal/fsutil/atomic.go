package fsutil

import (
	"os"
	"path/filepath"
)

// WriteFileAtomic writes data to a temporary file with mode perm next to
// path and renames it over path, so that a reader never sees half a file
// and the mode is perm from the first byte (the umask does not apply). On
// any error the temporary file is removed and path is left as it was.
//
// The temporary file is named .<base>.tmp-<random>, so that a cleanup of
// what killed processes left behind may find it with the glob "*.tmp-*".
func WriteFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
