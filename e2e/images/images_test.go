//go:build linux

package images

import (
	"bufio"
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	amqp "github.com/rabbitmq/amqp091-go"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"onprem.dev/onprem/e2e/images/internal/sandbox"
	"onprem.dev/onprem/e2e/refservice"
)

// These tests build every image for real (a cold cache takes about a
// quarter of an hour, most of it Traefik) and run each one's program on
// this machine from the image's own file system, under its chart's
// contract (see pod_test.go), to prove that it serves. Root is needed
// (debootstrap, chroot, namespaces); the test machines run as root.

func TestMain(m *testing.M) {
	sandbox.Main() // the sandbox processes are this binary, re-executed
	// The Traefik binary is the longest build of an empty cache (its
	// modules, then a large compile: more than half an hour on a busy
	// 2-core machine). It starts at once, beside the tests that build the
	// Debian-based images (downloads and file copies, mostly), instead of
	// when the test that needs it comes; that test waits on the build's
	// lock and finds it done. A failure here is that test's to report.
	prebuilt := make(chan struct{})
	go func() {
		defer close(prebuilt)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
		defer cancel()
		b := &builder{dir: CacheDir(), log: func(format string, args ...any) { slog.Info(fmt.Sprintf(format, args...)) }}
		if _, err := b.traefikBinary(ctx); err != nil {
			slog.Warn("images: building the Traefik binary ahead of its test", "error", err)
		}
	}()
	code := m.Run()
	<-prebuilt
	cleanupUnpacked()
	os.Exit(code)
}

var (
	builtMu sync.Mutex
	built   = map[string]Image{}
)

// build returns the named image, building it (or reading the cache) once
// per test binary.
func build(t *testing.T, name string) Image {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("building the images needs root (debootstrap, chroot) and so does running them (namespaces); the test machines run as root")
	}
	builtMu.Lock()
	defer builtMu.Unlock()
	if img, ok := built[name]; ok {
		return img
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Minute)
	defer cancel()
	imgs, err := Build(ctx, []string{name}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 1 || imgs[0].Name != name {
		t.Fatalf("Build(%s) = %+v", name, imgs)
	}
	built[name] = imgs[0]
	return imgs[0]
}

func secret() string { return "pw-" + randHex(12) }

func TestRedisServesWithTheChartsPassword(t *testing.T) {
	img := build(t, "redis")
	checkUser(t, img, "999:999")
	password := secret()
	cfg := podConfig{
		chart: "redis", container: "redis", name: "redis-0", root: unpack(t, img),
		values:  map[string]any{"images": map[string]any{"redis": img.Ref}},
		secrets: map[string]map[string]string{"onprem-redis": {"password": password}},
	}
	p := runPod(t, img, cfg)
	// The readiness probe is the chart's `redis-cli ... ping | grep -q PONG`
	// with REDISCLI_AUTH, run inside the sandbox.
	p.waitProbes(2 * time.Minute)

	c, r := redisDial(t, p, 6379)
	redisExpect(t, c, r, []redisStep{
		{[]string{"PING"}, "-NOAUTH"},
		{[]string{"AUTH", "wrong-" + password}, "-WRONGPASS"},
		{[]string{"AUTH", password}, "+OK"},
		{[]string{"PING"}, "+PONG"},
		{[]string{"SET", "build:42", "log line"}, "+OK"},
		{[]string{"GET", "build:42"}, "log line"},
		{[]string{"CONFIG", "GET", "maxmemory-policy"}, "noeviction"},
	})
	// The sandbox is what the chart asks for: the chart's user with its
	// fsGroup, the pod's hostname, a read-only root, a writable volume.
	for cmd, want := range map[string]string{
		"id -u; id -G; hostname":            "999\n999\nredis-0\n",
		"touch /probe 2>&1 || echo refused": "touch: cannot touch '/probe': Read-only file system\nrefused\n",
		"touch /data/probe && echo written": "written\n",
	} {
		out, err := p.sb.Exec(context.Background(), p.uid, p.gid, p.env, "sh", "-c", cmd)
		if err != nil || string(out) != want {
			t.Errorf("%s: %q (%v), want %q", cmd, out, err, want)
		}
	}
	// --appendonly yes --dir /data: the data is on the volume.
	deadline := time.Now().Add(10 * time.Second)
	for {
		entries, _ := os.ReadDir(filepath.Join(p.volumes["data"], "appendonlydir"))
		if len(entries) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no append-only file in the data volume %s", p.volumes["data"])
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := p.stop(); err != nil {
		t.Errorf("redis did not stop cleanly on SIGTERM: %v\n%s", err, tail(p.output(), 20))
	}
}

// redisDial connects to the pod's Redis (or Sentinel) port; the
// connection is closed when the test ends.
func redisDial(t *testing.T, p *pod, port int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := p.dial(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// redisStep is a command and the start of the reply it must get.
type redisStep struct {
	args []string
	want string
}

// redisExpect sends each step's command and checks its reply.
func redisExpect(t *testing.T, c net.Conn, r *bufio.Reader, steps []redisStep) {
	t.Helper()
	for _, step := range steps {
		got, err := redisCall(c, r, step.args...)
		if err != nil {
			t.Fatalf("%v: %v", step.args, err)
		}
		if !strings.HasPrefix(got, step.want) {
			t.Errorf("%v = %q, want %q", step.args, got, step.want)
		}
	}
}

// redisCall sends one command (RESP) and returns the reply: "+..." and
// "-..." for status and errors, the value for a bulk string, the last
// element of an array.
func redisCall(c net.Conn, r *bufio.Reader, args ...string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c, b.String()); err != nil {
		return "", err
	}
	var read func() (string, error)
	read = func() (string, error) {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case strings.HasPrefix(line, "$"):
			n, err := strconv.Atoi(line[1:])
			if err != nil || n < 0 {
				return "", err
			}
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return "", err
			}
			return string(buf[:n]), nil
		case strings.HasPrefix(line, "*"):
			n, _ := strconv.Atoi(line[1:])
			var last string
			for range n {
				if last, err = read(); err != nil {
					return "", err
				}
			}
			return last, nil
		}
		return line, nil
	}
	return read()
}

func TestPostgreSQLInitialisesAndAuthenticates(t *testing.T) {
	img := build(t, "postgresql")
	checkUser(t, img, "999:999")
	user, password := "onprem_admin", secret()
	cfg := podConfig{
		chart: "postgresql", container: "postgresql", name: "postgresql-0", root: unpack(t, img),
		values:  map[string]any{"images": map[string]any{"postgresql": img.Ref}},
		secrets: map[string]map[string]string{"onprem-postgresql-admin": {"username": user, "password": password}},
	}
	p := runPod(t, img, cfg)
	p.waitProbes(3 * time.Minute) // readiness: pg_isready inside the sandbox

	ctx := context.Background()
	connect := func(u, pw, db string) (*pgx.Conn, error) {
		cc, err := pgx.ParseConfig(fmt.Sprintf("postgres://127.0.0.1:5432/%s?sslmode=disable&connect_timeout=5", db))
		if err != nil {
			return nil, err
		}
		cc.User, cc.Password = u, pw
		cc.DialFunc = p.dial
		return pgx.ConnectConfig(ctx, cc)
	}
	conn, err := connect(user, password, user) // POSTGRES_DB defaults to the user's name
	if err != nil {
		t.Fatalf("connecting as the chart's superuser: %v\n%s", err, tail(p.output(), 30))
	}
	var who, db string
	var super bool
	if err := conn.QueryRow(ctx, "SELECT current_user, current_database(), usesuper FROM pg_user WHERE usename = current_user").Scan(&who, &db, &super); err != nil {
		t.Fatal(err)
	}
	if who != user || db != user || !super {
		t.Errorf("connected as %s to %s (superuser %v), want superuser %s in database %s", who, db, super, user, user)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE audit (id int primary key, what text); INSERT INTO audit VALUES (1, 'installed')"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	wrongPassword := func(pw string) {
		t.Helper()
		_, err := connect(user, pw, "postgres")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "28P01" {
			t.Errorf("a wrong password: %v, want SQLSTATE 28P01 (invalid_password)", err)
		}
	}
	wrongPassword("wrong-" + password)

	// PGDATA is a folder of the postgres user below the volume's root,
	// which keeps its lost+found.
	pgdata := filepath.Join(p.volumes["data"], "pgdata")
	st, err := os.Stat(pgdata)
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 999 || st.Mode().Perm() != 0o700 {
		t.Errorf("PGDATA is owned by %d with mode %v, want 999 and 0700", sys.Uid, st.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(p.volumes["data"], "lost+found")); err != nil {
		t.Errorf("lost+found: %v", err)
	}
	if err := p.stop(); err != nil {
		t.Errorf("postgres did not stop cleanly: %v\n%s", err, tail(p.output(), 20))
	}

	// A restart with the same volume keeps the data; the variables only
	// matter on the first start (a changed Secret does not change the
	// password).
	cfg.volumes = p.volumes
	cfg.secrets = map[string]map[string]string{"onprem-postgresql-admin": {"username": user, "password": "changed-" + password}}
	p = runPod(t, img, cfg)
	p.waitProbes(2 * time.Minute)
	conn, err = connect(user, password, user)
	if err != nil {
		t.Fatalf("after a restart: %v\n%s", err, tail(p.output(), 30))
	}
	defer conn.Close(ctx)
	var what string
	if err := conn.QueryRow(ctx, "SELECT what FROM audit WHERE id = 1").Scan(&what); err != nil || what != "installed" {
		t.Errorf("after a restart: %q, %v", what, err)
	}
	wrongPassword("changed-" + password)
	if !strings.Contains(p.output(), "holds a database") {
		t.Errorf("the entrypoint did not say it kept the database:\n%s", tail(p.output(), 20))
	}
}

func TestPostgreSQLRefusesToInitialiseWithoutAPassword(t *testing.T) {
	img := build(t, "postgresql")
	p := runPod(t, img, podConfig{
		chart: "postgresql", container: "postgresql", name: "postgresql-0", root: unpack(t, img),
		values:  map[string]any{"images": map[string]any{"postgresql": img.Ref}},
		secrets: map[string]map[string]string{"onprem-postgresql-admin": {"username": "admin", "password": ""}},
	})
	out, err := p.waitExit(time.Minute)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(out, "POSTGRES_PASSWORD is empty") {
		t.Errorf("exit %v, output:\n%s", err, out)
	}
}

func TestRabbitMQAcceptsTheChartsUser(t *testing.T) {
	img := build(t, "rabbitmq")
	checkUser(t, img, "999:999")
	user, password, cookie := "onprem", secret(), strings.ToUpper(randHex(10))
	cfg := podConfig{
		chart: "rabbitmq", container: "rabbitmq", name: "rabbitmq-0", root: unpack(t, img),
		values:  map[string]any{"images": map[string]any{"rabbitmq": img.Ref}},
		secrets: map[string]map[string]string{"onprem-rabbitmq": {"username": user, "password": password, "erlang-cookie": cookie}},
	}
	p := runPod(t, img, cfg)
	p.waitProbes(5 * time.Minute)

	ctx := context.Background()
	open := func(u, pw string) (*amqp.Connection, error) {
		c, err := p.dial(ctx, "tcp", "127.0.0.1:5672")
		if err != nil {
			return nil, err
		}
		conn, err := amqp.Open(c, amqp.Config{SASL: []amqp.Authentication{&amqp.PlainAuth{Username: u, Password: pw}}, Vhost: "/"})
		if err != nil {
			c.Close()
		}
		return conn, err
	}
	conn, err := open(user, password)
	if err != nil {
		t.Fatalf("AMQP login as the chart's user: %v\n%s", err, tail(p.output(), 40))
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	q, err := ch.QueueDeclare("builds", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.PublishWithContext(ctx, "", q.Name, false, false, amqp.Publishing{Body: []byte("build 42 started")}); err != nil {
		t.Fatal(err)
	}
	var msg amqp.Delivery
	for i := 0; ; i++ {
		var ok bool
		if msg, ok, err = ch.Get(q.Name, true); err != nil {
			t.Fatal(err)
		} else if ok {
			break
		}
		if i > 50 {
			t.Fatal("the published message never arrived")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if string(msg.Body) != "build 42 started" {
		t.Errorf("message = %q", msg.Body)
	}
	conn.Close()
	if _, err := open(user, "wrong-"+password); err == nil {
		t.Error("a wrong password was accepted")
	}
	if _, err := open("guest", "guest"); err == nil {
		t.Error("guest/guest was accepted although the chart names its own user")
	}

	// The management plugin (the -management images) answers with the
	// same user.
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:15672/api/whoami", nil)
	req.SetBasicAuth(user, password)
	resp, err := p.httpClient().Do(req)
	if err != nil {
		t.Fatalf("management API: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"administrator"`) {
		t.Errorf("management API /api/whoami: %s %s", resp.Status, body)
	}

	// The configuration is the image's conf.d plus the chart's file, and
	// the cookie the chart copied is the rabbitmq user's, mode 0400.
	out := p.output()
	for _, f := range []string{"/etc/rabbitmq/conf.d/10-defaults.conf", "/etc/rabbitmq/conf.d/90-onprem.conf"} {
		if !strings.Contains(out, f) {
			t.Errorf("RabbitMQ did not read %s; its output:\n%s", f, tail(out, 60))
		}
	}
	st, err := os.Stat(filepath.Join(p.volumes["data"], ".erlang.cookie"))
	if err != nil {
		t.Fatal(err)
	}
	if sys := st.Sys().(*syscall.Stat_t); sys.Uid != 999 || st.Mode().Perm() != 0o400 {
		t.Errorf(".erlang.cookie: uid %d mode %v, want 999 and 0400", sys.Uid, st.Mode().Perm())
	}
	if data, _ := os.ReadFile(filepath.Join(p.volumes["data"], ".erlang.cookie")); string(data) != cookie {
		t.Errorf(".erlang.cookie holds %q, want the Secret's", data)
	}
	if err := p.stop(); err != nil {
		t.Errorf("rabbitmq did not stop cleanly on SIGTERM: %v\n%s", err, tail(p.output(), 20))
	}
}

func TestMongoDBStandInAuthenticatesTheRootUser(t *testing.T) {
	img := build(t, "mongodb")
	checkUser(t, img, "999:999")
	user, password := "onprem-admin", secret()
	cfg := podConfig{
		chart: "mongodb", container: "mongodb", name: "mongodb-0", root: unpack(t, img),
		values:  map[string]any{"images": map[string]any{"mongodb": img.Ref}},
		secrets: map[string]map[string]string{"onprem-mongodb-admin": {"username": user, "password": password}},
	}
	p := runPod(t, img, cfg)
	p.waitProbes(2 * time.Minute)

	ctx := context.Background()
	connect := func(cred *options.Credential) *mongo.Client {
		t.Helper()
		o := options.Client().SetHosts([]string{"127.0.0.1:27017"}).SetDirect(true).
			SetDialer(dialerFunc(p.dial)).SetServerSelectionTimeout(5 * time.Second).SetTimeout(10 * time.Second)
		if cred != nil {
			o.SetAuth(*cred)
		}
		c, err := mongo.Connect(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
		return c
	}
	root := connect(&options.Credential{Username: user, Password: password, AuthSource: "admin"})
	if err := root.Database("admin").RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
		t.Fatalf("the chart's root user: %v\n%s", err, tail(p.output(), 30))
	}
	if _, err := root.Database("pipelines").Collection("builds").InsertOne(ctx, bson.D{{Key: "_id", Value: 42}, {Key: "status", Value: "ok"}}); err != nil {
		t.Fatal(err)
	}
	wrong := connect(&options.Credential{Username: user, Password: "wrong-" + password, AuthSource: "admin"})
	if err := wrong.Database("admin").RunCommand(ctx, bson.D{{Key: "ping", Value: 1}}).Err(); err == nil {
		t.Error("a wrong password was accepted")
	}
	anon := connect(nil)
	if _, err := anon.Database("pipelines").Collection("builds").InsertOne(ctx, bson.D{{Key: "status", Value: "sneaky"}}); err == nil {
		t.Error("an unauthenticated write was accepted (--auth)")
	}
	// No password on the server's command line.
	if strings.Contains(p.output(), password) {
		t.Error("the password appears in the server's output")
	}
	if err := p.stop(); err != nil {
		t.Errorf("the server did not stop cleanly on SIGTERM: %v\n%s", err, tail(p.output(), 20))
	}
	// The data lives on the volume; a restart keeps it and the first
	// user's password.
	cfg.volumes = p.volumes
	cfg.secrets = map[string]map[string]string{"onprem-mongodb-admin": {"username": user, "password": "changed-" + password}}
	p = runPod(t, img, cfg)
	p.waitProbes(2 * time.Minute)
	root = connect(&options.Credential{Username: user, Password: password, AuthSource: "admin"})
	var doc struct{ Status string }
	if err := root.Database("pipelines").Collection("builds").FindOne(ctx, bson.D{{Key: "_id", Value: 42}}).Decode(&doc); err != nil || doc.Status != "ok" {
		t.Errorf("after a restart: %+v, %v\n%s", doc, err, tail(p.output(), 30))
	}
}

// dialerFunc adapts a dial function to the mongo driver's Dialer.
type dialerFunc func(ctx context.Context, network, addr string) (net.Conn, error)

func (f dialerFunc) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	return f(ctx, network, addr)
}

func TestTraefikIsTheRightVersionAndServesItsPing(t *testing.T) {
	img := build(t, "traefik")
	checkUser(t, img, "65532:65532")
	root := unpack(t, img)
	values := map[string]any{"images": map[string]any{"controller": img.Ref}}
	// `traefik version` from the image's own file system.
	p := runPod(t, img, podConfig{chart: "ingress", container: "traefik", name: "ingress-controller-0", root: root, values: values,
		args: []string{"/usr/local/bin/traefik", "version"}})
	out, err := p.waitExit(time.Minute)
	if err != nil || !strings.Contains(out, TraefikVersion) {
		t.Fatalf("traefik version: %v\n%s", err, out)
	}
	for _, want := range []string{"Version:", TraefikVersion, "linux/amd64"} {
		if !strings.Contains(out, want) {
			t.Errorf("traefik version does not say %q:\n%s", want, out)
		}
	}
	// Built against our copy of lego, which links no DNS provider: none
	// of the cloud SDKs they bring is in the binary's build information.
	info, err := buildinfo.ReadFile(filepath.Join(root, "usr", "local", "bin", "traefik"))
	if err != nil {
		t.Fatal(err)
	}
	legoReplaced := false
	for _, d := range info.Deps {
		if d.Path == legoModule {
			legoReplaced = d.Replace != nil && d.Replace.Path == "./"+legoDir
		}
		for _, sdk := range []string{"github.com/aws/aws-sdk-go-v2/service/route53", "github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/dns", "github.com/huaweicloud/"} {
			if strings.HasPrefix(d.Path, sdk) {
				t.Errorf("traefik links %s %s, a module only lego's DNS providers use", d.Path, d.Version)
			}
		}
	}
	if !legoReplaced {
		t.Errorf("traefik is not built against the wrapper module's copy of %s (./%s)", legoModule, legoDir)
	}
	// The chart's arguments (providers included; no API server answers
	// here): the ping entry point answers the chart's probes, the web
	// entry point answers (no route: 404).
	p = runPod(t, img, podConfig{chart: "ingress", container: "traefik", name: "ingress-controller-0", root: root, values: values})
	p.waitProbes(2 * time.Minute)
	resp, err := p.httpClient().Get("http://127.0.0.1:8000/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("web entry point: %s, want 404 (no routes)", resp.Status)
	}
	if err := p.stop(); err != nil {
		t.Errorf("traefik did not stop cleanly on SIGTERM: %v\n%s", err, tail(p.output(), 20))
	}
}

func TestRefserviceImageRunsAsTheServiceChartsUser(t *testing.T) {
	img := build(t, "refservice")
	checkUser(t, img, fmt.Sprintf("%d:%d", refservice.UID, refservice.UID))
	root := unpack(t, img)
	values := map[string]any{"name": "pipelines-api", "images": map[string]any{"service": img.Ref}}
	p := runPod(t, img, podConfig{chart: "service", container: "pipelines-api", name: "pipelines-api-0", root: root, values: values})
	// The service chart's environment with no database used: it serves
	// and its probes pass.
	p.waitProbes(time.Minute)
	resp, err := p.httpClient().Get("http://127.0.0.1:8080/version")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"pipelines-api"`) {
		t.Errorf("/version = %s", body)
	}
	if err := p.stop(); err != nil {
		t.Errorf("refservice did not stop cleanly on SIGTERM: %v", err)
	}
}

func TestRunnerImageServesTheRunnerChartsPods(t *testing.T) {
	img := build(t, "runner")
	checkUser(t, img, "1000:1000")
	root := unpack(t, img)
	values := map[string]any{"images": map[string]any{"agent": img.Ref, "engine": img.Ref}}

	// The engine: the entrypoint gets the chart's args and acts as
	// buildkitd; its probes (buildctl debug workers over the unix socket,
	// a TCP connection to grpc) pass.
	engine := runPod(t, img, podConfig{chart: "runner", container: "engine", name: "runner-engine-0", root: root, values: values})
	engine.waitProbes(time.Minute)
	out, err := engine.sb.Exec(context.Background(), engine.uid, engine.gid,
		setEnv(slices.Clone(engine.env), "BUILDKIT_HOST", "tcp://127.0.0.1:1234"), "buildctl", "debug", "workers")
	if err != nil || !strings.Contains(string(out), "linux/amd64") {
		t.Errorf("buildctl debug workers over TCP: %q (%v)", out, err)
	}
	if err := engine.stop(); err != nil {
		t.Errorf("the engine did not stop cleanly on SIGTERM: %v\n%s", err, tail(engine.output(), 20))
	}
	if log := engine.output(); !strings.Contains(log, "listening on unix:///run/user/1000/buildkit/buildkitd.sock") || !strings.Contains(log, "listening on tcp://0.0.0.0:1234") {
		t.Errorf("the engine does not listen where the chart's config says:\n%s", log)
	}

	// The agent: alive, and not ready, naming the engine's Service, which
	// no sandbox resolves (the stand-in's own tests cover it turning
	// ready); the token is in none of its output.
	token := secret()
	agent := runPod(t, img, podConfig{chart: "runner", container: "agent", name: "runner-agent-0", root: root, values: values,
		secrets: map[string]map[string]string{"onprem-runner-token": {"token": token}}})
	liveness, readiness := agent.container.LivenessProbe, agent.container.ReadinessProbe
	deadline := time.Now().Add(time.Minute)
	for {
		err := agent.probe(context.Background(), liveness)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent's liveness probe still fails: %v\n%s", err, tail(agent.output(), 20))
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := agent.probe(context.Background(), readiness); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("the agent's readiness probe with no engine: %v, want 503", err)
	}
	get := func(path string) (int, string) {
		resp, err := agent.httpClient().Get("http://127.0.0.1:8080" + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	var bodies []string
	code, body := get("/readyz")
	bodies = append(bodies, body)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "tcp://runner-engine.onprem-engine.svc:1234") {
		t.Errorf("/readyz = %d %q, want 503 naming the engine's Service", code, body)
	}
	code, body = get("/version")
	bodies = append(bodies, body)
	if code != http.StatusOK || !strings.Contains(body, `"runner":"default"`) {
		t.Errorf("/version = %d %q", code, body)
	}
	if err := agent.stop(); err != nil {
		t.Errorf("the agent did not stop cleanly on SIGTERM: %v\n%s", err, tail(agent.output(), 20))
	}
	log := agent.output()
	if !strings.Contains(log, `namespace "onprem"`) {
		t.Errorf("the agent's log does not show its namespace (fieldRef):\n%s", log)
	}
	for _, o := range append(bodies, log) {
		if strings.Contains(o, token) {
			t.Errorf("the token is in the agent's output: %q", o)
		}
	}
}

// checkUser checks the image's configured user.
func checkUser(t *testing.T, img Image, want string) {
	t.Helper()
	cf, err := img.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != want {
		t.Errorf("%s runs as %q, want %q (the chart's runAsUser:runAsGroup)", img.Name, cf.Config.User, want)
	}
	if cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Errorf("%s is for %s/%s", img.Name, cf.OS, cf.Architecture)
	}
	if cf.Config.Labels[LabelStamp] == "" || cf.Config.Labels[LabelContent] == "" {
		t.Errorf("%s lacks its labels: %v", img.Name, cf.Config.Labels)
	}
	t.Logf("%s: %s", img.Name, cf.Config.Labels[LabelContent])
}

// The onprem image runs onprem itself, as the backup chart's user.
func TestOnpremImageRunsOnprem(t *testing.T) {
	img := build(t, "onprem")
	checkUser(t, img, "65532:65532")
	root := unpack(t, img)
	out, err := exec.Command(filepath.Join(root, "usr", "local", "bin", "onprem"), "backup", "create", "--help").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--recipient") {
		t.Fatalf("onprem backup create --help in the image: %v\n%s", err, out)
	}
}
