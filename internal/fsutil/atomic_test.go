package fsutil

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestWriteFileAtomicWritesContentAndExactMode(t *testing.T) {
	dir := t.TempDir()
	for _, perm := range []os.FileMode{0o600, 0o644, 0o755, 0o666} {
		path := filepath.Join(dir, "f-"+perm.String())
		if err := WriteFileAtomic(path, []byte("hello\n"), perm); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != "hello\n" {
			t.Fatalf("%s: read %q, %v", path, got, err)
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		// 0o666 would be 0o644 under the usual umask 022 with os.WriteFile:
		// the mode is set on the file itself, whatever the umask.
		if fi.Mode().Perm() != perm {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), perm)
		}
	}
	assertOnly(t, dir, "f--rw-------", "f--rw-r--r--", "f--rwxr-xr-x", "f--rw-rw-rw-")
}

func TestWriteFileAtomicReplacesAndTakesTheNewMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := os.WriteFile(path, []byte("old, longer content"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if string(got) != "new" {
		t.Errorf("content %q, want %q", got, "new")
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	assertOnly(t, dir, "key")
}

// When the final rename fails, the temporary file is gone and what was at
// path is untouched.
func TestWriteFileAtomicLeavesNothingOnFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "target")
	// A non-empty folder at path: the rename over it fails.
	if err := os.MkdirAll(filepath.Join(path, "inside"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(path, bytes.Repeat([]byte("x"), 1<<16), 0o644); err == nil {
		t.Fatal("writing over a non-empty folder succeeded")
	}
	assertOnly(t, dir, "target")
	if fi, err := os.Stat(filepath.Join(path, "inside")); err != nil || !fi.IsDir() {
		t.Errorf("the folder at path was changed: %v", err)
	}
}

func TestWriteFileAtomicMissingFolder(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFileAtomic(filepath.Join(dir, "no", "such", "f"), []byte("x"), 0o644); err == nil {
		t.Fatal("writing into a missing folder succeeded")
	}
	assertOnly(t, dir)
}

// A reader never sees a mix of two writes or a short file, however the
// writers interleave.
func TestWriteFileAtomicReadersSeeWholeFiles(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "f")
	const size = 256 << 10
	a, b := bytes.Repeat([]byte("a"), size), bytes.Repeat([]byte("b"), size)
	if err := WriteFileAtomic(path, a, 0o644); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, data := range [][]byte{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 20 {
				if err := WriteFileAtomic(path, data, 0o644); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for reads := 0; ; reads++ {
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, a) && !bytes.Equal(got, b) {
			t.Fatalf("read %d bytes that are neither whole write", len(got))
		}
		select {
		case <-done:
			assertOnly(t, dir, "f")
			return
		default:
		}
	}
}

// assertOnly fails unless dir holds exactly the names want (no temporary
// file left behind).
func assertOnly(t *testing.T, dir string, want ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range entries {
		got[e.Name()] = true
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("%s is missing from %s", w, dir)
		}
		delete(got, w)
	}
	for name := range got {
		t.Errorf("%s was left in %s", name, dir)
	}
}
