//go:build linux

// Package testservers starts real servers on loopback for onprem's tests:
// Redis, PostgreSQL, RabbitMQ (Debian's packages), a MongoDB
// wire-compatible server (FerretDB, built once from the Go module proxy),
// OCI registries (go-containerregistry's in process, distribution) and a
// Git server (git http-backend behind a token check, StartGit).
//
//	func TestX(t *testing.T) {
//		addr := testservers.PostgreSQL(t, "app", "s3cret")   // "127.0.0.1:PORT", stopped in t.Cleanup
//		...
//	}
//
// Every server gets a free loopback port and a temporary folder of its own
// (removed in t.Cleanup), so several can run at once. Each runs in its own
// process group; t.Cleanup sends SIGTERM to the group, then SIGKILL after
// a grace period, and the kernel kills the server if the test binary dies
// (Pdeathsig). A failing start fails the test with the tail of the
// server's log.
//
// # Packages
//
// A missing Debian package (redis-server, postgresql, rabbitmq-server) is
// installed by the helper, once per test binary: apt-get update, then
// apt-get install -y --no-install-recommends <package>. That needs root,
// which this project's test machines run as; otherwise the test fails with
// the exact command to run.
//
// # Users
//
// PostgreSQL refuses to run as root: as root the helper runs initdb and
// postgres as the system user postgres (created by Debian's package) or,
// failing that, as a system user onprem-test that it creates. RabbitMQ,
// Redis and FerretDB run as the test's user.
//
// # Measured on 2 cores
//
// Redis starts in about 0.1 s, PostgreSQL (initdb + start) in about 2 s,
// RabbitMQ in about 7 s, FerretDB in about 0.3 s once built; the FerretDB
// build itself takes about 45 s the first time (see MongoDB).
package testservers

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// stopGrace is how long a server has to stop after SIGTERM.
const stopGrace = 10 * time.Second

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
//
// It is chosen below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), at random: a port the kernel hands out
// for "port 0" or as the local end of an outgoing connection can be taken
// by someone else between this answer and the server's own bind (RabbitMQ
// binds seconds later, and failed on that with eaddrinuse), while a port
// below that range is only ever taken by someone who asks for it by number.
// One test binary never gets the same port twice.
func FreePort(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	for range 200 {
		port := portFloor + rand.IntN(low-portFloor)
		if !handOut(port) {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatalf("testservers: no free port found between %d and %d", portFloor, low)
	return 0
}

// portFloor is the lowest port FreePort returns (above the well-known and
// the usual registered service ports).
const portFloor = 20000

var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{}
)

// handOut records port as given out; false if it already was.
func handOut(port int) bool {
	handedOutMu.Lock()
	defer handedOutMu.Unlock()
	if handedOut[port] {
		return false
	}
	handedOut[port] = true
	return true
}

// ephemeralLow is the lowest port of the kernel's ephemeral range (32768
// when it cannot be read, Linux's default).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > portFloor+1000 {
				low = n
			}
		}
	}
	return low
}

// tempDir is a fresh folder under the system's temporary folder that
// other users can traverse (t.TempDir is 0700 below a 0700 folder), removed
// in t.Cleanup.
func tempDir(t testing.TB, pattern string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		t.Fatalf("testservers: %v", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatalf("testservers: %v", err)
	}
	t.Cleanup(func() {
		if os.Getenv("ONPREM_KEEP_SERVERS") != "" && t.Failed() {
			t.Logf("testservers: kept %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// process is one server process in its own process group.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

// start runs cmd in its own process group with its output in logPath, and
// stops it in t.Cleanup (SIGTERM to the group, SIGKILL after stopGrace).
func start(t testing.TB, name, logPath string, cmd *exec.Cmd) *process {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("testservers: %s: %v", name, err)
	}
	cmd.Stdout = logf
	cmd.Stderr = logf
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		logf.Close()
		t.Fatalf("testservers: starting %s (%s): %v", name, cmd.Path, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	t.Cleanup(p.stop)
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) stop() {
	if p.exited() {
		return
	}
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(stopGrace):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-p.done
	}
	// Children that left the group's leader behind (none expected).
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// waitReady polls ready until it succeeds, the process exits, or timeout
// passes; then it fails the test with the log's tail.
func waitReady(t testing.TB, p *process, timeout time.Duration, ready func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if p.exited() {
			t.Fatalf("testservers: %s exited during start (%v); log %s:\n%s", p.name, p.err, p.log, tail(p.log, 40))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last = ready(ctx)
		cancel()
		if last == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testservers: %s not ready within %s: %v; log %s:\n%s", p.name, timeout, last, p.log, tail(p.log, 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tcpReady succeeds once addr accepts a TCP connection.
func tcpReady(addr string) func(context.Context) error {
	return func(ctx context.Context) error {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		return c.Close()
	}
}

var (
	aptMu      sync.Mutex
	aptUpdated bool
)

// ensurePackage makes sure a Debian package's program exists, installing
// the package when it does not. bins are candidate paths (globs allowed);
// the first that exists is returned.
func ensurePackage(t testing.TB, pkg string, bins ...string) string {
	t.Helper()
	find := func() string {
		for _, b := range bins {
			if !strings.Contains(b, "/") {
				if p, err := exec.LookPath(b); err == nil {
					return p
				}
				continue
			}
			matches, _ := filepath.Glob(b)
			for i := len(matches) - 1; i >= 0; i-- { // the newest version sorts last
				if st, err := os.Stat(matches[i]); err == nil && !st.IsDir() {
					return matches[i]
				}
			}
		}
		return ""
	}
	if p := find(); p != "" {
		return p
	}
	aptMu.Lock()
	defer aptMu.Unlock()
	if p := find(); p != "" {
		return p
	}
	command := "apt-get update && apt-get install -y --no-install-recommends " + pkg
	if os.Geteuid() != 0 {
		t.Fatalf("testservers: %s is not installed and the tests do not run as root; install it with:\n  sudo sh -c '%s'", pkg, command)
	}
	env := append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	run := func(args ...string) {
		t.Logf("testservers: %s", strings.Join(args, " "))
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("testservers: %s: %v\n%s\ninstall it by hand with: %s", strings.Join(args, " "), err, lastLines(out, 30), command)
		}
	}
	if !aptUpdated {
		run("apt-get", "update")
		aptUpdated = true
	}
	run("apt-get", "install", "-y", "--no-install-recommends", pkg)
	p := find()
	if p == "" {
		t.Fatalf("testservers: %s installed but none of %v exists", pkg, bins)
	}
	return p
}

func lastLines(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// EnsurePackage installs Debian package pkg unless one of bins (paths or
// globs; a bare name is looked up on PATH) is there, and returns the
// program found: for a test that runs a tool of the machine itself.
func EnsurePackage(t testing.TB, pkg string, bins ...string) string {
	t.Helper()
	return ensurePackage(t, pkg, bins...)
}
