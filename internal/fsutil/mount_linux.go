package fsutil

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
)

// UnmountUnder lazily unmounts every mount point below dir (deepest
// first), such as the /proc a killed root-file-system build left mounted
// inside its work folder, so that the folder can then be removed.
func UnmountUnder(dir string) error {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	mounts := mountPointsUnder(string(data), dir)
	var errs []error
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			errs = append(errs, fmt.Errorf("unmount %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}

// mountPointsUnder returns the mount points strictly below dir listed in
// mountinfo (the format of /proc/self/mountinfo), the last mounted first,
// which is the order in which they can be unmounted.
func mountPointsUnder(mountinfo, dir string) []string {
	var mounts []string
	for _, line := range strings.Split(mountinfo, "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			mounts = append(mounts, f[4])
		}
	}
	for i, j := 0, len(mounts)-1; i < j; i, j = i+1, j-1 {
		mounts[i], mounts[j] = mounts[j], mounts[i]
	}
	return mounts
}
