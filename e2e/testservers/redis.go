//go:build linux

package testservers

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Redis starts redis-server (Debian's package) on a free loopback port with
// requirepass password (the default user's password: AUTH password, or
// AUTH default password) and no persistence, and returns its address. An
// empty password starts it without authentication.
func Redis(t testing.TB, password string) string {
	t.Helper()
	bin := ensurePackage(t, "redis-server", "/usr/bin/redis-server", "redis-server")
	dir := tempDir(t, "onprem-redis-")
	port := FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	args := []string{
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port),
		"--dir", dir, "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--supervised", "no", "--logfile", "",
		"--unixsocket", "", "--protected-mode", "yes",
	}
	if password != "" {
		args = append(args, "--requirepass", password)
	}
	p := start(t, "redis-server", filepath.Join(dir, "redis.log"), exec.Command(bin, args...))
	waitReady(t, p, 30*time.Second, func(ctx context.Context) error { return redisPing(ctx, addr, password) })
	return addr
}

// RedisServer is a running redis-server that keeps its data, as the
// platform's Redis does (an append-only file in Dir).
type RedisServer struct {
	Addr, Dir string
	password  string
	cmd       []string
	p         *process
}

// StartRedis starts redis-server as the redis chart runs it: requirepass
// password, --appendonly yes in a folder of its own (Dir).
func StartRedis(t testing.TB, password string) *RedisServer {
	t.Helper()
	bin := ensurePackage(t, "redis-server", "/usr/bin/redis-server", "redis-server")
	dir := tempDir(t, "onprem-redis-")
	port := FreePort(t)
	r := &RedisServer{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, password: password,
		cmd: []string{bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir, "--appendonly", "yes",
			"--daemonize", "no", "--supervised", "no", "--logfile", "", "--unixsocket", "", "--requirepass", password}}
	r.Start(t)
	return r
}

// Start starts the server (again: after it stopped, as the kubelet starts
// a container whose process exited) and waits until it answers.
func (r *RedisServer) Start(t testing.TB) {
	t.Helper()
	if r.p != nil {
		r.p.stop()
	}
	r.p = start(t, "redis-server", filepath.Join(r.Dir, "redis.log"), exec.Command(r.cmd[0], r.cmd[1:]...))
	waitReady(t, r.p, 30*time.Second, func(ctx context.Context) error { return redisPing(ctx, r.Addr, r.password) })
}

// Exited reports whether the server's process ended.
func (r *RedisServer) Exited() bool { return r.p.exited() }

// redisPing authenticates (when password is set) and sends PING.
func redisPing(ctx context.Context, addr, password string) error {
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	r := bufio.NewReader(c)
	send := func(args ...string) (string, error) {
		var b strings.Builder
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
		if _, err := c.Write([]byte(b.String())); err != nil {
			return "", err
		}
		line, err := r.ReadString('\n')
		return strings.TrimSpace(line), err
	}
	if password != "" {
		if l, err := send("AUTH", password); err != nil || l != "+OK" {
			return fmt.Errorf("AUTH: %q %v", l, err)
		}
	}
	if l, err := send("PING"); err != nil || l != "+PONG" {
		return fmt.Errorf("PING: %q %v", l, err)
	}
	return nil
}
