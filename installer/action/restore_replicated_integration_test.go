package action

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/backup/backuptest"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/topology"
	"onprem.dev/onprem/preflight"
)

// labelFirstMembers names the first member of the replicated PostgreSQL
// and of the replicated Redis their primary, as Patroni and the Redis
// keepers do on a real cluster (the ring runs neither in its pods): a
// backup and a restore look for that label. Errors are ignored: a member
// not made yet is labelled the next time.
func labelFirstMembers(ctx context.Context, c kubernetes.Interface, ns string) {
	for pod, label := range map[string][2]string{"postgresql-0": {topology.RoleLabel, "primary"}, "redis-0": {topology.RedisRoleLabel, "master"}} {
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, label[0], label[1])
		_, _ = c.CoreV1().Pods(ns).Patch(ctx, pod, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	}
}

// keepLabelling runs labelFirstMembers every 200 ms until the test ends:
// installs and restores make the members again.
func keepLabelling(t *testing.T, c kubernetes.Interface, ns string) {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			labelFirstMembers(ctx, c, ns)
			time.Sleep(200 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { stop(); wg.Wait() })
}

// A backup of a platform with spec.availability high, restored onto a new
// cluster of three nodes: the databases come back in their replicated
// form, with no move to run after, PostgreSQL's data restored on its
// primary before any service exists; every record is back, every
// component ready and the history carried over.
func TestRestoreReplicatedOntoAnEmptyCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ns = "onprem"
	high := &config.Installation{Spec: config.Spec{Availability: config.AvailabilityHigh}}
	a := installWithDataOn(t, smallPlatform+"  availability: high\n", testcluster.WithNodes(3))
	keepLabelling(t, a.c.Client, ns)
	if changes, err := preflight.AvailabilityChanges(ctx, a.c.Client, ns, high); err != nil || len(changes) != 0 {
		t.Fatalf("installed with availability high, databases not replicated: %v %v", changes, err)
	}
	dir := t.TempDir()
	res := a.create(t, BackupDestination{To: dir}, 0)
	if len(res.Manifest.Databases()) != len(a.pg)+len(a.mg) {
		t.Fatalf("backup %s holds databases %v", res.Name, res.Manifest.Databases())
	}

	// A new cluster of three nodes, with new, empty database servers.
	b := testcluster.Start(t, testcluster.WithNodes(3))
	keepLabelling(t, b.Client, ns)
	servers := backuptest.Start(t)
	servers.Provision(t, a.pg, a.mg)
	exec := backuptest.NewExec(t, servers)
	exec.Before = func(_ podexec.Target, cmd []string) error {
		if !strings.Contains(strings.Join(cmd, " "), "restore") && !strings.Contains(strings.Join(cmd, " "), "import_definitions") {
			return nil
		}
		return noServiceRuns(ctx, b.Client)
	}
	out, err := (&Restore{Cluster: kube.Options{Kubeconfig: b.Kubeconfig}, From: filepath.Join(dir, res.Name),
		Keys: a.identity(), Exec: exec, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.Mode != RestoreEmptyCluster || len(out.Databases) != len(a.pg)+len(a.mg) {
		t.Fatalf("restore: %+v", out)
	}
	wantRecords(t, servers.Read(t, a.pg, a.mg), a.records)

	// Replicated as backed up: nothing for a move to do.
	if changes, err := preflight.AvailabilityChanges(ctx, b.Client, ns, high); err != nil || len(changes) != 0 {
		t.Errorf("after the restore, databases not in their replicated form: %v %v", changes, err)
	}
	for _, name := range []string{"postgresql", "rabbitmq", "redis", "mongodb"} {
		s, err := b.Client.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || s.Spec.Replicas == nil || *s.Spec.Replicas != 3 || s.Status.ReadyReplicas != 3 {
			t.Errorf("StatefulSet %s after the restore: %v (want 3 members ready)", name, err)
		}
	}
	// PostgreSQL's restores ran on its primary.
	pgRestores := 0
	for _, call := range exec.Calls() {
		if call.Target.Container == "postgresql" && strings.Contains(call.Script, "pg_restore") {
			pgRestores++
			if call.Target.Pod != "postgresql-0" {
				t.Errorf("a PostgreSQL restore ran on %s, not the primary postgresql-0", call.Target.Pod)
			}
		}
	}
	if pgRestores != len(a.pg) {
		t.Errorf("%d PostgreSQL restores, want %d", pgRestores, len(a.pg))
	}
	status, err := (&Status{Target: Target{Cluster: kube.Options{Kubeconfig: b.Kubeconfig}, Namespace: ns}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range status.Components {
		if comp.Release != "deployed" || comp.Ready != comp.Desired || len(comp.Drift) > 0 || comp.DriftError != "" {
			t.Errorf("after the restore %s: %+v", comp.Name, comp)
		}
	}
	if lo := status.LastOperation; lo == nil || lo.Kind != state.KindRestore || lo.Outcome != state.OutcomeSucceeded {
		t.Errorf("status's last operation after the restore: %+v", status.LastOperation)
	}
	// Every service runs, in the replicated form's replica count.
	deps, err := b.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if _, noted := d.Annotations[backup.ReplicasAnnotation]; noted || d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
			t.Errorf("deployment %s after the restore: replicas %v, annotations %v (want 2 or more, running)", d.Name, d.Spec.Replicas, d.Annotations)
		}
	}
}
