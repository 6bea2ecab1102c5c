package action

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/backup/backuptest"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/rotate"
)

// mirrorSecret plays the kubelet for a Secret mounted as a folder: every
// second it compares the folder with the Secret and, when they differ,
// rewrites the folder whole a few seconds later (keys added, changed and
// removed at once, as the kubelet swaps the folder).
func mirrorSecret(t *testing.T, c *testcluster.Cluster, ns, name, dir string, lag time.Duration) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	// As the kubelet does: each version's files in a folder of their own,
	// swapped in at once (a symlink renamed over the last one), so that a
	// reader never finds the folder missing or half written.
	if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
		_ = os.RemoveAll(dir)
	}
	write := func(data map[string][]byte) {
		tmp, err := os.MkdirTemp(filepath.Dir(dir), ".mirror-")
		if err != nil {
			return
		}
		for k, v := range data {
			_ = os.WriteFile(filepath.Join(tmp, k), v, 0o600)
		}
		link := dir + ".swap"
		_ = os.Remove(link)
		if err := os.Symlink(tmp, link); err == nil {
			_ = os.Rename(link, dir)
		}
	}
	same := func(data map[string][]byte) bool {
		entries, _ := os.ReadDir(dir)
		if len(entries) != len(data) {
			return false
		}
		for k, v := range data {
			if got, err := os.ReadFile(filepath.Join(dir, k)); err != nil || !bytes.Equal(got, v) {
				return false
			}
		}
		return true
	}
	s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	write(s.Data)
	go func() {
		for ctx.Err() == nil {
			time.Sleep(time.Second)
			s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || same(s.Data) {
				continue
			}
			time.Sleep(lag)
			write(s.Data)
		}
	}()
}

// The PostgreSQL admin's password: its next value reaches the pod's
// mounted Secret before the database has it, so that onprem's scripts in
// the pod (which try the current, then the next) work at every step; a
// run killed before or after the ALTER ROLE leaves them working and is
// finished by the next run; afterwards the old password is refused and a
// dump works though the pod's environment still holds the old one.
func rotatePostgreSQLAdmin(t *testing.T, plat rotationPlatform) {
	ctx := context.Background()
	c, src, cl := plat.c, plat.src, plat.cl
	const ns = "onprem"
	target := Target{Cluster: cl, ConfigPath: src.ConfigPath}
	admin := func() (user, password, next []byte) {
		t.Helper()
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, credentials.PostgreSQLAdmin, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Data["username"], s.Data["password"], s.Data["next-password"]
	}
	user, p0, _ := admin()
	srv := &backuptest.Servers{PGUser: string(user), PGPass: string(p0), PGAdminDir: filepath.Join(t.TempDir(), "admin")}
	srv.PostgreSQL = testservers.PostgreSQL(t, srv.PGUser, srv.PGPass)
	mirrorSecret(t, c, ns, credentials.PostgreSQLAdmin, srv.PGAdminDir, 3*time.Second)
	ex := backuptest.NewExec(t, srv)
	srvAdmin := loginServers{srv}
	canLogin := func(pw []byte) bool {
		return srvAdmin.canLogin(ctx, rotate.PostgreSQL, string(user), string(pw), "postgres")
	}
	dump := func(when string) {
		t.Helper()
		cmd, err := dbdump.DumpCommand(dbdump.PostgreSQL, "postgres")
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		if err := ex.Exec(ctx, podexec.Target{Container: "postgresql"}, cmd, nil, &out); err != nil || !bytes.HasPrefix(out.Bytes(), []byte("PGDMP")) {
			t.Fatalf("%s: a dump as the admin in the pod: %v", when, err)
		}
	}
	rotateAdmin := func(dry bool) (*RotateCredentialsResult, error) {
		return (&RotateCredentials{Target: target, Admins: []string{rotate.PostgreSQL}, Exec: ex, DryRun: dry, Timeout: time.Minute,
			Progress: func(line string) { t.Log(line) }}).Run(ctx)
	}

	dry, err := rotateAdmin(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Engines) != 1 || dry.Engines[0].Logins[0].Service != rotate.AdminLogin {
		t.Fatalf("dry run: %+v", dry)
	}
	if _, p, n := admin(); !bytes.Equal(p, p0) || n != nil {
		t.Fatal("a dry run changed the admin's Secret")
	}

	// Killed before the ALTER ROLE: the next password is in the Secret,
	// the database still has the old one, the scripts work.
	var killed atomic.Bool
	ex.Before = func(_ podexec.Target, cmd []string) error {
		if strings.Contains(strings.Join(cmd, " "), "accepts neither") && !killed.Swap(true) {
			return errors.New("killed")
		}
		return nil
	}
	if _, err := rotateAdmin(false); err == nil || !strings.Contains(err.Error(), "run the rotation again") {
		t.Fatalf("a rotation killed before the ALTER ROLE: %v", err)
	}
	_, p, p1 := admin()
	if !bytes.Equal(p, p0) || len(p1) == 0 || !canLogin(p0) || canLogin(p1) {
		t.Fatalf("killed before the ALTER ROLE: the old password kept %v, a next one %v, the database on the old one %v",
			bytes.Equal(p, p0), len(p1) > 0, canLogin(p0) && !canLogin(p1))
	}
	dump("killed before the ALTER ROLE")

	// Killed after the ALTER ROLE, before the Secret switched: what that
	// run did, done by hand. The pod's scripts fall back on the next
	// password.
	if err := (rotate.PodLogins{Client: c.Client, Namespace: ns, Exec: ex}).SetAdminPassword(ctx, rotate.PostgreSQL, p0, p1); err != nil {
		t.Fatal(err)
	}
	if canLogin(p0) || !canLogin(p1) {
		t.Fatal("the ALTER ROLE did not change the admin's password")
	}
	dump("killed after the ALTER ROLE")

	res, err := rotateAdmin(false)
	if err != nil {
		t.Fatal(err)
	}
	if l := res.Engines[0].Logins[0]; l.Resumed != "granting" || l.Secret != credentials.PostgreSQLAdmin {
		t.Errorf("the run after the kill: %+v", l)
	}
	if _, p, n := admin(); !bytes.Equal(p, p1) || n != nil {
		t.Fatalf("after the rotation the Secret holds the new password: %v, no next one: %v", bytes.Equal(p, p1), n == nil)
	}
	if canLogin(p0) || !canLogin(p1) {
		t.Fatal("after the rotation: the old password accepted or the new one refused")
	}
	time.Sleep(5 * time.Second) // the mounted Secret catches up
	dump("after the rotation (the pod's environment holds the old password)")

	// A second rotation, then: the history holds no password.
	if _, err := rotateAdmin(false); err != nil {
		t.Fatal(err)
	}
	_, p2, _ := admin()
	if canLogin(p1) || !canLogin(p2) {
		t.Fatal("after the second rotation: the old password accepted or the new one refused")
	}
	// spec.rotation.credentialsMaxAgeDays: an install rotates the admin's
	// password once it is older than that.
	body, err := os.ReadFile(src.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	aged := src
	aged.ConfigPath = filepath.Join(t.TempDir(), "onprem.yaml")
	if err := os.WriteFile(aged.ConfigPath, append(body, "  rotation: {credentialsMaxAgeDays: 1}\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	install := func() string {
		t.Helper()
		res, err := (&Install{Source: aged, Cluster: cl, Timeout: 2 * time.Minute, Exec: ex}).Run(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res.CredentialRotation
	}
	if got := install(); got != "" {
		t.Fatalf("an install with nothing due rotated: %s", got)
	}
	s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, credentials.PostgreSQLAdmin, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Annotations[rotate.AnnotationRotatedAt] = time.Now().Add(-49 * time.Hour).UTC().Format(time.RFC3339)
	if _, err := c.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := install(); got != "rotated (spec.rotation.credentialsMaxAgeDays): postgresql admin" {
		t.Fatalf("an install with the admin's password 2 days old and credentialsMaxAgeDays 1: %q", got)
	}
	_, p3, _ := admin()
	if canLogin(p2) || !canLogin(p3) {
		t.Fatal("after the install's rotation: the old password accepted or the new one refused")
	}

	for _, op := range loadState(t, c.Client).History {
		for _, pw := range [][]byte{p0, p1, p2, p3} {
			if strings.Contains(op.Message, string(pw)) {
				t.Errorf("the history holds a password: %s", op.Kind)
			}
		}
	}
}
