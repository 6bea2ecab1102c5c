//go:build unix

package fsutil

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// lockPoll is how often Lock tries again while another holder has the lock.
var lockPoll = 500 * time.Millisecond

// Lock takes an exclusive flock on the file at path (created if missing),
// waiting for as long as ctx allows. The lock excludes every other holder,
// in another process or in this one (each Lock opens the file anew). While
// it waits, waiting (may be nil) is called once at first and then once a
// minute, for the caller to say what it waits for. unlock releases the
// lock; the file stays.
//
// An error names the lock's path; when ctx ends first it wraps ctx.Err().
func Lock(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	t0 := time.Now()
	logged := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				_ = f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if waiting != nil && (!logged || time.Since(t0) > time.Minute) {
			waiting()
			logged, t0 = true, time.Now()
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for the lock %s: %w", path, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}
