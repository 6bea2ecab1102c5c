package kindcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
)

// NamePrefix starts the name of every cluster this package names itself;
// leftovers of killed runs are found by it.
const NamePrefix = "onprem-"

// A cluster's owner holds an exclusive flock on
// CACHE/clusters/NAME.lock for as long as the cluster is its to delete.
// The kernel drops the lock when the owning process dies, however it
// dies, so a prefixed cluster whose lock can be taken has no owner: it is
// a leftover of a killed run. A kept cluster (ONPREM_KEEP_CLUSTER=1) has a
// NAME.keep file instead and is left alone.

func clustersDir(tc *Toolchain) string { return filepath.Join(tc.Dir, "clusters") }

// owner is the held liveness lock of one cluster.
type owner struct{ f *os.File }

// claim creates and locks NAME.lock; the lock is held until release.
func claim(dir, name string) (*owner, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kindcluster: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name+".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kindcluster: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("kindcluster: cluster %s is owned by another process: %w", name, err)
	}
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return &owner{f: f}, nil
}

// release drops the lock; with forget, the lock file goes too (the
// cluster is deleted).
func (o *owner) release(forget bool) {
	if o == nil || o.f == nil {
		return
	}
	if forget {
		_ = os.Remove(o.f.Name())
	}
	_ = syscall.Flock(int(o.f.Fd()), syscall.LOCK_UN)
	_ = o.f.Close()
	o.f = nil
}

// randomName is the form of the names New gives (NamePrefix and 8 hex
// digits).
var randomName = regexp.MustCompile("^" + regexp.QuoteMeta(NamePrefix) + "[0-9a-f]{8}$")

// orphaned reports whether the prefixed cluster name has no living owner
// and was not kept on purpose. A cluster with no lock file at all is
// this harness's only when it has the harness's random name: someone's
// own "onprem-demo" is never touched.
func orphaned(dir, name string) bool {
	if !strings.HasPrefix(name, NamePrefix) {
		return false
	}
	if _, err := os.Stat(filepath.Join(dir, name+".keep")); err == nil {
		return false
	}
	lock := filepath.Join(dir, name+".lock")
	if _, err := os.Stat(lock); err != nil && !randomName.MatchString(name) {
		return false
	}
	f, err := os.OpenFile(lock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return true
}

// reap deletes, among names, the clusters left by killed runs (see
// orphaned) with del, and returns the ones it deleted.
func reap(dir string, names []string, del func(string) error) ([]string, error) {
	var gone []string
	var errs []error
	for _, n := range names {
		if !orphaned(dir, n) {
			continue
		}
		if err := del(n); err != nil {
			errs = append(errs, fmt.Errorf("deleting leftover cluster %s: %w", n, err))
			continue
		}
		_ = os.Remove(filepath.Join(dir, n+".lock"))
		gone = append(gone, n)
	}
	return gone, errors.Join(errs...)
}

// reapLeftovers deletes the kind clusters named with NamePrefix that no
// running process owns: those of test runs that were killed before their
// cleanup. Clusters kept with ONPREM_KEEP_CLUSTER=1 stay. c needs only its
// Toolchain and logf.
func (c *Cluster) reapLeftovers(ctx context.Context) error {
	p, klog := c.provider()
	names, err := p.List()
	if err != nil {
		return fmt.Errorf("kindcluster: listing kind clusters: %w: %s", err, klog.tail())
	}
	gone, err := reap(clustersDir(c.Toolchain), names, func(n string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := p.Delete(n, ""); err != nil {
			return fmt.Errorf("%w: %s", err, klog.tail())
		}
		return nil
	})
	for _, n := range gone {
		c.logf("kindcluster: deleted leftover cluster %s (its run was killed before cleaning up)", n)
	}
	if err != nil {
		return fmt.Errorf("kindcluster: %w", err)
	}
	return nil
}
