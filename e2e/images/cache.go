//go:build linux

package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"onprem.dev/onprem/e2e/internal/cmdout"
	"onprem.dev/onprem/internal/fsutil"
)

// CacheDir is where the images and what they are made of are kept:
// $ONPREM_CACHE/images, with ONPREM_CACHE defaulting to /var/cache/onprem.
func CacheDir() string {
	return filepath.Join(fsutil.CacheRoot(), "images")
}

// builder holds what one Build call shares: the cache folder and the log.
type builder struct {
	dir string
	log func(string, ...any)

	modOnce sync.Once
	modRoot string
	modErr  error

	stampMu sync.Mutex
	stamps  map[string]string // by image name
}

// stampOf reads the stamp written next to path (path.stamp), or "".
func stampOf(path string) string {
	b, err := os.ReadFile(path + ".stamp")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// fresh reports whether path exists and its stamp is want.
func fresh(path, want string) bool {
	if _, err := os.Stat(path); err != nil {
		return false
	}
	return stampOf(path) == want
}

// produce makes path (a file or a folder) unless it exists with the stamp
// want. make builds it at tmp (a path in the same folder); the result is
// renamed into place and the stamp written last, so that a build that is
// interrupted at any point leaves either the old artifact with its stamp,
// or nothing that counts as built. An exclusive flock on .lock-<base of
// path> keeps two processes from building the same thing at once; the
// second one then finds it built. It reports whether it built.
func (b *builder) produce(ctx context.Context, path, want string, make func(ctx context.Context, tmp string) error) (bool, error) {
	if fresh(path, want) {
		return false, nil
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, fmt.Errorf("creating the cache folder %s: %w", dir, err)
	}
	lock := filepath.Join(dir, ".lock-"+filepath.Base(path))
	unlock, err := fsutil.Lock(ctx, lock, func() {
		b.log("images: waiting for another process that is building (lock %s)", lock)
	})
	if err != nil {
		return false, err
	}
	defer unlock()
	if fresh(path, want) {
		return false, nil
	}
	tmp := filepath.Join(dir, fmt.Sprintf(".tmp-%s-%d", filepath.Base(path), os.Getpid()))
	if err := os.RemoveAll(tmp); err != nil {
		return false, fmt.Errorf("removing the leftover %s: %w", tmp, err)
	}
	defer os.RemoveAll(tmp)
	if err := make(ctx, tmp); err != nil {
		return false, err
	}
	// The old stamp goes first: from here until the new one is written,
	// nothing at path counts as built.
	if err := os.Remove(path + ".stamp"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("replacing %s: %w", path, err)
	}
	if err := os.RemoveAll(path); err != nil {
		return false, fmt.Errorf("replacing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return false, fmt.Errorf("installing %s: %w", path, err)
	}
	if err := fsutil.WriteFileAtomic(path+".stamp", []byte(want+"\n"), 0o644); err != nil {
		return false, fmt.Errorf("writing the stamp of %s: %w", path, err)
	}
	return true, nil
}

// record appends how long building what took to build-times.txt.
func (b *builder) record(what string, d time.Duration) {
	f, err := os.OpenFile(filepath.Join(b.dir, "build-times.txt"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		b.log("images: cannot record the build time of %s: %v", what, err)
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s built in %s\n", time.Now().UTC().Format(time.RFC3339), what, d.Round(100*time.Millisecond))
}

// cmdOpts are the optional parts of a command run by run.
type cmdOpts struct {
	dir    string
	env    []string // added to the process's environment
	stdout io.Writer
	nice   bool // run at a lower priority (long compiles on a shared machine)
}

// run runs name with args, appending its output to logs/<step>.log. On
// failure the error names the step, the command and the log, and carries
// the tail of the output. Cancelling ctx kills the command's process group.
func (b *builder) run(ctx context.Context, step string, o cmdOpts, name string, args ...string) error {
	logs := filepath.Join(b.dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return fmt.Errorf("%s: creating %s: %w", step, logs, err)
	}
	logPath := filepath.Join(logs, step+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	defer logFile.Close()
	line := name + " " + strings.Join(args, " ")
	if name == "bash" && len(args) >= 2 && args[0] == "-c" {
		line = "bash " + strings.Join(args[2:], " ") // name the script, not its text
	}
	fmt.Fprintf(logFile, "\n== %s %s\n", time.Now().UTC().Format(time.RFC3339), line)
	b.log("images: [%s] %s", step, cmdout.Shorten(line, 200))
	if o.nice {
		args = append([]string{"-n", "10", name}, args...)
		name = "nice"
	}
	var tail cmdout.TailBuffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = o.dir
	cmd.Env = append(os.Environ(), o.env...)
	if o.stdout != nil {
		cmd.Stdout = o.stdout
	} else {
		cmd.Stdout = io.MultiWriter(logFile, &tail)
	}
	cmd.Stderr = io.MultiWriter(logFile, &tail)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %s failed after %s (full log %s): %w\n%s", step, cmdout.Shorten(line, 300),
			time.Since(t0).Round(time.Second), logPath, err, tail.Tail(30))
	}
	return nil
}

// output runs a short command and returns its standard output.
func output(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// hashOf is a short hex SHA-256 of parts (length-prefixed, so that
// ("ab","c") and ("a","bc") differ).
func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:24]
}

// fileHash is the SHA-256 of a file's content, or an error naming it.
func fileHash(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
