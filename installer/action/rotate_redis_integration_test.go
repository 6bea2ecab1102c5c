package action

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
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

// redisAuth sends AUTH password to Redis at addr: nil when accepted.
func redisAuth(addr, password string) error {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := fmt.Fprintf(conn, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+OK" {
		return errors.New(line)
	}
	return nil
}

// Redis's one password, which every service shares, rotates with an
// overlap: both passwords work until the services have rolled and the
// password file Redis's readiness probe reads (mounted from the Secret;
// here a file the test updates as the kubelet would, a few seconds late)
// holds the new one; then the old one is refused. Redis itself is not
// restarted. A run killed before the old password is dropped leaves both
// working and is finished by the next, and a backup of Redis works after
// the rotation (its script reads the file, not the stale environment).
func rotateRedisPassword(t *testing.T, plat rotationPlatform) {
	ctx := context.Background()
	c, src, cl := plat.c, plat.src, plat.cl
	const ns = "onprem"
	target := Target{Cluster: cl, ConfigPath: src.ConfigPath}
	password := func() []byte {
		t.Helper()
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, credentials.Redis, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s.Data["password"]
	}
	p0 := password()
	rs := testservers.StartRedis(t, string(p0))
	srv := &backuptest.Servers{Redis: rs.Addr, RedisPass: string(p0), RedisDir: rs.Dir, RedisAuthFile: filepath.Join(t.TempDir(), "password")}
	if err := os.WriteFile(srv.RedisAuthFile, p0, 0o600); err != nil {
		t.Fatal(err)
	}
	// The kubelet: the file follows the Secret, 3 seconds late.
	kctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		for kctx.Err() == nil {
			time.Sleep(time.Second)
			s, err := c.Client.CoreV1().Secrets(ns).Get(kctx, credentials.Redis, metav1.GetOptions{})
			if err != nil {
				continue
			}
			if cur, _ := os.ReadFile(srv.RedisAuthFile); !bytes.Equal(cur, s.Data["password"]) {
				time.Sleep(3 * time.Second)
				_ = os.WriteFile(srv.RedisAuthFile, s.Data["password"], 0o600)
			}
		}
	}()
	ex := backuptest.NewExec(t, srv)
	sts, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, "redis", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	redisTemplate := sts.Spec.Template.Annotations[rotate.AnnotationCredentials]
	rotateRedis := func(dry bool) (*RotateCredentialsResult, error) {
		return (&RotateCredentials{Target: target, Engines: []string{rotate.Redis}, Exec: ex, DryRun: dry, Timeout: time.Minute,
			Progress: func(line string) { t.Log(line) }}).Run(ctx)
	}

	dry, err := rotateRedis(true)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Engines) != 1 || len(dry.Engines[0].Restarted) == 0 || !bytes.Equal(password(), p0) {
		t.Fatalf("dry run: %+v (or it changed the password)", dry)
	}
	for _, w := range dry.Engines[0].Restarted {
		if w == "StatefulSet/redis" {
			t.Error("the dry run would restart Redis itself")
		}
	}

	// Killed when about to drop the old password: both work.
	var killed atomic.Bool
	ex.Before = func(_ podexec.Target, cmd []string) error {
		if strings.Contains(strings.Join(cmd, " "), "resetpass") && !killed.Swap(true) {
			return errors.New("killed")
		}
		return nil
	}
	if _, err := rotateRedis(false); err == nil || !strings.Contains(err.Error(), "run the rotation again") {
		t.Fatalf("a rotation killed before revoking: %v", err)
	}
	p1 := password()
	if bytes.Equal(p1, p0) {
		t.Fatal("the Secret still holds the old password after the switch")
	}
	for _, p := range [][]byte{p0, p1} {
		if err := redisAuth(srv.Redis, string(p)); err != nil {
			t.Errorf("killed before revoking: a password is refused: %v", err)
		}
	}
	res, err := rotateRedis(false)
	if err != nil {
		t.Fatal(err)
	}
	if l := res.Engines[0].Logins[0]; l.Resumed != "revoking" || l.Secret != credentials.Redis {
		t.Errorf("the run after the kill: %+v", l)
	}
	if err := redisAuth(srv.Redis, string(p0)); err == nil {
		t.Error("Redis still accepts the old password")
	} else {
		t.Logf("the old password: %v", err)
	}
	if err := redisAuth(srv.Redis, string(p1)); err != nil {
		t.Errorf("the new password: %v", err)
	}

	// A second rotation, then a backup of Redis with the pod's scripts:
	// its environment still holds the first password.
	if _, err := rotateRedis(false); err != nil {
		t.Fatal(err)
	}
	p2 := password()
	for p, want := range map[string]bool{string(p1): false, string(p2): true} {
		if err := redisAuth(srv.Redis, p); (err == nil) != want {
			t.Errorf("after the second rotation: accepted %v, want %v", err == nil, want)
		}
	}
	var snap bytes.Buffer
	if err := ex.Exec(ctx, podexec.Target{Container: "redis"}, dbdump.RedisSnapshot(), nil, &snap); err != nil {
		t.Fatalf("a backup of Redis after the rotations: %v", err)
	}
	if !bytes.HasPrefix(snap.Bytes(), []byte("REDIS")) {
		t.Errorf("the snapshot is not an RDB file: %q", snap.Bytes()[:min(16, snap.Len())])
	}

	if sts, err = c.Client.AppsV1().StatefulSets(ns).Get(ctx, "redis", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if sts.Spec.Template.Annotations[rotate.AnnotationCredentials] != redisTemplate {
		t.Error("the rotation restarted Redis's StatefulSet")
	}
	for _, op := range loadState(t, c.Client).History {
		for _, p := range [][]byte{p0, p1, p2} {
			if strings.Contains(op.Message, string(p)) {
				t.Errorf("the history holds a password: %s", op.Kind)
			}
		}
	}
}
