package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// childEnv makes the test binary run as onprem itself, so that the crash
// test can kill a real onprem process without building one.
const childEnv = "ONPREM_TEST_RUN_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// crashConfig installs into its own namespace; ingress is the cluster's
// own class, so that no cluster-scoped object is shared between the
// namespaces of the test.
func crashConfig(t *testing.T, dir, ns string) string {
	return crashConfigAt(t, dir, ns, "2.8.0")
}

func crashConfigAt(t *testing.T, dir, ns, version string) string {
	t.Helper()
	path := filepath.Join(dir, ns+"-"+version+".yaml")
	body := fmt.Sprintf(`apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: %s
  domain: ci.example.com
  namespace: %s
  ingress: {mode: existing, className: shared}
`, version, ns)
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// snapshot is what an installation consists of in its namespace: the
// objects of the kinds onprem creates (without Helm's release records,
// whose revision counts legitimately differ), the Helm releases with the
// status of their last revision, and the generated secrets' data.
type snapshot struct {
	Objects  []string
	Releases map[string]string
	Secrets  map[string]map[string][]byte
}

func take(t *testing.T, c kubernetes.Interface, ns string) snapshot {
	t.Helper()
	ctx := context.Background()
	s := snapshot{Releases: map[string]string{}, Secrets: map[string]map[string][]byte{}}
	add := func(kind string, names ...string) {
		for _, n := range names {
			s.Objects = append(s.Objects, kind+"/"+n)
		}
	}
	lo := metav1.ListOptions{}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	deps, err := c.AppsV1().Deployments(ns).List(ctx, lo)
	must(err)
	for _, o := range deps.Items {
		add("Deployment", o.Name)
	}
	sts, err := c.AppsV1().StatefulSets(ns).List(ctx, lo)
	must(err)
	for _, o := range sts.Items {
		add("StatefulSet", o.Name)
	}
	svcs, err := c.CoreV1().Services(ns).List(ctx, lo)
	must(err)
	for _, o := range svcs.Items {
		add("Service", o.Name)
	}
	cms, err := c.CoreV1().ConfigMaps(ns).List(ctx, lo)
	must(err)
	for _, o := range cms.Items {
		add("ConfigMap", o.Name)
	}
	sas, err := c.CoreV1().ServiceAccounts(ns).List(ctx, lo)
	must(err)
	for _, o := range sas.Items {
		add("ServiceAccount", o.Name)
	}
	jobs, err := c.BatchV1().Jobs(ns).List(ctx, lo)
	must(err)
	for _, o := range jobs.Items {
		add("Job", o.Name)
	}
	nps, err := c.NetworkingV1().NetworkPolicies(ns).List(ctx, lo)
	must(err)
	for _, o := range nps.Items {
		add("NetworkPolicy", o.Name)
	}
	ings, err := c.NetworkingV1().Ingresses(ns).List(ctx, lo)
	must(err)
	for _, o := range ings.Items {
		add("Ingress", o.Name)
	}
	roles, err := c.RbacV1().Roles(ns).List(ctx, lo)
	must(err)
	for _, o := range roles.Items {
		add("Role", o.Name)
	}
	rbs, err := c.RbacV1().RoleBindings(ns).List(ctx, lo)
	must(err)
	for _, o := range rbs.Items {
		add("RoleBinding", o.Name)
	}
	pdbs, err := c.PolicyV1().PodDisruptionBudgets(ns).List(ctx, lo)
	must(err)
	for _, o := range pdbs.Items {
		add("PodDisruptionBudget", o.Name)
	}
	secrets, err := c.CoreV1().Secrets(ns).List(ctx, lo)
	must(err)
	latest := map[string]int{}
	for _, o := range secrets.Items {
		if o.Labels["owner"] == "helm" {
			name, status := o.Labels["name"], o.Labels["status"]
			var rev int
			fmt.Sscan(o.Labels["version"], &rev)
			if rev > latest[name] {
				latest[name], s.Releases[name] = rev, status
			}
			continue
		}
		add("Secret", o.Name)
		if o.Labels["onprem.dev/generated"] == "true" {
			s.Secrets[o.Name] = o.Data
		}
	}
	sort.Strings(s.Objects)
	return s
}

// progressOf summarises how far a killed install got: for the log, and to
// check that the kill points differ.
func progressOf(s snapshot) string {
	deployed, pending := 0, 0
	for _, st := range s.Releases {
		switch {
		case st == "deployed":
			deployed++
		case strings.HasPrefix(st, "pending"):
			pending++
		}
	}
	return fmt.Sprintf("%d secrets, %d releases deployed, %d pending", len(s.Secrets), deployed, pending)
}

// Leases of the installation lock in these tests. A killed onprem holds
// killedLease, so that the run after the kill takes the lock over within
// seconds; the runs the test waits for hold steadyLease, which a busy
// 2-core machine running several clusters cannot miss renewing (with 2 s,
// the clean upgrade itself once lost its lock there). killedLease was 2 s
// too, until a child to be killed late in an install, slowed to 30 s by
// CI's load, lost it (a renewal 2 s late) and ended by itself first.
const (
	killedLease = 6 * time.Second
	steadyLease = 30 * time.Second
)

// TestCrashSafety kills `onprem install` with SIGKILL at many points of an
// install and checks that each time a re-run converges to the end state of
// a clean install: the same objects, no duplicate or orphan, every release
// deployed, the generated secrets that existed at the kill unchanged, and
// the dead process's lock taken over.
func TestCrashSafety(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	dir := t.TempDir()
	ctx := context.Background()
	cl := kube.Options{Kubeconfig: c.Kubeconfig}
	sharedIngressClass(t, c)

	install := func(ns string) (*action.InstallResult, error) {
		return (&action.Install{Source: action.Source{ConfigPath: crashConfig(t, dir, ns)}, Cluster: cl,
			Timeout: 2 * time.Minute, LockWait: time.Minute, LockLease: steadyLease}).Run(ctx)
	}
	// The reference: a clean install, its writes to Secrets counted (the
	// generated secrets, then Helm's record of each release as it goes
	// pending and then deployed). The kills are spread over that count,
	// not over time: each child is killed when its own install has made
	// that many writes, so the points it stops at do not depend on how
	// busy the machine is (spread over the reference's duration, they
	// bunched up on a loaded CI machine, where the killed runs went slower
	// than the reference had).
	refWrites := secretWrites(t, c.Client, "crash-ref")
	start := time.Now()
	if _, err := install("crash-ref"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	total := refWrites()
	ref := take(t, c.Client, "crash-ref")
	normalize := func(s snapshot) snapshot {
		s.Secrets = nil
		return s
	}
	t.Logf("clean install took %s, %d writes to Secrets: %d objects, %d releases", took, total, len(ref.Objects), len(ref.Releases))
	if total < 20 {
		t.Fatalf("a clean install made %d writes to Secrets: too few to spread the kills over", total)
	}

	const kills = 9
	points := map[string]bool{}
	for i := 0; i < kills; i++ {
		ns := fmt.Sprintf("crash-%d", i)
		target := total * int64(2*i+1) / (2 * kills)
		at, writes := killAtWrites(t, c.Client, ns, target, "install", "-c", crashConfig(t, dir, ns), "--kubeconfig", c.Kubeconfig,
			"--lock-lease", killedLease.String(), "--timeout", "2m")
		atKill := take(t, c.Client, ns)
		point := progressOf(atKill)
		points[point] = true
		t.Logf("kill %2d at write %2d of %d (seen %2d, after %-6s): %s", i, target, total, writes, at.Round(10*time.Millisecond), point)

		res, err := install(ns)
		if err != nil {
			t.Fatalf("kill %d: re-run after the kill failed: %v", i, err)
		}
		got := take(t, c.Client, ns)
		want := ref
		if !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Errorf("kill %d: end state differs from a clean install\n got: %v %v\nwant: %v %v", i, got.Objects, got.Releases, want.Objects, want.Releases)
		}
		for name, data := range atKill.Secrets {
			if !reflect.DeepEqual(got.Secrets[name], data) {
				t.Errorf("kill %d: generated secret %s changed after the kill", i, name)
			}
		}
		if len(got.Secrets) != len(ref.Secrets) {
			t.Errorf("kill %d: %d generated secrets, want %d", i, len(got.Secrets), len(ref.Secrets))
		}
		st, err := state.NewStore(c.Client, ns).Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last := st.History[len(st.History)-1]
		if st.Version != "2.8.0" || last.Outcome != state.OutcomeSucceeded {
			t.Errorf("kill %d: state %s, last operation %s", i, st.Version, last.Outcome)
		}
		for _, op := range st.History[:len(st.History)-1] {
			if op.Outcome == state.OutcomeRunning {
				t.Errorf("kill %d: the killed operation is still recorded as running", i)
			}
		}
		if res.Secrets == nil {
			t.Errorf("kill %d: no secrets report", i)
		}
	}
	if len(points) < 6 {
		t.Errorf("the kills hit only %d distinct points of the install: %v", len(points), points)
	}
}

// sharedIngressClass creates the cluster's own ingress class, which the
// crash configurations name (preflight checks that it exists).
func sharedIngressClass(t *testing.T, c *testcluster.Cluster) {
	t.Helper()
	if _, err := c.Client.NetworkingV1().IngressClasses().Create(context.Background(), &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "shared"},
		Spec:       networkingv1.IngressClassSpec{Controller: "example.com/ingress"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// secretWrites counts, from now on, the writes to Secrets in namespace ns
// that a watch sees (creations and updates); the function it returns says
// how many so far. The watch ends with the test.
func secretWrites(t *testing.T, c kubernetes.Interface, ns string) func() int64 {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// From the Secrets that exist now: a watch without a resource version
	// would first report each of them as added.
	list, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		defer w.Stop()
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				n.Add(1)
			}
		}
	}()
	return n.Load
}

// killAtWrites runs onprem with args as a child process and SIGKILLs its
// process group once it has made target writes to Secrets in ns
// (or after two minutes, or when it ends by itself, which fails the
// test: a kill that never happened tests nothing). It says when the kill
// came and how many writes had been seen.
func killAtWrites(t *testing.T, c kubernetes.Interface, ns string, target int64, args ...string) (time.Duration, int64) {
	t.Helper()
	writes := secretWrites(t, c, ns)
	cmd := childCommand(args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	limit := time.After(2 * time.Minute)
	for writes() < target {
		select {
		case err := <-done:
			if strings.Contains(out.String(), "lost the installation lock") {
				// Under load its lock's renewals came too late and it
				// stopped by itself: an interruption all the same,
				// which the re-run must converge from.
				t.Logf("onprem %v lost its lock and stopped by itself (%v) after %d writes to Secrets, before write %d where it was to be killed",
					args[0], err, writes(), target)
				return time.Since(start), writes()
			}
			t.Fatalf("onprem %v ended by itself (%v) after %d writes to Secrets, before write %d where it was to be killed:\n%s",
				args[0], err, writes(), target, out.String())
		case <-limit:
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
			t.Fatalf("onprem %v made %d writes to Secrets in two minutes, not the %d it was to be killed at:\n%s",
				args[0], writes(), target, out.String())
		case <-tick.C:
		}
	}
	at, seen := time.Since(start), writes()
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return at, seen
}

// childCommand is onprem run with args as a child process of the test
// binary (TestMain runs the command line when childEnv is set), in a
// process group of its own, so that killGroup ends it and whatever it
// started at once, as a crash does.
func childCommand(args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// killGroup SIGKILLs the process group of a started childCommand and
// reaps it.
func killGroup(cmd *exec.Cmd) {
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	cmd.Wait()
}

// upgradePoint says where a killed upgrade stopped, from its record.
func upgradePoint(st *state.State) string {
	for i := len(st.History) - 1; i >= 0; i-- {
		op := st.History[i]
		if op.Kind != state.KindUpgrade {
			continue
		}
		if len(op.Steps) == 0 {
			return "before the first step"
		}
		s := op.Steps[len(op.Steps)-1]
		return fmt.Sprintf("step %s → %s %s (%s)", s.From, s.To, s.Phase, s.Outcome)
	}
	return "before the upgrade began"
}

// TestUpgradeCrashSafety kills `onprem upgrade apply` 2.6.3 → 2.8.0 with
// SIGKILL at several points. Half the time `onprem upgrade apply` is run
// again and must converge to the end state of a clean upgrade; the other
// half `onprem rollback` is run first and must return to the version
// before the interrupted step with every release deployed, after which the
// upgrade converges too. Generated secrets never change.
func TestUpgradeCrashSafety(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	dir := t.TempDir()
	ctx := context.Background()
	cl := kube.Options{Kubeconfig: c.Kubeconfig}
	sharedIngressClass(t, c)
	install := func(t *testing.T, ns string) {
		t.Helper()
		if _, err := (&action.Install{Source: action.Source{ConfigPath: crashConfigAt(t, dir, ns, "2.6.3")}, Cluster: cl,
			Timeout: 2 * time.Minute, LockLease: steadyLease}).Run(ctx); err != nil {
			t.Fatal(err)
		}
	}
	upgrade := func(t *testing.T, ns string) error {
		_, err := (&action.UpgradeApply{UpgradeTarget: action.UpgradeTarget{Source: action.Source{ConfigPath: crashConfigAt(t, dir, ns, "2.8.0")}, Cluster: cl},
			Timeout: 2 * time.Minute, LockWait: time.Minute, LockLease: steadyLease}).Run(ctx)
		return err
	}
	install(t, "upgrade-ref")
	// The kills are spread over the clean upgrade's writes to Secrets
	// (the state's record, Helm's record of each release as it goes
	// pending, deployed and superseded), not over its duration: spread
	// over time, the six kills running side by side went slower than the
	// reference had and all came early (CI of 2026-12-02: only two
	// points, "before the upgrade began" and the first step's apply).
	refWrites := secretWrites(t, c.Client, "upgrade-ref")
	start := time.Now()
	if err := upgrade(t, "upgrade-ref"); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	total := refWrites()
	ref := take(t, c.Client, "upgrade-ref")
	ref.Secrets = nil
	t.Logf("clean upgrade took %s, %d writes to Secrets: %d objects, %d releases", took, total, len(ref.Objects), len(ref.Releases))

	// Each kill has its own namespace, so the kills run side by side (as
	// many as -parallel allows).
	const kills = 6
	if total < 2*kills {
		t.Fatalf("a clean upgrade made %d writes to Secrets: too few to spread %d kills over", total, kills)
	}
	var mu sync.Mutex
	points := map[string]bool{}
	t.Run("kills", func(t *testing.T) {
		for i := 0; i < kills; i++ {
			t.Run(fmt.Sprintf("kill-%d", i), func(t *testing.T) {
				t.Parallel()
				upgradeKill(t, c, dir, i, total*int64(2*i+1)/(2*kills), total, ref, install, upgrade, func(p string) {
					mu.Lock()
					defer mu.Unlock()
					points[p] = true
				})
			})
		}
	})
	if len(points) < 4 {
		t.Errorf("the kills hit only %d distinct points of the upgrade: %v", len(points), points)
	}
	for _, step := range []string{"step 2.6.3 → 2.7.0", "step 2.7.0 → 2.8.0"} {
		hit := false
		for p := range points {
			hit = hit || strings.HasPrefix(p, step)
		}
		if !hit {
			t.Errorf("no kill came during %s: %v", step, points)
		}
	}
}

// upgradeKill is one kill of TestUpgradeCrashSafety, in its own namespace:
// install 2.6.3, kill 'onprem upgrade apply' at its target-th write to
// Secrets (of total in a clean upgrade), on odd kills roll back first,
// then upgrade again and compare with the clean upgrade ref.
func upgradeKill(t *testing.T, c *testcluster.Cluster, dir string, i int, target, total int64, ref snapshot,
	install func(*testing.T, string), upgrade func(*testing.T, string) error, mark func(string)) {
	ctx := context.Background()
	cl := kube.Options{Kubeconfig: c.Kubeconfig}
	ns := fmt.Sprintf("upgrade-%d", i)
	install(t, ns)
	secrets := take(t, c.Client, ns).Secrets
	at, writes := killAtWrites(t, c.Client, ns, target, "upgrade", "apply", "-c", crashConfigAt(t, dir, ns, "2.8.0"), "--kubeconfig", c.Kubeconfig,
		"--lock-lease", killedLease.String(), "--timeout", "2m")
	st, err := state.NewStore(c.Client, ns).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Where it stopped: the step and its phase, and how many revisions of
	// releases Helm had recorded (within a step's apply, how far it got).
	revs, err := c.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		t.Fatal(err)
	}
	point := fmt.Sprintf("%s, %d release revisions", upgradePoint(st), len(revs.Items))
	mark(point)
	t.Logf("kill %d at write %d of %d (seen %d, after %-6s): %s, platform at %s", i, target, total, writes, at.Round(10*time.Millisecond), point, st.Version)

	if i%2 == 1 {
		good := st.Version
		if _, err := (&action.Rollback{Target: action.Target{Cluster: cl, Namespace: ns}, Timeout: 2 * time.Minute,
			LockWait: time.Minute, LockLease: steadyLease}).Run(ctx); err != nil && !errors.Is(err, action.ErrNothingToRollBack) {
			t.Fatalf("kill %d: rollback: %v", i, err)
		}
		after := take(t, c.Client, ns)
		st, _ := state.NewStore(c.Client, ns).Load(ctx)
		for name, status := range after.Releases {
			if status != "deployed" && !(name == "gitops-manager" && status == "uninstalled") {
				t.Errorf("kill %d: after rollback release %s is %s", i, name, status)
			}
		}
		if st.Version == "" || (st.Version != good && st.Version != "2.6.3" && st.Version != "2.7.0") {
			t.Errorf("kill %d: after rollback the platform is at %q", i, st.Version)
		}
	}
	if err := upgrade(t, ns); err != nil {
		t.Fatalf("kill %d: upgrade after the kill: %v", i, err)
	}
	got := take(t, c.Client, ns)
	for name, data := range secrets {
		if !reflect.DeepEqual(got.Secrets[name], data) {
			t.Errorf("kill %d: generated secret %s changed", i, name)
		}
	}
	got.Secrets = nil
	if !reflect.DeepEqual(got, ref) {
		t.Errorf("kill %d: end state differs from a clean upgrade\n got: %v %v\nwant: %v %v", i, got.Objects, got.Releases, ref.Objects, ref.Releases)
	}
	st, err = state.NewStore(c.Client, ns).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != "2.8.0" || !st.Migrated("pipelines-build-index-v2") || !st.Migrated("audit-log-partitions") {
		t.Errorf("kill %d: state at %s, migrations %+v", i, st.Version, st.Migrations)
	}
	for _, op := range st.History {
		if op.Outcome == state.OutcomeRunning {
			t.Errorf("kill %d: operation %s still recorded as running", i, op.ID)
		}
	}
}
