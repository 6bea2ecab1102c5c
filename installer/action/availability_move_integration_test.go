package action

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/backup/backuptest"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/diff"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/preflight"
)

// From spec.availability single to high on an installed platform with
// records: install moves every database (backup, new form, restore) with
// the services stopped in between; killed during its restore, the next
// install finishes the move from its record without backing up again (the
// databases are empty by then), and every record is back.
func TestInstallMovesSingleToHigh(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testcluster.Start(t, testcluster.WithNodes(3))
	servers := backuptest.Start(t)
	src, cl := clusterConfig(t, c, smallPlatform)
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	const ns = "onprem"
	dbs, err := backup.Databases(ctx, c.Client, ns)
	if err != nil {
		t.Fatal(err)
	}
	pg, mg := dbs["postgresql"], dbs["mongodb"]
	records := map[string]string{"build-1": "green", "build-2": "red"}
	servers.Provision(t, pg, mg)
	servers.Write(t, pg, mg, records)

	// Redis, with a key in it; the kubelet starts it again when a restore
	// stops it.
	redisSecret, err := c.Client.CoreV1().Secrets(ns).Get(ctx, credentials.Redis, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pw := string(redisSecret.Data["password"])
	rs := testservers.StartRedis(t, pw)
	servers.Redis, servers.RedisPass, servers.RedisDir = rs.Addr, pw, rs.Dir
	servers.RedisAuthFile = filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(servers.RedisAuthFile, []byte(pw), 0o600); err != nil {
		t.Fatal(err)
	}
	redis := func(args ...string) string {
		t.Helper()
		host, port, _ := strings.Cut(rs.Addr, ":")
		out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port, "--no-auth-warning", "-a", pw}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	redis("SET", "session-7", "alive")
	if redis("SAVE") != "OK" {
		t.Fatal("redis SAVE")
	}
	kctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for kctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			if rs.Exited() {
				// What the kubelet does when the container's process
				// exits: start it again, count the restart.
				rs.Start(t)
				if p, err := c.Client.CoreV1().Pods(ns).Get(kctx, "redis-0", metav1.GetOptions{}); err == nil {
					for i := range p.Status.ContainerStatuses {
						if p.Status.ContainerStatuses[i].Name == "redis" {
							p.Status.ContainerStatuses[i].RestartCount++
						}
					}
					if _, err := c.Client.CoreV1().Pods(ns).UpdateStatus(kctx, p, metav1.UpdateOptions{}); err != nil {
						t.Logf("counting redis-0's restart: %v", err)
					}
				}
			}
			labelFirstMembers(kctx, c.Client, ns)
		}
	}()

	// The Endpoints the cluster made for the single servers' Services
	// (with a selector) must not outlive the move: Patroni could never
	// take its leader lock in PostgreSQL's.
	singleEndpoints := map[string]types.UID{}
	for _, name := range []string{"postgresql", "redis"} {
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			ep, err := c.Client.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{})
			if err == nil {
				singleEndpoints[name] = ep.UID
			}
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("the cluster made no Endpoints for the single %s's Service: %v", name, err)
		}
	}

	ex := backuptest.NewExec(t, servers)
	// The first restore of a PostgreSQL database fails once: the move
	// stops halfway, its databases empty.
	restoreCmd, err := dbdump.RestoreCommand("postgresql", pg[0])
	if err != nil {
		t.Fatal(err)
	}
	var failed atomic.Bool
	ex.Before = func(_ podexec.Target, cmd []string) error {
		if slices.Equal(cmd[:3], restoreCmd[:3]) && slices.Contains(cmd, pg[0]) && failed.CompareAndSwap(false, true) {
			return errors.New("connection reset by peer (injected)")
		}
		return nil
	}
	dumps := func() int {
		n := 0
		for _, call := range ex.Calls() {
			if strings.Contains(call.Script, "pg_dump") {
				n++
			}
		}
		return n
	}
	moveDir := t.TempDir()
	high, _ := clusterConfig(t, c, smallPlatform+"  availability: high\n")
	// The plan names the move first.
	plan, err := (&Diff{Source: high, Cluster: cl}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Moves) != 4 || !strings.Contains(plan.Moves[0], "PostgreSQL from a single server to a replicated Patroni cluster") {
		t.Fatalf("diff names the moves %q", plan.Moves)
	}
	replaced := map[string]int{}
	for _, comp := range plan.Components {
		for _, o := range comp.Objects {
			if o.Change == diff.Replaced {
				replaced[o.Kind]++
			}
		}
	}
	// What the move deletes and makes again: each database's StatefulSet
	// and its Service (see replace).
	if replaced["StatefulSet"] != 4 || replaced["Service"] != 4 || len(replaced) != 2 {
		t.Errorf("diff shows as replaced %v, want the 4 databases' StatefulSets and Services", replaced)
	}
	var lost atomic.Int32
	install := &Install{Source: high, Cluster: cl, Timeout: 2 * time.Minute, Exec: ex, MoveDir: moveDir,
		// The new members' volumes are empty: so are the servers that
		// stand for them.
		beforeMoveDelete: func() {
			lost.Add(1)
			servers.Lose(t, pg, mg)
			redis("FLUSHALL")
		}}

	_, err = install.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "injected") || !strings.Contains(err.Error(), "run onprem install again to finish the move") {
		t.Fatalf("the first move: %v, want the injected failure and what to run", err)
	}
	rec, err := c.Client.CoreV1().Secrets(ns).Get(ctx, MoveSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the move's record after its failure: %v", err)
	}
	if string(rec.Data[moveKeyPhase]) != moveBackedUp || string(rec.Data[moveKeyEngines]) != "postgresql,rabbitmq,redis,mongodb" {
		t.Fatalf("the move's record: phase %s, engines %s", rec.Data[moveKeyPhase], rec.Data[moveKeyEngines])
	}
	file := string(rec.Data[moveKeyFile])
	if fi, err := os.Stat(file); err != nil || fi.Mode().Perm()&0o077 != 0 || filepath.Dir(file) != moveDir {
		t.Fatalf("the move's backup %s: %v (mode %v)", file, err, fi)
	}
	deps, err := c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if _, ok := d.Annotations[backup.ReplicasAnnotation]; ok && (d.Spec.Replicas == nil || *d.Spec.Replicas != 0) {
			t.Errorf("deployment %s runs while the move is unfinished", d.Name)
		}
	}
	dumped := dumps()
	if dumped == 0 {
		t.Fatal("the move backed nothing up")
	}

	res, err := install.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Move == nil || !res.Move.Resumed || len(res.Move.Databases) != 4 {
		t.Fatalf("the second install's move: %+v", res.Move)
	}
	if dumps() != dumped {
		t.Errorf("the second install backed up again (%d dumps, then %d): it would have saved empty databases", dumped, dumps())
	}
	for db, got := range servers.Read(t, pg, mg) {
		if fmt.Sprint(got) != fmt.Sprint(records) {
			t.Errorf("%s after the move: %v, want %v", db, got, records)
		}
	}
	if got := redis("GET", "session-7"); got != "alive" {
		t.Errorf("redis key after the move: %q", got)
	}
	for name, uid := range singleEndpoints {
		svc, err := c.Client.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || svc.Spec.Selector != nil {
			t.Errorf("Service %s after the move: %v, selector %v (want none: its members write its Endpoints)", name, err, svc.Spec.Selector)
		}
		if ep, err := c.Client.CoreV1().Endpoints(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && ep.UID == uid {
			t.Errorf("the Endpoints %s the cluster made for the single server outlived the move (labels %v)", name, ep.Labels)
		}
	}
	changes, err := preflight.AvailabilityChanges(ctx, c.Client, ns, &config.Installation{Spec: config.Spec{Availability: config.AvailabilityHigh}})
	if err != nil || len(changes) != 0 {
		t.Fatalf("after the move, databases not in their replicated form: %v %v", changes, err)
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Get(ctx, MoveSecret, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the move's record is left: %v", err)
	}
	if left, _ := os.ReadDir(moveDir); len(left) != 0 {
		t.Errorf("the move left files: %v", left)
	}
	if deps, err = c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if _, ok := d.Annotations[backup.ReplicasAnnotation]; ok || d.Spec.Replicas == nil || *d.Spec.Replicas == 0 {
			t.Errorf("deployment %s after the move: replicas %v, annotations %v", d.Name, d.Spec.Replicas, d.Annotations)
		}
	}
	st, err := state.NewStore(c.Client, ns).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := st.History[len(st.History)-1]
	if last.Kind != state.KindInstall || last.Outcome != state.OutcomeSucceeded || !strings.Contains(last.Message, "moved postgresql, rabbitmq, redis, mongodb") {
		t.Fatalf("the last operation: %+v", last)
	}

	// Converged: a third install moves nothing.
	res, err = install.Run(ctx)
	if err != nil || res.Move != nil {
		t.Fatalf("install again: move %+v, %v", res.Move, err)
	}
	if n := lost.Load(); n != 2 {
		t.Errorf("the databases were replaced %d times, want 2 (the failed move, its finish)", n)
	}
}
