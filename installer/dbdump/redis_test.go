//go:build linux

package dbdump

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/e2e/testservers"
)

// run runs one of the scripts on this machine against the server, with
// the environment the redis container has.
func run(t *testing.T, r *testservers.RedisServer, cmd []string, stdin []byte) []byte {
	t.Helper()
	host, port, _ := net.SplitHostPort(r.Addr)
	c := exec.Command(cmd[0], cmd[1:]...)
	c.Env = append(os.Environ(), "ONPREM_DB_HOST="+host, "ONPREM_DB_PORT="+port, "ONPREM_REDIS_DIR="+r.Dir, "REDISCLI_AUTH=redis-Secret-1")
	if stdin != nil {
		c.Stdin = bytes.NewReader(stdin)
	}
	var out, stderr bytes.Buffer
	c.Stdout, c.Stderr = &out, &stderr
	if err := c.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd[2], err, stderr.String())
	}
	return out.Bytes()
}

func redisCLI(t *testing.T, r *testservers.RedisServer, args ...string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(r.Addr)
	c := exec.Command("redis-cli", append([]string{"-h", host, "-p", port, "--no-auth-warning"}, args...)...)
	c.Env = append(os.Environ(), "REDISCLI_AUTH=redis-Secret-1")
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// A snapshot of Redis, restored into a server that runs with an
// append-only file (as the chart's does), is what the server holds after
// it starts again; what was written after the snapshot is gone.
func TestRedisSnapshotAndSwap(t *testing.T) {
	r := testservers.StartRedis(t, "redis-Secret-1")
	redisCLI(t, r, "SET", "build:1", "kept")
	snapshot := run(t, r, RedisSnapshot(), nil)
	if !bytes.HasPrefix(snapshot, []byte("REDIS")) {
		t.Fatalf("the snapshot is not an RDB file: %q", snapshot[:min(len(snapshot), 16)])
	}
	redisCLI(t, r, "SET", "build:1", "after the snapshot")
	redisCLI(t, r, "SET", "build:2", "after the snapshot")

	run(t, r, RedisStage(), snapshot)
	run(t, r, RedisSwap(), nil)
	deadline := time.Now().Add(10 * time.Second)
	for !r.Exited() {
		if time.Now().After(deadline) {
			t.Fatal("the swap did not stop the server")
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.Start(t) // what the kubelet does
	if got := redisCLI(t, r, "GET", "build:1"); got != "kept" {
		t.Fatalf("build:1 after the restore: %q", got)
	}
	if got := redisCLI(t, r, "EXISTS", "build:2"); got != "0" {
		t.Fatalf("build:2, written after the snapshot, exists after the restore (%s)", got)
	}
	// It keeps what it is given from then on, across another restart.
	redisCLI(t, r, "SET", "build:3", "new")
	redisCLI(t, r, "SHUTDOWN")
	for !r.Exited() {
		time.Sleep(100 * time.Millisecond)
	}
	r.Start(t)
	if got := redisCLI(t, r, "GET", "build:3"); got != "new" {
		t.Fatalf("build:3 after a restart: %q", got)
	}
	if _, err := os.Stat(r.Dir + "/onprem-restore.rdb"); !os.IsNotExist(err) {
		t.Error("the staged snapshot was left behind")
	}
}

func TestCommandsRefuseBadDatabaseNames(t *testing.T) {
	for _, db := range []string{"", "a b", "x;rm -rf /", strings.Repeat("a", 64), "db.name"} {
		if _, err := DumpCommand(PostgreSQL, db); err == nil {
			t.Errorf("dump of %q accepted", db)
		}
		if _, err := RestoreCommand(MongoDB, db); err == nil {
			t.Errorf("restore of %q accepted", db)
		}
	}
	if _, err := DumpCommand(Redis, "x"); err == nil {
		t.Error("a per-database dump of Redis accepted")
	}
	if _, err := Get("cassandra"); err == nil || !strings.Contains(err.Error(), "mongodb") {
		t.Errorf("unknown engine: %v", err)
	}
}
