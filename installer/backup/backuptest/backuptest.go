//go:build linux

// Package backuptest runs backups and restores in the integration ring,
// where the database pods are simulated (kwok) and cannot run a command:
// Exec runs the very scripts onprem would run in those pods
// (installer/dbdump) on this machine instead, against real servers on
// loopback (e2e/testservers: PostgreSQL with Debian's pg_dump and
// pg_restore, FerretDB with the e2e image's mongodump and mongorestore
// stand-ins, RabbitMQ with rabbitmqctl), with the environment the pods'
// containers would have.
package backuptest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/podexec"
)

// Servers are the real databases that stand for one cluster's database
// pods.
type Servers struct {
	PostgreSQL     string // 127.0.0.1:PORT
	PGUser, PGPass string
	MongoDB        string
	MongoUser      string
	MongoPass      string
	RabbitMQ       *testservers.RabbitMQServer
	// Redis (127.0.0.1:PORT), the password its container's environment
	// has, and the file that stands for the password the redis chart
	// mounts from its Secret (a test plays the kubelet that updates it).
	Redis, RedisPass, RedisAuthFile string
	// RedisDir is Redis's data folder (the chart's /data).
	RedisDir string
	// PGAdminDir, when set, stands for the admin Secret the postgresql
	// chart mounts (a test plays the kubelet that updates it).
	PGAdminDir string
	// MongoAdminDir, when set, stands for the admin Secret the mongodb
	// chart mounts.
	MongoAdminDir string
}

// Start starts PostgreSQL, FerretDB and RabbitMQ on loopback.
func Start(t testing.TB) *Servers {
	t.Helper()
	s := &Servers{PGUser: "postgres", PGPass: "pg-Admin-Secret-1", MongoUser: "root", MongoPass: "mongo-Root-Secret-1"}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); s.PostgreSQL = testservers.PostgreSQL(t, s.PGUser, s.PGPass) }()
	go func() { defer wg.Done(); s.MongoDB = testservers.MongoDB(t, s.MongoUser, s.MongoPass) }()
	s.RabbitMQ = testservers.StartRabbitMQ(t, "onprem", "rabbit-Secret-1")
	wg.Wait()
	return s
}

// Exec runs onprem's database scripts on this machine against Servers: a
// command for container mongodb, postgresql or rabbitmq runs with the
// environment that container would have, pointed at the server.
type Exec struct {
	servers *Servers
	path    string
	// Before, when set, is called before each command; an error fails the
	// command (a test's way to check an ordering, or to inject a fault).
	Before func(t podexec.Target, cmd []string) error

	mu    sync.Mutex
	calls []Call
}

// Call is one command Exec ran.
type Call struct {
	Target podexec.Target
	// Script is the shell script (sh -c SCRIPT) and Args its arguments.
	Script string
	Args   []string
	Err    error
}

// NewExec builds the mongodump, mongorestore and mongosh stand-ins (Go's
// build cache makes this quick after the first time) and returns the
// executor.
func NewExec(t testing.TB, s *Servers) *Exec {
	t.Helper()
	bin := t.TempDir()
	root := moduleRoot(t)
	for _, tool := range []string{"mongodump", "mongorestore", "mongosh"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, tool), "./e2e/images/cmd/"+tool)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("backuptest: building the %s stand-in: %v\n%s", tool, err, out)
		}
	}
	pgBin, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	path := []string{bin}
	path = append(path, pgBin...)
	path = append(path, "/usr/lib/rabbitmq/bin", os.Getenv("PATH"))
	return &Exec{servers: s, path: strings.Join(path, ":")}
}

// Path is the PATH the commands run with (the stand-ins first): what
// ExecAt takes to run them in another process of the test.
func (e *Exec) Path() string { return e.path }

// ExecAt is the executor of NewExec with the stand-ins already built, on
// PATH path: for a child process of a test (a process the test kills).
func ExecAt(s *Servers, path string) *Exec { return &Exec{servers: s, path: path} }

func moduleRoot(t testing.TB) string {
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Dir(file)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("backuptest: no go.mod above " + file)
		}
		dir = parent
	}
}

// env is what the container would have, pointed at the server.
func (e *Exec) env(container string) ([]string, error) {
	s := e.servers
	hostPort := func(addr string) []string {
		h, p, _ := net.SplitHostPort(addr)
		return []string{"ONPREM_DB_HOST=" + h, "ONPREM_DB_PORT=" + p}
	}
	switch container {
	case "postgresql":
		env := append(hostPort(s.PostgreSQL), "POSTGRES_USER="+s.PGUser, "POSTGRES_PASSWORD="+s.PGPass)
		if s.PGAdminDir != "" {
			env = append(env, "ONPREM_PG_ADMIN_DIR="+s.PGAdminDir)
		}
		return env, nil
	case "mongodb":
		env := append(hostPort(s.MongoDB), "MONGO_INITDB_ROOT_USERNAME="+s.MongoUser, "MONGO_INITDB_ROOT_PASSWORD="+s.MongoPass)
		if s.MongoAdminDir != "" {
			env = append(env, "ONPREM_MONGO_ADMIN_DIR="+s.MongoAdminDir)
		}
		return env, nil
	case "rabbitmq":
		if s.RabbitMQ == nil {
			break
		}
		return append([]string(nil), s.RabbitMQ.CLIEnv...), nil
	case "redis":
		if s.Redis == "" {
			break
		}
		return append(hostPort(s.Redis), "REDIS_PASSWORD="+s.RedisPass, "REDISCLI_AUTH="+s.RedisPass, "ONPREM_REDIS_AUTH_FILE="+s.RedisAuthFile, "ONPREM_REDIS_DIR="+s.RedisDir), nil
	}
	return nil, fmt.Errorf("backuptest: no server stands for container %q", container)
}

// Exec implements podexec.Executor.
func (e *Exec) Exec(ctx context.Context, t podexec.Target, cmd []string, stdin io.Reader, stdout io.Writer) error {
	call := Call{Target: t}
	if len(cmd) >= 3 && cmd[0] == "sh" && cmd[1] == "-c" {
		call.Script = cmd[2]
		if len(cmd) > 4 {
			call.Args = cmd[4:]
		}
	}
	err := e.run(ctx, t, cmd, stdin, stdout)
	call.Err = err
	e.mu.Lock()
	e.calls = append(e.calls, call)
	e.mu.Unlock()
	return err
}

func (e *Exec) run(ctx context.Context, t podexec.Target, cmd []string, stdin io.Reader, stdout io.Writer) error {
	if e.Before != nil {
		if err := e.Before(t, cmd); err != nil {
			return err
		}
	}
	env, err := e.env(t.Container)
	if err != nil {
		return err
	}
	c := exec.CommandContext(ctx, cmd[0], cmd[1:]...)
	c.Env = append(append(os.Environ(), "PATH="+e.path), env...)
	c.Stdin, c.Stdout = stdin, stdout
	var stderr bytes.Buffer
	c.Stderr = &stderr
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	c.Cancel = func() error { return syscall.Kill(-c.Process.Pid, syscall.SIGKILL) }
	err = c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &podexec.ExitError{Target: t, Cmd: cmd[0], Code: ee.ExitCode(), Stderr: stderr.String()}
	}
	return err
}

// Command is a command of one of the tools (pg_dump, pg_restore,
// mongodump, mongorestore, rabbitmqctl) run on this machine, as an
// operator would run it by hand (benchmarks compare onprem with that).
func (e *Exec) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	path := name
	for _, dir := range strings.Split(e.path, ":") {
		if p := filepath.Join(dir, name); dir != "" && fileExists(p) {
			path = p
			break
		}
	}
	c := exec.CommandContext(ctx, path, args...)
	c.Env = append(os.Environ(), "PATH="+e.path)
	return c
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// Calls returns the commands run so far.
func (e *Exec) Calls() []Call {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.calls)
}

// Provision does what db-provision does for each service database (on
// kwok its Job does not run): a PostgreSQL role and database owned by it,
// and an empty MongoDB database.
func (s *Servers) Provision(t testing.TB, pg, mongo []string) {
	t.Helper()
	ctx := context.Background()
	conn := s.pg(t, "postgres")
	defer conn.Close(ctx)
	for _, db := range pg {
		var exists bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", db).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if !exists {
			if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN PASSWORD 'x-%s'`, pgx.Identifier{db}.Sanitize(), db)); err != nil {
				t.Fatal(err)
			}
		}
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)", db).Scan(&exists); err != nil {
			t.Fatal(err)
		}
		if !exists {
			if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE DATABASE %s OWNER %s`, pgx.Identifier{db}.Sanitize(), pgx.Identifier{db}.Sanitize())); err != nil {
				t.Fatal(err)
			}
		}
	}
	_ = mongo // MongoDB makes a database on its first write
}

func (s *Servers) pg(t testing.TB, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", s.PGUser, s.PGPass, s.PostgreSQL, db))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

func (s *Servers) mongo(t testing.TB) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(options.Client().SetHosts([]string{s.MongoDB}).SetDirect(true).
		SetAuth(options.Credential{Username: s.MongoUser, Password: s.MongoPass, AuthSource: "admin"}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Write stores records (key → value) in a table "records" of each
// PostgreSQL database (owned by the database's role) and a collection
// "records" of each MongoDB database.
func (s *Servers) Write(t testing.TB, pg, mongo []string, records map[string]string) {
	t.Helper()
	ctx := context.Background()
	for _, db := range pg {
		conn := s.pg(t, db)
		if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS records (k text PRIMARY KEY, v text NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("ALTER TABLE records OWNER TO %s", pgx.Identifier{db}.Sanitize())); err != nil {
			t.Fatal(err)
		}
		for k, v := range records {
			if _, err := conn.Exec(ctx, "INSERT INTO records (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = $2", k, v); err != nil {
				t.Fatal(err)
			}
		}
		conn.Close(ctx)
	}
	mc := s.mongo(t)
	defer mc.Disconnect(ctx)
	for _, db := range mongo {
		coll := mc.Database(db).Collection("records")
		for k, v := range records {
			if _, err := coll.ReplaceOne(ctx, bson.D{{Key: "_id", Value: k}}, bson.D{{Key: "_id", Value: k}, {Key: "v", Value: v}}, options.Replace().SetUpsert(true)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Read returns the records of each database, by "postgresql/DB" and
// "mongodb/DB" (a missing table or collection reads as no records).
func (s *Servers) Read(t testing.TB, pg, mongo []string) map[string]map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]map[string]string{}
	for _, db := range pg {
		got := map[string]string{}
		conn := s.pg(t, db)
		rows, err := conn.Query(ctx, "SELECT k, v FROM records")
		if err == nil {
			for rows.Next() {
				var k, v string
				if err := rows.Scan(&k, &v); err != nil {
					t.Fatal(err)
				}
				got[k] = v
			}
			rows.Close()
		}
		conn.Close(ctx)
		out["postgresql/"+db] = got
	}
	mc := s.mongo(t)
	defer mc.Disconnect(ctx)
	for _, db := range mongo {
		got := map[string]string{}
		cur, err := mc.Database(db).Collection("records").Find(ctx, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		for cur.Next(ctx) {
			got[cur.Current.Lookup("_id").StringValue()] = cur.Current.Lookup("v").StringValue()
		}
		cur.Close(ctx)
		out["mongodb/"+db] = got
	}
	return out
}

// Lose drops every record: what a lost volume leaves.
func (s *Servers) Lose(t testing.TB, pg, mongo []string) {
	t.Helper()
	ctx := context.Background()
	for _, db := range pg {
		conn := s.pg(t, db)
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS records"); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
	}
	mc := s.mongo(t)
	defer mc.Disconnect(ctx)
	for _, db := range mongo {
		if err := mc.Database(db).Drop(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
