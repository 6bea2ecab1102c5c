package action

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/backup/backuptest"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/rotate"
)

// MongoDB's admin alternates between two users (root, root_2): the new
// one is created by the old, the Secret switches, and the old one is
// dropped only once the Secret mounted in the pod (which onprem's scripts
// there read) holds the new one. A run killed at the grant or at the
// revocation leaves a login that works and is finished by the next run;
// afterwards the old user is refused and a dump works though the pod's
// environment still names the first admin.
func rotateMongoDBAdmin(t *testing.T, plat rotationPlatform) {
	ctx := context.Background()
	c, src, cl := plat.c, plat.src, plat.cl
	const ns = "onprem"
	admin := func() (user, password []byte) {
		t.Helper()
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, credentials.MongoDBAdmin, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Data["username"], s.Data["password"]
	}
	u0, p0 := admin()
	srv := &backuptest.Servers{MongoUser: string(u0), MongoPass: string(p0), MongoAdminDir: filepath.Join(t.TempDir(), "admin")}
	srv.MongoDB = testservers.MongoDB(t, srv.MongoUser, srv.MongoPass)
	mirrorSecret(t, c, ns, credentials.MongoDBAdmin, srv.MongoAdminDir, 3*time.Second)
	ex := backuptest.NewExec(t, srv)
	logins := loginServers{srv}
	canLogin := func(user, pw []byte) bool {
		return logins.canLogin(ctx, rotate.MongoDB, string(user), string(pw), "admin")
	}
	dump := func(when string) {
		t.Helper()
		cmd, err := dbdump.DumpCommand(dbdump.MongoDB, "onprem_check")
		if err != nil {
			t.Fatal(err)
		}
		if err := ex.Exec(ctx, podexec.Target{Container: "mongodb"}, cmd, nil, &bytes.Buffer{}); err != nil {
			t.Fatalf("%s: a dump as the admin in the pod: %v", when, err)
		}
	}
	rotateAdmin := func(dry bool) (*RotateCredentialsResult, error) {
		return (&RotateCredentials{Target: Target{Cluster: cl, ConfigPath: src.ConfigPath}, Admins: []string{rotate.MongoDB}, Exec: ex,
			DryRun: dry, Timeout: time.Minute, Progress: func(line string) { t.Log(line) }}).Run(ctx)
	}

	dry, err := rotateAdmin(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Engines) != 1 || dry.Engines[0].Logins[0] != (rotate.LoginChange{Service: rotate.AdminLogin, Secret: credentials.MongoDBAdmin,
		From: string(u0), To: string(u0) + "_2"}) {
		t.Fatalf("dry run: %+v", dry.Engines)
	}
	if u, p := admin(); !bytes.Equal(u, u0) || !bytes.Equal(p, p0) {
		t.Fatal("a dry run changed the admin's Secret")
	}

	// Killed at the grant: nothing switched, the old admin works.
	var killAt atomic.Value
	killAt.Store("")
	ex.Before = func(_ podexec.Target, cmd []string) error {
		if want := killAt.Load().(string); want != "" && len(cmd) > 0 && cmd[len(cmd)-1] == want {
			killAt.Store("")
			return errors.New("killed")
		}
		return nil
	}
	killAt.Store("grant")
	if _, err := rotateAdmin(false); err == nil || !strings.Contains(err.Error(), "the current admin still works") {
		t.Fatalf("a rotation killed at the grant: %v", err)
	}
	if u, _ := admin(); !bytes.Equal(u, u0) || !canLogin(u0, p0) {
		t.Fatal("killed at the grant: the Secret switched, or the old admin refused")
	}
	dump("killed at the grant")

	// Killed at the revocation: switched, both users log in.
	killAt.Store("revoke")
	if _, err := rotateAdmin(false); err == nil || !strings.Contains(err.Error(), "the new one works") {
		t.Fatalf("a rotation killed at the revocation: %v", err)
	}
	u1, p1 := admin()
	if string(u1) != string(u0)+"_2" || !canLogin(u0, p0) || !canLogin(u1, p1) {
		t.Fatalf("killed at the revocation: the Secret holds %s; the old admin logs in %v, the new %v", u1, canLogin(u0, p0), canLogin(u1, p1))
	}
	dump("killed at the revocation")

	res, err := rotateAdmin(false)
	if err != nil {
		t.Fatal(err)
	}
	if l := res.Engines[0].Logins[0]; l.Resumed != "revoking" || l.From != string(u0) || l.To != string(u1) {
		t.Errorf("the run after the kill: %+v", l)
	}
	if canLogin(u0, p0) || !canLogin(u1, p1) {
		t.Fatal("after the rotation: the old admin accepted or the new one refused")
	}
	dump("after the rotation (the pod's environment names the old admin)")

	// The next rotation goes back to the first user, with a new password.
	if _, err := rotateAdmin(false); err != nil {
		t.Fatal(err)
	}
	u2, p2 := admin()
	if !bytes.Equal(u2, u0) || bytes.Equal(p2, p0) || canLogin(u1, p1) || !canLogin(u2, p2) {
		t.Fatalf("the second rotation: %s; the previous admin refused %v, the new one accepted %v", u2, !canLogin(u1, p1), canLogin(u2, p2))
	}
	for _, op := range loadState(t, c.Client).History {
		for _, pw := range [][]byte{p0, p1, p2} {
			if strings.Contains(op.Message, string(pw)) {
				t.Errorf("the history holds a password: %s", op.Kind)
			}
		}
	}
}
