package action

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/backup/backuptest"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/rotate"
)

// rotateChildEnv makes the test binary a process that rotates credentials
// (what 'onprem rotate credentials' runs, with the databases' commands run
// against the test's servers), so that a test can SIGKILL it mid-way.
const rotateChildEnv = "ONPREM_TEST_ROTATE_CHILD"

// rotateKillRollout bounds each workload's rollout in these runs. A roll
// on the kwok cluster takes seconds alone; CI runs every package's test
// clusters at once on two cores, where one roll once took over a minute.
// The bound is what fails a run that never rolls, not a speed goal.
const rotateKillRollout = 4 * time.Minute

// rotateKillLease is the children's lock lease: short, so that the run
// after a SIGKILL takes the dead run's lock over soon, but long enough to
// be renewed under CI's load. With 2 s (renewed every 0.7 s) a renewal
// that waited on the client's rate limiter (over a second under load)
// came too late: the lock was lost and the run stopped mid-rotation.
const rotateKillLease = 8 * time.Second

// rotateChild is what the child process rotates, and where.
type rotateChild struct {
	Kubeconfig, ConfigPath string
	Servers                backuptest.Servers
	// Path is the stand-ins' PATH (backuptest.Exec.Path).
	Path            string
	Engines, Admins []string
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(rotateChildEnv); spec != "" {
		os.Exit(runRotateChild(spec))
	}
	os.Exit(m.Run())
}

// runRotateChild rotates as spec says, printing each step on standard
// error as the CLI does.
func runRotateChild(spec string) int {
	var c rotateChild
	if err := json.Unmarshal([]byte(spec), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	_, err := (&RotateCredentials{Target: Target{Cluster: kube.Options{Kubeconfig: c.Kubeconfig}, ConfigPath: c.ConfigPath},
		Engines: c.Engines, Admins: c.Admins, Exec: backuptest.ExecAt(&c.Servers, c.Path), Timeout: rotateKillRollout,
		LockWait: time.Minute, LockLease: rotateKillLease,
		Progress: func(line string) { fmt.Fprintln(os.Stderr, line) }}).Run(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

// killRotationWhen runs the rotation of spec in a child process and
// SIGKILLs it (its process group) as soon as it prints a line containing
// marker; it fails the test when the child ends first.
func killRotationWhen(t *testing.T, spec rotateChild, marker string) {
	t.Helper()
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), rotateChildEnv+"="+string(b))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var seen []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		seen = append(seen, sc.Text())
		if strings.Contains(sc.Text(), marker) {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			cmd.Wait()
			t.Logf("SIGKILLed at %q", sc.Text())
			return
		}
	}
	err = cmd.Wait()
	t.Fatalf("the rotation ended (%v) before printing %q:\n%s", err, marker, strings.Join(seen, "\n"))
}

// A rotation of services' logins and both admins (PostgreSQL, MongoDB) in
// a process of its own, SIGKILLed at one step after another (each run finishing what the one
// before started, then killed further on), against real servers: after
// every kill each service's Secret holds a login its database accepts and
// each admin Secret an admin that logs in; the run after the last kill
// finishes, and the first logins and admins are refused.
func rotateKilled(t *testing.T, plat rotationPlatform) {
	ctx := context.Background()
	c, src, cl := plat.c, plat.src, plat.cl
	const ns = "onprem"
	secret := func(name string) *corev1.Secret {
		t.Helper()
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	pgAdmin, mongoAdmin := secret(credentials.PostgreSQLAdmin), secret(credentials.MongoDBAdmin)
	dir := t.TempDir()
	srv := loginServers{&backuptest.Servers{PGUser: string(pgAdmin.Data["username"]), PGPass: string(pgAdmin.Data["password"]),
		MongoUser: string(mongoAdmin.Data["username"]), MongoPass: string(mongoAdmin.Data["password"]),
		PGAdminDir: filepath.Join(dir, "pg-admin"), MongoAdminDir: filepath.Join(dir, "mongo-admin")}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.MongoDB = testservers.MongoDB(t, srv.MongoUser, srv.MongoPass) }()
	srv.PostgreSQL = testservers.PostgreSQL(t, srv.PGUser, srv.PGPass)
	wg.Wait()
	mirrorSecret(t, c, ns, credentials.PostgreSQLAdmin, srv.PGAdminDir, time.Second)
	mirrorSecret(t, c, ns, credentials.MongoDBAdmin, srv.MongoAdminDir, time.Second)
	ex := backuptest.NewExec(t, srv.Servers)
	engines := []string{rotate.PostgreSQL, rotate.MongoDB}

	// The services' logins, provisioned as db-provision does.
	services := map[string][]*corev1.Secret{}
	for _, e := range engines {
		have, _, err := rotate.ServiceLogins(ctx, c.Client, ns, e)
		if err != nil || len(have) == 0 {
			t.Fatalf("the %s logins: %v %v", e, have, err)
		}
		for _, svc := range have {
			s := secret("onprem-" + svc + "-" + e)
			services[e] = append(services[e], s)
			u := string(s.Data["username"])
			if err := (rotate.PodLogins{Client: c.Client, Namespace: ns, Exec: ex}).Grant(ctx, e,
				rotate.Login{Username: u, Password: s.Data["password"], Database: string(s.Data["database"]), Owner: u}); err != nil {
				t.Fatalf("provisioning %s: %v", s.Name, err)
			}
		}
	}
	// consistent: every Secret holds what its database accepts.
	consistent := func(when string) {
		t.Helper()
		for e, list := range services {
			for _, first := range list {
				s := secret(first.Name)
				if !srv.canLogin(ctx, e, string(s.Data["username"]), string(s.Data["password"]), string(s.Data["database"])) {
					t.Errorf("%s: %s's login %s is refused by %s", when, s.Name, s.Data["username"], e)
				}
			}
		}
		pg := secret(credentials.PostgreSQLAdmin)
		if !srv.canLogin(ctx, rotate.PostgreSQL, string(pg.Data["username"]), string(pg.Data["password"]), "postgres") &&
			!srv.canLogin(ctx, rotate.PostgreSQL, string(pg.Data["username"]), string(pg.Data["next-password"]), "postgres") {
			t.Errorf("%s: PostgreSQL accepts neither the admin's password nor its next one", when)
		}
		mg := secret(credentials.MongoDBAdmin)
		if !srv.canLogin(ctx, rotate.MongoDB, string(mg.Data["username"]), string(mg.Data["password"]), "admin") {
			t.Errorf("%s: MongoDB refuses the admin %s of its Secret", when, mg.Data["username"])
		}
		if t.Failed() {
			t.FailNow()
		}
	}
	consistent("before the rotation")

	spec := rotateChild{Kubeconfig: c.Kubeconfig, ConfigPath: src.ConfigPath, Servers: *srv.Servers, Path: ex.Path(),
		Engines: engines, Admins: []string{rotate.PostgreSQL, rotate.MongoDB}}
	// Each marker is a step the run before did not reach (or, in a run
	// that resumes, reaches again further on).
	for _, marker := range []string{
		"granting login",                   // a service's new login, before or during its grant
		"setting the admin's new password", // PostgreSQL's ALTER ROLE, either side of it
		"granting admin user",              // MongoDB's new admin
		"restarting Deployment",            // the services rolling onto every new credential
		"revoking login",                   // a service's old login
		"revoking admin user",              // MongoDB's old admin
	} {
		killRotationWhen(t, spec, marker)
		consistent("killed at " + marker)
	}
	res, err := (&RotateCredentials{Target: Target{Cluster: cl, ConfigPath: src.ConfigPath}, Engines: spec.Engines, Admins: spec.Admins,
		Exec: ex, Timeout: rotateKillRollout, LockWait: time.Minute}).Run(ctx)
	if err != nil {
		t.Fatalf("the run after the last kill: %v", err)
	}
	resumed := 0
	for _, er := range res.Engines {
		for _, l := range er.Logins {
			if l.Resumed != "" {
				resumed++
			}
		}
	}
	if resumed == 0 {
		t.Errorf("the run after the kills resumed nothing: %+v", res.Engines)
	}
	consistent("after the rotation")
	for e, list := range services {
		for _, first := range list {
			if srv.canLogin(ctx, e, string(first.Data["username"]), string(first.Data["password"]), string(first.Data["database"])) {
				t.Errorf("%s's first login %s is still accepted", first.Name, first.Data["username"])
			}
		}
	}
	if srv.canLogin(ctx, rotate.PostgreSQL, string(pgAdmin.Data["username"]), string(pgAdmin.Data["password"]), "postgres") {
		t.Error("PostgreSQL still accepts the admin's first password")
	}
	if srv.canLogin(ctx, rotate.MongoDB, string(mongoAdmin.Data["username"]), string(mongoAdmin.Data["password"]), "admin") {
		t.Error("MongoDB still accepts the first admin")
	}
	for _, s := range []*corev1.Secret{secret(credentials.PostgreSQLAdmin), secret(credentials.MongoDBAdmin)} {
		if s.Data["next-password"] != nil || s.Annotations[rotate.AnnotationRetire] != "" {
			t.Errorf("%s is left mid-rotation: keys %v, annotations %v", s.Name, dataKeys(s.Data), s.Annotations)
		}
	}
}
