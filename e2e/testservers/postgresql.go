//go:build linux

package testservers

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgreSQL runs initdb and postgres (Debian's package, the newest major
// installed) on a free loopback port with user as the superuser, whose
// password is password; host connections must authenticate with
// scram-sha-256. It returns the address. As root it runs them as the system
// user postgres (or onprem-test, created when needed).
func PostgreSQL(t testing.TB, user, password string) string {
	t.Helper()
	initdb := ensurePackage(t, "postgresql", "/usr/lib/postgresql/*/bin/initdb")
	bin := filepath.Dir(initdb)
	postgres := filepath.Join(bin, "postgres")
	cred := serverUser(t)

	dir := tempDir(t, "onprem-pg-")
	data := filepath.Join(dir, "data")
	pwfile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		if err := chownAll(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("testservers: %v", err)
		}
	}
	asUser := func(cmd *exec.Cmd) *exec.Cmd {
		cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "LANG=C.UTF-8", "HOME="+dir)
		cmd.Dir = dir
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		return cmd
	}
	t0 := time.Now()
	out, err := asUser(exec.Command(initdb, "-D", data, "-U", user, "--pwfile="+pwfile,
		"--auth-local=scram-sha-256", "--auth-host=scram-sha-256", "-E", "UTF8", "--no-sync", "--no-instructions")).CombinedOutput()
	if err != nil {
		t.Fatalf("testservers: initdb: %v\n%s", err, lastLines(out, 30))
	}
	port := FreePort(t)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := start(t, "postgres", filepath.Join(dir, "postgres.log"), asUser(exec.Command(postgres, "-D", data,
		"-p", strconv.Itoa(port), "-h", "127.0.0.1", "-k", dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "logging_collector=off", "-c", "shared_buffers=16MB", "-c", "max_connections=20")))
	waitReady(t, p, time.Minute, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/postgres?sslmode=disable", urlEscape(user), urlEscape(password), addr))
		if err != nil {
			return err
		}
		return conn.Close(ctx)
	})
	t.Logf("testservers: PostgreSQL at %s (initdb + start %s)", addr, time.Since(t0).Round(10*time.Millisecond))
	return addr
}

func urlEscape(s string) string {
	r := strings.NewReplacer("%", "%25", ":", "%3A", "@", "%40", "/", "%2F", "?", "%3F", "#", "%23")
	return r.Replace(s)
}

var (
	userOnce sync.Once
	userCred *syscall.Credential
	userErr  error
)

// serverUser is the identity PostgreSQL runs as: nil (the test's own) when
// not root; else postgres, or onprem-test created as a system user.
func serverUser(t testing.TB) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	userOnce.Do(func() {
		u, err := user.Lookup("postgres")
		if err != nil {
			u, err = user.Lookup("onprem-test")
		}
		if err != nil {
			out, uerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "onprem-test").CombinedOutput()
			if uerr != nil {
				userErr = fmt.Errorf("useradd onprem-test: %v: %s", uerr, out)
				return
			}
			u, err = user.Lookup("onprem-test")
		}
		if err != nil {
			userErr = err
			return
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		userCred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	})
	if userErr != nil {
		t.Fatalf("testservers: a non-root user for PostgreSQL: %v", userErr)
	}
	return userCred
}

func chownAll(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}
