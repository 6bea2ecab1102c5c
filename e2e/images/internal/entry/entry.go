// Package entry holds what the images' entrypoints share: reading the
// environment the way the official images do (NAME or NAME_FILE), stepping
// down from root to the service's user, and replacing the process with the
// server.
package entry

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Prog is the name entrypoints report errors under.
const Prog = "docker-entrypoint.sh"

// Fail prints an error for the container's log and exits with code 1.
func Fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, Prog+": error: "+format+"\n", args...)
	os.Exit(1)
}

// Logf prints a progress line for the container's log.
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, Prog+": "+format+"\n", args...)
}

// Env reads NAME, or the content of the file NAME_FILE names (how
// Secrets mounted as files are passed), without a trailing newline. Both
// set is an error, as in the official images.
func Env(name string) (string, error) {
	v, file := os.Getenv(name), os.Getenv(name+"_FILE")
	if v != "" && file != "" {
		return "", fmt.Errorf("both %s and %s_FILE are set; set only one", name, name)
	}
	if file == "" {
		return v, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s_FILE: %w", name, err)
	}
	return strings.TrimRight(string(data), "\r\n"), nil
}

// User is a system user of the image.
type User struct {
	Name     string
	UID, GID int
	Home     string
}

// LookupUser reads name from the image's /etc/passwd.
func LookupUser(name string) (User, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return User{}, fmt.Errorf("the image has no user %s: %w", name, err)
	}
	uid, err1 := strconv.Atoi(u.Uid)
	gid, err2 := strconv.Atoi(u.Gid)
	if err1 != nil || err2 != nil {
		return User{}, fmt.Errorf("user %s has a non-numeric id %s:%s", name, u.Uid, u.Gid)
	}
	return User{Name: name, UID: uid, GID: gid, Home: u.HomeDir}, nil
}

// IsRoot reports whether the entrypoint runs as root (a container without
// a securityContext; the charts never do that).
func IsRoot() bool { return os.Geteuid() == 0 }

// StepDown gives dirs (created when missing) to u and becomes u, the way
// the official images do with gosu when started as root. Paths that cannot
// be changed (read-only mounts) are left alone.
func StepDown(u User, dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			continue
		}
		_ = filepath.Walk(d, func(p string, _ os.FileInfo, err error) error {
			if err == nil {
				_ = os.Lchown(p, u.UID, u.GID)
			}
			return nil
		})
	}
	if err := syscall.Setgroups([]int{u.GID}); err != nil {
		return fmt.Errorf("setgroups %d: %w", u.GID, err)
	}
	if err := syscall.Setgid(u.GID); err != nil {
		return fmt.Errorf("setgid %d: %w", u.GID, err)
	}
	if err := syscall.Setuid(u.UID); err != nil {
		return fmt.Errorf("setuid %d: %w", u.UID, err)
	}
	if os.Getenv("HOME") == "" || os.Getenv("HOME") == "/root" {
		_ = os.Setenv("HOME", u.Home)
	}
	return nil
}

// Exec replaces the process with argv (argv[0] looked up in PATH) and env.
// It returns only on failure.
func Exec(argv []string, env []string) error {
	if len(argv) == 0 {
		return errors.New("nothing to run")
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("%s: %w", argv[0], err)
	}
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("exec %s: %w", path, err)
	}
	return nil
}

// EnvWithout is os.Environ() without the named variables (and their
// _FILE forms): secrets the server does not need stay out of its
// environment.
func EnvWithout(names ...string) []string {
	drop := map[string]bool{}
	for _, n := range names {
		drop[n], drop[n+"_FILE"] = true, true
	}
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			out = append(out, kv)
		}
	}
	return out
}
