//go:build linux

package testservers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"onprem.dev/onprem/internal/fsutil"
)

// FerretDBVersion is the FerretDB release that MongoDB runs.
const FerretDBVersion = "v1.24.0"

const ferretModule = "github.com/FerretDB/FerretDB"

// MongoDB starts FerretDB (a MongoDB wire-protocol server; Debian has no
// MongoDB) with its SQLite backend in a temporary folder, on a free loopback
// port, with real authentication (--test-enable-new-auth: SCRAM-SHA-1/256,
// wrong passwords refused) and user/password set up as a user of the admin
// database. It returns the address once that user can run a command.
// buildInfo reports 7.0.x.
//
// The binary is built from the Go module proxy the first time (about 45 s
// on 2 cores) and kept in $ONPREM_CACHE/ferretdb/ (ONPREM_CACHE defaults to
// /var/cache/onprem): bin/ferretdb with bin/ferretdb.version, src/ (the
// module's source with build/version/version.txt written, which the module
// zip lacks and without which the binary panics), build.log, .lock.
func MongoDB(t testing.TB, user, password string) string {
	t.Helper()
	return MongoDBAt(t, "127.0.0.1", user, password)
}

// MongoDBAt is MongoDB listening on ip instead of loopback: the address of
// a docker network's gateway, for example, so that pods of a kind cluster
// can reach it as an external MongoDB.
func MongoDBAt(t testing.TB, ip, user, password string) string {
	t.Helper()
	bin, err := FerretDB(context.Background(), t.Logf)
	if err != nil {
		t.Fatalf("testservers: %v", err)
	}
	dir := tempDir(t, "onprem-ferretdb-")
	data := filepath.Join(dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	port, debugPort := FreePort(t), FreePort(t)
	addr := net.JoinHostPort(ip, strconv.Itoa(port))
	cmd := exec.Command(bin,
		"--handler=sqlite", "--sqlite-url=file:"+data+"/",
		"--listen-addr="+addr,
		"--debug-addr=127.0.0.1:"+strconv.Itoa(debugPort),
		"--state-dir="+dir,
		"--telemetry=disable",
		"--test-enable-new-auth",
		"--setup-database=admin", "--setup-username="+user, "--setup-password="+password,
		"--log-level=info",
	)
	cmd.Dir = dir
	t0 := time.Now()
	p := start(t, "ferretdb", filepath.Join(dir, "ferretdb.log"), cmd)
	waitReady(t, p, time.Minute, func(ctx context.Context) error {
		c, err := mongo.Connect(options.Client().SetHosts([]string{addr}).SetDirect(true).
			SetAuth(options.Credential{Username: user, Password: password, AuthSource: "admin"}).
			SetServerSelectionTimeout(2 * time.Second))
		if err != nil {
			return err
		}
		defer c.Disconnect(context.Background())
		return c.Database("admin").RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err()
	})
	t.Logf("testservers: FerretDB %s at %s (started in %s)", FerretDBVersion, addr, time.Since(t0).Round(10*time.Millisecond))
	return addr
}

var (
	ferretMu  sync.Mutex
	ferretBin string
)

// FerretDBCacheDir is $ONPREM_CACHE/ferretdb.
func FerretDBCacheDir() string {
	return filepath.Join(fsutil.CacheRoot(), "ferretdb")
}

// FerretDB returns the path of the FerretDB binary, building it first when
// the cache does not hold FerretDBVersion. A file lock keeps parallel test
// binaries from building it twice; the binary is written under a temporary
// name and renamed, so an interrupted build leaves nothing half done.
func FerretDB(ctx context.Context, log func(string, ...any)) (string, error) {
	ferretMu.Lock()
	defer ferretMu.Unlock()
	if ferretBin != "" {
		return ferretBin, nil
	}
	if log == nil {
		log = func(string, ...any) {}
	}
	dir := FerretDBCacheDir()
	final := filepath.Join(dir, "bin", "ferretdb")
	present := func() bool {
		st, err := os.Stat(final)
		stamp, serr := os.ReadFile(final + ".version")
		return err == nil && st.Size() > 0 && serr == nil && strings.TrimSpace(string(stamp)) == FerretDBVersion
	}
	if present() {
		ferretBin = final
		return final, nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		return "", err
	}
	unlock, err := flock(ctx, filepath.Join(dir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	if present() {
		ferretBin = final
		return final, nil
	}
	t0 := time.Now()
	log("testservers: building FerretDB %s into %s (once; cached afterwards)", FerretDBVersion, dir)
	if err := buildFerretDB(ctx, dir, final); err != nil {
		return "", fmt.Errorf("building FerretDB %s: %w", FerretDBVersion, err)
	}
	d := time.Since(t0).Round(100 * time.Millisecond)
	log("testservers: built FerretDB %s in %s", FerretDBVersion, d)
	if f, err := os.OpenFile(filepath.Join(dir, "build-times.txt"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
		fmt.Fprintf(f, "%s ferretdb %s built in %s\n", time.Now().UTC().Format(time.RFC3339), FerretDBVersion, d)
		f.Close()
	}
	ferretBin = final
	return final, nil
}

func buildFerretDB(ctx context.Context, dir, final string) error {
	logPath := filepath.Join(dir, "build.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	flagsOut, err := exec.CommandContext(ctx, "go", "env", "GOFLAGS").Output()
	if err != nil {
		return fmt.Errorf("go env GOFLAGS (the go command is needed): %w", err)
	}
	var flags []string
	for _, f := range strings.Fields(string(flagsOut)) {
		if !strings.HasPrefix(f, "-mod=") {
			flags = append(flags, f)
		}
	}
	env := append(os.Environ(), "GOTOOLCHAIN=local", "GOWORK=off", "CGO_ENABLED=0")
	run := func(wd string, extra []string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = wd
		cmd.Env = append(append([]string(nil), env...), extra...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 10 * time.Second
		var out strings.Builder
		cmd.Stdout = &out
		cmd.Stderr = logf
		fmt.Fprintf(logf, "$ go %s\n", strings.Join(args, " "))
		err := cmd.Run()
		if err != nil {
			return nil, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, tail(logPath, 30))
		}
		return []byte(out.String()), nil
	}
	// Download outside any module: the proxy serves the module zip even
	// though it refuses FerretDB's version list.
	out, err := run(dir, []string{"GOFLAGS=" + strings.Join(flags, " ")}, "mod", "download", "-json", ferretModule+"@"+FerretDBVersion)
	if err != nil {
		return err
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return fmt.Errorf("go mod download: %w", err)
	}
	if info.Error != "" || info.Dir == "" {
		return fmt.Errorf("go mod download %s@%s: %s", ferretModule, FerretDBVersion, info.Error)
	}
	// Copy the source out of the (read-only) module cache and add the
	// version file the module zip lacks.
	src := filepath.Join(dir, "src")
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	if err := os.CopyFS(src, os.DirFS(info.Dir)); err != nil {
		return fmt.Errorf("copying %s: %w", info.Dir, err)
	}
	if err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chmod(p, fi.Mode()|0o200)
	}); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "build", "version", "version.txt"), []byte(FerretDBVersion+"\n"), 0o644); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "bin", fmt.Sprintf(".ferretdb.tmp-%d", os.Getpid()))
	defer os.Remove(tmp)
	if _, err := run(src, []string{"GOFLAGS=" + strings.TrimSpace(strings.Join(flags, " ")+" -mod=mod")},
		"build", "-trimpath", "-ldflags", "-s -w", "-o", tmp, "./cmd/ferretdb"); err != nil {
		return err
	}
	if err := os.Remove(final); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.WriteFile(final+".version.tmp", []byte(FerretDBVersion+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(final+".version.tmp", final+".version"); err != nil {
		return err
	}
	return os.Rename(tmp, final)
}

// flock takes an exclusive lock on path, waiting as long as ctx allows.
func flock(ctx context.Context, path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
