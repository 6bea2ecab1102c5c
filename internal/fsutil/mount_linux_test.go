package fsutil

import (
	"reflect"
	"testing"
)

func TestMountPointsUnder(t *testing.T) {
	info := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:5 / /work/build rw - tmpfs tmpfs rw
31 30 0:6 / /work/build/rootfs/proc rw - proc proc rw
32 31 0:7 / /work/build/rootfs/proc/sys/fs/binfmt_misc rw - binfmt_misc binfmt_misc rw
33 22 0:8 / /work/build2/proc rw - proc proc rw
34 30 0:9 / /work/build/rootfs/dev rw - devtmpfs devtmpfs rw
`
	got := mountPointsUnder(info, "/work/build")
	// Strictly below the folder (not the folder itself, not /work/build2),
	// the last mounted first, so that nested mounts go before their parent.
	want := []string{"/work/build/rootfs/dev", "/work/build/rootfs/proc/sys/fs/binfmt_misc", "/work/build/rootfs/proc"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("mountPointsUnder = %q, want %q", got, want)
	}
	if got := mountPointsUnder(info, "/nothing"); len(got) != 0 {
		t.Errorf("mountPointsUnder(/nothing) = %q, want none", got)
	}
}

func TestUnmountUnderNothingMounted(t *testing.T) {
	if err := UnmountUnder(t.TempDir()); err != nil {
		t.Fatalf("UnmountUnder of a folder with no mounts: %v", err)
	}
}
