package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"onprem.dev/onprem/e2e/testservers"
)

const adminPassword = "admin-Secret-7f3a"

// fixture lays out what the db-provision pod mounts: the services file and
// each service's Secret as files.
type fixture struct {
	dir      string
	services []string
}

func newFixture(t *testing.T, services ...string) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), services: services}
	if err := os.WriteFile(filepath.Join(f.dir, "mongodb-services"), []byte(strings.Join(services, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) secret(t *testing.T, service, user, password, database string) {
	t.Helper()
	d := filepath.Join(f.dir, "secrets", service)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"username": user, "password": password, "database": database} {
		if err := os.WriteFile(filepath.Join(d, k), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fixture) provisioner(addr, adminPass string, out *bytes.Buffer) *provisioner {
	host, port, _ := net.SplitHostPort(addr)
	env := map[string]string{
		"MONGODB_HOST": host, "MONGODB_PORT": port,
		"MONGODB_ADMIN_USERNAME": "root", "MONGODB_ADMIN_PASSWORD": adminPass,
	}
	return &provisioner{
		servicesFile: filepath.Join(f.dir, "mongodb-services"),
		secretsDir:   filepath.Join(f.dir, "secrets"),
		getenv:       func(k string) string { return env[k] },
		attempts:     3,
		pause:        20 * time.Millisecond,
		out:          out,
	}
}

// write connects as a service does (its own user, authenticated in its own
// database) and inserts a document.
func write(ctx context.Context, addr, user, password, database string) error {
	c, err := mongo.Connect(options.Client().SetHosts([]string{addr}).SetServerSelectionTimeout(5 * time.Second).
		SetAuth(options.Credential{Username: user, Password: password, AuthSource: database}))
	if err != nil {
		return err
	}
	defer c.Disconnect(ctx)
	_, err = c.Database(database).Collection("records").InsertOne(ctx, bson.D{{Key: "k", Value: "v"}})
	return err
}

func TestProvisionCreatesThenUpdatesServiceUsers(t *testing.T) {
	ctx := context.Background()
	addr := testservers.MongoDB(t, "root", adminPassword)
	f := newFixture(t, "pipelines-api", "gitops-api")
	f.secret(t, "pipelines-api", "pipelines_api", "pipe-Secret-1", "pipelines_api")
	f.secret(t, "gitops-api", "gitops_api", "gitops-Secret-1", "gitops_api")

	var out bytes.Buffer
	if err := f.provisioner(addr, adminPassword, &out).run(ctx); err != nil {
		t.Fatalf("first run: %v\n%s", err, out.String())
	}
	for _, want := range []string{`created user "pipelines_api" of database "pipelines_api" for pipelines-api`, `created user "gitops_api"`, "done: 2 service(s)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := write(ctx, addr, "pipelines_api", "pipe-Secret-1", "pipelines_api"); err != nil {
		t.Fatalf("service cannot write with its provisioned user: %v", err)
	}

	// The Secret's password changed: a re-run converges on it.
	f.secret(t, "pipelines-api", "pipelines_api", "pipe-Secret-2", "pipelines_api")
	out.Reset()
	if err := f.provisioner(addr, adminPassword, &out).run(ctx); err != nil {
		t.Fatalf("second run: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), `updated user "pipelines_api"`) {
		t.Errorf("second run did not update the existing user:\n%s", out.String())
	}
	if err := write(ctx, addr, "pipelines_api", "pipe-Secret-2", "pipelines_api"); err != nil {
		t.Fatalf("new password refused: %v", err)
	}
	if err := write(ctx, addr, "pipelines_api", "pipe-Secret-1", "pipelines_api"); err == nil {
		t.Fatal("old password still accepted after the update")
	}
	for _, secret := range []string{adminPassword, "pipe-Secret-1", "pipe-Secret-2", "gitops-Secret-1"} {
		if strings.Contains(out.String(), secret) {
			t.Fatalf("output contains a credential")
		}
	}
}

func TestWrongAdminPasswordStopsAtOnce(t *testing.T) {
	addr := testservers.MongoDB(t, "root", adminPassword)
	f := newFixture(t, "pipelines-api")
	f.secret(t, "pipelines-api", "pipelines_api", "pipe-Secret-1", "pipelines_api")
	var out bytes.Buffer
	err := f.provisioner(addr, "wrong-Password-9", &out).run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot log in") {
		t.Fatalf("err = %v, want the admin login refused", err)
	}
	if strings.Contains(out.String(), "attempt") {
		t.Errorf("retried a refused login:\n%s", out.String())
	}
	if strings.Contains(err.Error()+out.String(), "wrong-Password-9") {
		t.Fatal("the password is in the output")
	}
}

func TestUnreachableServerIsRetriedThenReported(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	f := newFixture(t, "pipelines-api")
	f.secret(t, "pipelines-api", "pipelines_api", "pipe-Secret-1", "pipelines_api")
	var out bytes.Buffer
	err = f.provisioner(addr, adminPassword, &out).run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cannot reach "+addr) {
		t.Fatalf("err = %v, want cannot reach %s", err, addr)
	}
	if !strings.Contains(out.String(), "attempt 3 of 3") {
		t.Errorf("expected three attempts:\n%s", out.String())
	}
}

func TestReservedDatabaseIsRefused(t *testing.T) {
	addr := testservers.MongoDB(t, "root", adminPassword)
	f := newFixture(t, "evil")
	f.secret(t, "evil", "evil", "evil-Secret-1", "admin")
	var out bytes.Buffer
	err := f.provisioner(addr, adminPassword, &out).run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `names the database "admin"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestNoServicesConnectsNowhere(t *testing.T) {
	f := newFixture(t)
	var out bytes.Buffer
	p := f.provisioner("127.0.0.1:1", adminPassword, &out)
	if err := p.run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "no service uses MongoDB") {
		t.Fatalf("output: %s", out.String())
	}
}

func TestOtherInvocationsExit2(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"--eval", "db.version()"},
		{"--nodb", "--file", "/tmp/other.js"},
		{"--file", "/etc/onprem/db-provision/mongodb-provision.js"},
		{"--nodb", "--file"},
		{"mongodb://localhost/admin", "--nodb", "--file", "/x/mongodb-provision.js"},
	} {
		var stderr bytes.Buffer
		if code := run(context.Background(), args, func(string) string { return "" }, &bytes.Buffer{}, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "mongosh (e2e stand-in)") {
			t.Errorf("%q: stderr does not say why: %q", args, stderr.String())
		}
	}
}
