package kindcluster

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Only prefixed clusters with no living owner and no keep mark are
// reaped: a held lock (another run's cluster) protects its cluster, a
// released one (a killed run's) does not.
func TestReapOnlyOrphans(t *testing.T) {
	dir := t.TempDir()
	alive, err := claim(dir, NamePrefix+"alive")
	if err != nil {
		t.Fatal(err)
	}
	defer alive.release(true)
	if _, err := claim(dir, NamePrefix+"alive"); err == nil {
		t.Fatal("a second owner claimed a held cluster")
	}
	dead, err := claim(dir, NamePrefix+"killed")
	if err != nil {
		t.Fatal(err)
	}
	dead.release(false) // what the kernel does when the run is killed
	kept, err := claim(dir, NamePrefix+"kept")
	if err != nil {
		t.Fatal(err)
	}
	kept.release(false)
	if err := os.WriteFile(filepath.Join(dir, NamePrefix+"kept.keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	var deleted []string
	names := []string{NamePrefix + "alive", NamePrefix + "killed", NamePrefix + "kept", NamePrefix + "0badf00d", NamePrefix + "demo", "kind", "someone-else"}
	gone, err := reap(dir, names, func(n string) error { deleted = append(deleted, n); return nil })
	if err != nil {
		t.Fatal(err)
	}
	want := []string{NamePrefix + "killed", NamePrefix + "0badf00d"}
	if !slices.Equal(gone, want) || !slices.Equal(deleted, want) {
		t.Errorf("reaped %v (deleted %v), want %v", gone, deleted, want)
	}
	if _, err := os.Stat(filepath.Join(dir, NamePrefix+"killed.lock")); !os.IsNotExist(err) {
		t.Errorf("the reaped cluster's lock file stayed: %v", err)
	}
}
