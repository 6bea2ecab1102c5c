package refservice

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"onprem.dev/onprem/e2e/testservers"
)

func endpoint(t *testing.T, addr string) *Endpoint {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(port)
	return &Endpoint{Host: host, Port: n}
}

// env is the environment the service chart gives pipelines-api.
func env(cfg Config) map[string]string {
	m := map[string]string{"ONPREM_SERVICE": cfg.Service, "ONPREM_VERSION": cfg.Version, "PORT": "8080"}
	add := func(prefix string, e *Endpoint) {
		if e == nil {
			return
		}
		m[prefix+"_HOST"], m[prefix+"_PORT"] = e.Host, strconv.Itoa(e.Port)
		m[prefix+"_DATABASE"], m[prefix+"_USERNAME"], m[prefix+"_PASSWORD"] = e.Database, e.Username, e.Password
	}
	add("MONGODB", cfg.MongoDB)
	add("POSTGRESQL", cfg.PostgreSQL)
	add("REDIS", cfg.Redis)
	add("RABBITMQ", cfg.RabbitMQ)
	return m
}

// platform starts real servers and provisions the service's own database
// users the way db-provision does: a MongoDB user in the service's
// database, a PostgreSQL role owning the service's database.
func platform(t *testing.T) Config {
	t.Helper()
	ctx := context.Background()
	cfg := Config{Service: "pipelines-api", Version: "2.7.0", Port: 8080}

	mongoAddr := testservers.MongoDB(t, "root", "root-secret")
	admin, err := mongo.Connect(options.Client().SetHosts([]string{mongoAddr}).
		SetAuth(options.Credential{Username: "root", Password: "root-secret", AuthSource: "admin"}))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Disconnect(ctx)
	if err := admin.Database("pipelines_api").RunCommand(ctx, bson.D{{Key: "createUser", Value: "pipelines_api"}, {Key: "pwd", Value: "mongo-svc-secret"},
		// FerretDB v1 refuses roles other than none (its users may do
		// anything); a real MongoDB gets readWrite on the database from
		// db-provision.
		{Key: "roles", Value: bson.A{}}}).Err(); err != nil {
		t.Fatal(err)
	}
	cfg.MongoDB = endpoint(t, mongoAddr)
	cfg.MongoDB.Database, cfg.MongoDB.Username, cfg.MongoDB.Password = "pipelines_api", "pipelines_api", "mongo-svc-secret"

	pgAddr := testservers.PostgreSQL(t, "postgres", "pg-root-secret")
	pg, err := pgx.Connect(ctx, "postgres://postgres:pg-root-secret@"+pgAddr+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close(ctx)
	for _, q := range []string{`CREATE ROLE pipelines_api LOGIN PASSWORD 'pg-svc-secret'`, `CREATE DATABASE pipelines_api OWNER pipelines_api`} {
		if _, err := pg.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	cfg.PostgreSQL = endpoint(t, pgAddr)
	cfg.PostgreSQL.Database, cfg.PostgreSQL.Username, cfg.PostgreSQL.Password = "pipelines_api", "pipelines_api", "pg-svc-secret"

	cfg.Redis = endpoint(t, testservers.Redis(t, "redis-secret"))
	cfg.Redis.Password = "redis-secret"
	cfg.RabbitMQ = endpoint(t, testservers.RabbitMQ(t, "onprem", "rabbit-secret"))
	cfg.RabbitMQ.Username, cfg.RabbitMQ.Password = "onprem", "rabbit-secret"
	return cfg
}

func call(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: not JSON: %s", method, path, rec.Body.String())
	}
	return rec.Code, out
}

func TestFromEnvNamesWhatIsMissing(t *testing.T) {
	_, err := FromEnv(func(k string) string {
		return map[string]string{"MONGODB_HOST": "mongodb", "MONGODB_PORT": "27017", "MONGODB_DATABASE": "x"}[k]
	})
	if err == nil || !strings.Contains(err.Error(), "ONPREM_SERVICE") || !strings.Contains(err.Error(), "MONGODB_USERNAME") || !strings.Contains(err.Error(), "MONGODB_PASSWORD") {
		t.Errorf("err = %v", err)
	}
	if _, err := FromEnv(func(k string) string { return map[string]string{"ONPREM_SERVICE": "a", "PORT": "http"}[k] }); err == nil {
		t.Error("a bad PORT accepted")
	}
}

// MONGODB_REPLICA_SET (the mongodb chart with high availability) makes the
// host a seed of that replica set; without it, one server.
func TestFromEnvReadsTheReplicaSet(t *testing.T) {
	vars := map[string]string{"ONPREM_SERVICE": "a", "MONGODB_HOST": "mongodb", "MONGODB_PORT": "27017",
		"MONGODB_DATABASE": "a", "MONGODB_USERNAME": "a", "MONGODB_PASSWORD": "p", "MONGODB_REPLICA_SET": "onprem"}
	c, err := FromEnv(func(k string) string { return vars[k] })
	if err != nil || c.MongoDB.ReplicaSet != "onprem" {
		t.Fatalf("replica set %q, err %v", c.MongoDB.ReplicaSet, err)
	}
	delete(vars, "MONGODB_REPLICA_SET")
	if c, err := FromEnv(func(k string) string { return vars[k] }); err != nil || c.MongoDB.ReplicaSet != "" {
		t.Fatalf("without MONGODB_REPLICA_SET: replica set %q, err %v", c.MongoDB.ReplicaSet, err)
	}
}

// Against real Redis, PostgreSQL, RabbitMQ and FerretDB with per-service
// users: Ready, records written to and read back from both databases
// (also by a new process), a migration recorded, a failing migration, and
// a wrong password that makes the service not Ready, naming the dependency.
func TestReferenceServiceAgainstRealServers(t *testing.T) {
	ctx := context.Background()
	cfg := platform(t)
	got, err := FromEnv(func(k string) string { return env(cfg)[k] })
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(ctx, got)
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close(ctx)
	h := svc.Handler()
	code, ready := call(t, h, "GET", "/api/readyz", "")
	if code != http.StatusOK || ready["ready"] != true {
		t.Fatalf("readyz: %d %v", code, ready)
	}
	deps := ready["deps"].(map[string]any)
	for _, d := range []string{"mongodb", "postgresql", "redis", "rabbitmq"} {
		if deps[d] != "ok" {
			t.Errorf("dependency %s: %v", d, deps[d])
		}
	}
	if code, v := call(t, h, "GET", "/api/version", ""); code != 200 || v["version"] != "2.7.0" || v["service"] != "pipelines-api" {
		t.Errorf("version: %d %v", code, v)
	}
	if code, _ := call(t, h, "PUT", "/api/records/build-1", "green"); code != 200 {
		t.Fatalf("put: %d", code)
	}
	if code, _ := call(t, h, "GET", "/api/records/nope", ""); code != http.StatusNotFound {
		t.Errorf("missing record: %d", code)
	}
	// Messages: published with the broker's confirm, taken back in order
	// by a new connection, each once.
	for _, m := range []string{"build-1 started", "build-1 green"} {
		if code, v := call(t, h, "POST", "/api/messages", m); code != 200 || v["confirmed"] != "true" {
			t.Fatalf("publish %q: %d %v", m, code, v)
		}
	}
	code, taken := call(t, h, "GET", "/api/messages", "")
	if got := fmt.Sprint(taken["taken"]); code != 200 || got != "[build-1 started build-1 green]" || taken["queue"] != "pipelines-api.messages" {
		t.Errorf("messages taken: %d %v", code, taken)
	}
	if code, again := call(t, h, "GET", "/api/messages", ""); code != 200 || again["taken"] != nil {
		t.Errorf("messages taken twice: %d %v", code, again)
	}
	if err := svc.Migrate(ctx, "2.8.0"); err != nil {
		t.Fatal(err)
	}
	t.Setenv(FailMigrationEnv, "true")
	if err := svc.Migrate(ctx, "2.9.0"); err == nil || !strings.Contains(err.Error(), "on purpose") {
		t.Errorf("failing migration: %v", err)
	}

	// A new process (an upgraded version) reads the record back.
	cfg.Version = "2.8.0"
	again, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close(ctx)
	code, rec := call(t, again.Handler(), "GET", "/gitops/api/records/build-1", "")
	vals, _ := rec["values"].(map[string]any)
	if code != 200 || vals["mongodb"] != "green" || vals["postgresql"] != "green" {
		t.Errorf("record after restart: %d %v", code, rec)
	}

	bad := cfg
	r := *cfg.Redis
	r.Password = "wrong"
	bad.Redis = &r
	broken, err := New(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	defer broken.Close(ctx)
	code, ready = call(t, broken.Handler(), "GET", "/readyz", "")
	deps, _ = ready["deps"].(map[string]any)
	if code != http.StatusServiceUnavailable || deps["redis"] == "ok" || deps["mongodb"] != "ok" {
		t.Errorf("wrong redis password: %d %v", code, ready)
	}

	// The front page: the service, its version and its dependencies, for
	// a browser; 503 while a dependency is down.
	for _, c := range []struct {
		h    http.Handler
		code int
		want []string
	}{
		{again.Handler(), http.StatusOK, []string{"<h1>pipelines-api</h1>", "2.8.0", ">ready<", "postgresql", "rabbitmq"}},
		{broken.Handler(), http.StatusServiceUnavailable, []string{"not ready", "redis"}},
	} {
		rec := httptest.NewRecorder()
		c.h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		body := rec.Body.String()
		if rec.Code != c.code || !strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") {
			t.Errorf("front page: %d %s", rec.Code, rec.Header().Get("Content-Type"))
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("front page lacks %q:\n%s", w, body)
			}
		}
	}
}
