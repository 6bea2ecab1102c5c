package chartfetch

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// cachePath is where the archive of src is cached: CHART-VERSION-KEY.tgz,
// KEY a hash of the repository, chart and version (a mirror of the same
// chart is another entry).
func cachePath(dir string, src Source) string {
	key := sha256.Sum256([]byte(strings.TrimSuffix(src.Repository, "/") + "\n" + src.Chart + "\n" + src.Version))
	return filepath.Join(dir, src.Chart+"-"+src.Version+"-"+hex.EncodeToString(key[:8])+".tgz")
}

// readCache returns the cached archive of src, or nil when there is none
// or it no longer passes the checks (then it is fetched again).
func readCache(p string, src Source) *Archive {
	data, err := os.ReadFile(p)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			slog.Warn("chartfetch: cannot read the cached chart; fetching it", "file", p, "err", err)
		}
		return nil
	}
	a, err := check(src, data, "")
	if err != nil {
		slog.Info("chartfetch: the cached chart is not the one asked for; fetching it", "file", p, "err", err)
		return nil
	}
	return a
}

// writeCache writes an archive to the cache atomically: a temporary file
// in the same folder, synced, then renamed.
func writeCache(p string, data []byte) (err error) {
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("chart cache: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(p)+".*.tmp")
	if err != nil {
		return fmt.Errorf("chart cache: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("chart cache: writing %s: %w", f.Name(), err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("chart cache: writing %s: %w", f.Name(), err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("chart cache: writing %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return fmt.Errorf("chart cache: %w", err)
	}
	return nil
}
