package dbdump

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The MongoDB tools reach the server itself, or, where the chart set
// MONGODB_REPLICA_SET (high availability), the replica set seeded by it:
// restores go to the primary, dumps read from a secondary when one is
// there. The scripts run in sh with stand-ins for the tools that print
// the arguments they were given.
func TestMongoDBToolsFollowTheReplicaSet(t *testing.T) {
	dir := t.TempDir()
	admin := filepath.Join(dir, "admin")
	if err := os.MkdirAll(admin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, value := range map[string]string{"username": "root", "password": "s3cret-admin"} {
		if err := os.WriteFile(filepath.Join(admin, name), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"mongodump", "mongorestore"} {
		if err := os.WriteFile(filepath.Join(bin, tool), []byte("#!/bin/sh\necho "+tool+" \"$@\"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(cmd []string, replicaSet string) string {
		t.Helper()
		c := exec.Command(cmd[0], cmd[1:]...)
		c.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "ONPREM_MONGO_ADMIN_DIR=" + admin, "TMPDIR=" + dir}
		if replicaSet != "" {
			c.Env = append(c.Env, "MONGODB_REPLICA_SET="+replicaSet)
		}
		out, err := c.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v: %s", cmd, err, out)
		}
		if strings.Contains(string(out), "s3cret-admin") {
			t.Errorf("the admin's password is on the command line: %s", out)
		}
		return strings.TrimSpace(string(out))
	}
	dump, err := DumpCommand(MongoDB, "pipelines_api")
	if err != nil {
		t.Fatal(err)
	}
	restore, err := RestoreCommand(MongoDB, "pipelines_api")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, replicaSet string
		cmd              []string
		want, not        string
	}{
		{"dump of a server", "", dump, "mongodump --host 127.0.0.1 --port 27017 --username root --authenticationDatabase admin", "readPreference"},
		{"restore to a server", "", restore, "mongorestore --host 127.0.0.1 --port 27017 --username root", "readPreference"},
		{"dump of a replica set", "onprem", dump, "mongodump --host onprem/127.0.0.1:27017 --readPreference secondaryPreferred --username root", "--port"},
		{"restore to a replica set", "onprem", restore, "mongorestore --host onprem/127.0.0.1:27017 --username root", "readPreference"},
	} {
		got := run(tc.cmd, tc.replicaSet)
		if !strings.HasPrefix(got, tc.want) || strings.Contains(got, tc.not) {
			t.Errorf("%s: %s\nwant it to begin with %s, without %s", tc.name, got, tc.want, tc.not)
		}
		if !strings.Contains(got, "pipelines_api") {
			t.Errorf("%s: %s: the database is not named", tc.name, got)
		}
	}
}

// ReplSetStatus runs mongosh with the mounted admin in its environment,
// never on its command line, and the read-only script as --eval.
func TestReplSetStatusCommand(t *testing.T) {
	dir := t.TempDir()
	admin := filepath.Join(dir, "admin")
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{admin, bin} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, value := range map[string]string{"username": "root", "password": "s3cret-admin"} {
		if err := os.WriteFile(filepath.Join(admin, name), []byte(value), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	stub := "#!/bin/sh\necho \"env: $MONGODB_HOST:$MONGODB_PORT $MONGODB_ADMIN_USERNAME $MONGODB_ADMIN_PASSWORD\"\necho \"args: $*\"\n"
	if err := os.WriteFile(filepath.Join(bin, "mongosh"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := ReplSetStatus()
	c := exec.Command(cmd[0], cmd[1:]...)
	c.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "ONPREM_MONGO_ADMIN_DIR=" + admin}
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	env, args, _ := strings.Cut(string(out), "\n")
	if !strings.HasPrefix(args, "args: --nodb --norc --quiet --eval ") || !strings.Contains(args, "replSetGetStatus") || strings.Contains(args, "s3cret") {
		t.Errorf("mongosh's arguments: %s", args)
	}
	if strings.TrimSpace(env) != "env: 127.0.0.1:27017 root s3cret-admin" {
		t.Errorf("mongosh's environment: %s", env)
	}
	for _, word := range []string{"replSetStepDown", "replSetReconfig", "shutdown", "insert", "update", "drop"} {
		if strings.Contains(replSetStatusJS, word) {
			t.Errorf("the status script says %s: it must only read", word)
		}
	}
}

// The status script runs on Node.js as mongosh would run it, with
// stand-ins for mongosh's Mongo, EJSON and print: it prints the answer,
// or a failed login as {ok: 0, code, errmsg} without the password, as
// one JSON line; it connects directly to the member on the loopback.
func TestReplSetStatusScript(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node")
	}
	stubs := `globalThis.print = (s) => process.stdout.write(s + '\n');
globalThis.EJSON = { stringify: (v, o) => { if (!o || o.relaxed !== true) { throw new Error('not relaxed'); } return JSON.stringify(v); } };
globalThis.Mongo = function (uri) {
  process.stderr.write(uri + '\n');
  return { getDB: (name) => ({
    auth: (u, p) => { if (p !== 'right') { const e = new Error('Authentication failed.'); e.code = 18; throw e; } },
    runCommand: (c) => ({ ok: 1, set: 'onprem', asked: c, db: name }),
  }) };
};
`
	f := filepath.Join(t.TempDir(), "status.js")
	if err := os.WriteFile(f, []byte(stubs+replSetStatusJS), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ password, want string }{
		{"right", `{"ok":1,"set":"onprem","asked":{"replSetGetStatus":1},"db":"admin"}`},
		{"wrong-s3cret", `{"ok":0,"code":18,"errmsg":"Authentication failed."}`},
	} {
		c := exec.Command(node, f)
		c.Env = []string{"MONGODB_HOST=127.0.0.1", "MONGODB_PORT=27017", "MONGODB_ADMIN_USERNAME=root", "MONGODB_ADMIN_PASSWORD=" + tc.password}
		var stderr strings.Builder
		c.Stderr = &stderr
		out, err := c.Output()
		if err != nil {
			t.Fatalf("%v: %s", err, stderr.String())
		}
		if strings.TrimSpace(string(out)) != tc.want {
			t.Errorf("printed %s, want %s", out, tc.want)
		}
		if uri := strings.TrimSpace(stderr.String()); !strings.HasPrefix(uri, "mongodb://127.0.0.1:27017/admin?directConnection=true") || strings.Contains(uri, tc.password) {
			t.Errorf("connected to %s", uri)
		}
	}
}
