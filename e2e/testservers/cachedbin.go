//go:build linux

package testservers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// cachedBinary is a server binary built once from the module proxy into
// $ONPREM_CACHE/bin/<file>, from a work folder $ONPREM_CACHE/bin-src/<src>.
type cachedBinary struct {
	what, file, src, version string
	// build makes the binary at tmp, with work as its folder.
	build func(ctx context.Context, work, tmp string) error

	mu   sync.Mutex
	path string
}

// get returns the binary's path, building it first when it is missing: a
// file lock keeps parallel test binaries from building it twice, and the
// binary is written under a temporary name and renamed when whole, so an
// interrupted build leaves nothing half done. log (may be nil) receives
// progress.
func (c *cachedBinary) get(ctx context.Context, log func(string, ...any)) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path != "" {
		return c.path, nil
	}
	if log == nil {
		log = func(string, ...any) {}
	}
	root := cacheRoot()
	final := filepath.Join(root, "bin", c.file)
	present := func() bool {
		st, err := os.Stat(final)
		return err == nil && st.Mode().IsRegular() && st.Size() > 0
	}
	if present() {
		c.path = final
		return final, nil
	}
	work := filepath.Join(root, "bin-src", c.src)
	for _, d := range []string{filepath.Dir(final), work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", fmt.Errorf("building %s %s: %w", c.what, c.version, err)
		}
	}
	unlock, err := flock(ctx, filepath.Join(work, ".lock"))
	if err != nil {
		return "", fmt.Errorf("building %s %s: %w", c.what, c.version, err)
	}
	defer unlock()
	if present() { // another process built it meanwhile
		c.path = final
		return final, nil
	}
	t0 := time.Now()
	log("testservers: building %s %s into %s (once; cached afterwards)", c.what, c.version, final)
	tmp := filepath.Join(filepath.Dir(final), fmt.Sprintf(".%s.tmp-%d", c.file, os.Getpid()))
	defer os.Remove(tmp)
	if err := c.build(ctx, work, tmp); err != nil {
		return "", fmt.Errorf("building %s %s: %w", c.what, c.version, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		return "", err
	}
	d := time.Since(t0).Round(100 * time.Millisecond)
	log("testservers: built %s %s in %s", c.what, c.version, d)
	if f, err := os.OpenFile(filepath.Join(work, "build-times.txt"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
		fmt.Fprintf(f, "%s %s %s built in %s\n", time.Now().UTC().Format(time.RFC3339), c.what, c.version, d)
		f.Close()
	}
	c.path = final
	return final, nil
}
