package action

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/upgrade"
)

// upgradePlatform is the whole platform (pipelines for the 2.7.0
// migration, gitops for the component 2.8.0 drops) at a version.
func upgradePlatform(version string, extra ...string) string {
	return "  version: " + version + "\n  domain: ci.example.com\n" + strings.Join(extra, "")
}

// overlay writes a kustomize Component that annotates the pod template of
// the object of kind/name (how an operator, or a test on the integration
// ring, marks pods for the simulated kubelet).
func overlay(t *testing.T, kind, name, annotation string) string {
	t.Helper()
	return overlayAnnotations(t, kind, name, map[string]string{annotation: "true"})
}

func installAt(t *testing.T, c *testcluster.Cluster, version string) (Source, kube.Options) {
	t.Helper()
	src, cl := clusterConfig(t, c, upgradePlatform(version))
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(context.Background()); err != nil {
		t.Fatalf("installing %s: %v", version, err)
	}
	return src, cl
}

func loadState(t *testing.T, c kubernetes.Interface) *state.State {
	t.Helper()
	st, err := state.NewStore(c, "onprem").Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func revisions(t *testing.T, c *testcluster.Cluster) map[string]string {
	t.Helper()
	h := apply.NewHelmReleases(kubeGetter(t, c).Getter, "onprem", nil)
	names, err := h.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range names {
		last, err := h.Last(context.Background(), n)
		if err != nil || last == nil {
			t.Fatalf("release %s: %v", n, err)
		}
		out[n] = last.Status + "/" + last.Chart
	}
	return out
}

func kubeGetter(t *testing.T, c *testcluster.Cluster) *kube.Cluster {
	t.Helper()
	cl, err := kube.Connect(context.Background(), kube.Options{Kubeconfig: c.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func image(t *testing.T, c kubernetes.Interface, kind, name string) string {
	t.Helper()
	ctx := context.Background()
	var spec corev1.PodSpec
	switch kind {
	case "Deployment":
		d, err := c.AppsV1().Deployments("onprem").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec = d.Spec.Template.Spec
	case "StatefulSet":
		s, err := c.AppsV1().StatefulSets("onprem").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		spec = s.Spec.Template.Spec
	}
	return spec.Containers[0].Image
}

func lastOp(st *state.State) state.Operation { return st.History[len(st.History)-1] }

// The whole path 2.6.3 → 2.7.0 (required stop) → 2.8.0: plan, refusals of
// bad targets, apply with backups and migrations, removal of the component
// 2.8.0 drops, rollback of the last step, and an upgrade again that does
// not run the completed migrations twice.
func TestUpgradeAcrossTwoStepsAndRollback(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	_, cl := installAt(t, c, "2.6.3")
	src, _ := clusterConfig(t, c, upgradePlatform("2.8.0"))

	// install does not change versions.
	_, err := (&Install{Source: src, Cluster: cl}).Run(ctx)
	var vc *VersionChangeError
	var ie *InputError
	if !errors.As(err, &vc) || !errors.As(err, &ie) || !strings.Contains(err.Error(), "onprem upgrade apply --to 2.8.0") {
		t.Fatalf("install of another version: %v", err)
	}

	// Where 2.6.3 can go (the console's Upgrade page).
	vs, err := (&UpgradeVersions{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var reach []string
	for _, v := range vs.Reachable {
		reach = append(reach, v.Version)
	}
	if vs.Installed != "2.6.3" || vs.Configured != "2.8.0" || !slices.Equal(reach, []string{"2.7.0", "2.7.1", "2.8.0"}) {
		t.Errorf("versions: installed %s, configured %s, reachable %v", vs.Installed, vs.Configured, reach)
	}

	// Bad targets are input errors that list where 2.6.3 can go.
	for _, to := range []string{"9.9.9", "2.6.0"} {
		_, err := (&UpgradePlan{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl, To: to}}).Run(ctx)
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "reachable from 2.6.3: 2.7.0") {
			t.Errorf("--to %s: %v", to, err)
		}
	}

	plan, err := (&UpgradePlan{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}, ServerDryRun: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Steps) != 2 || plan.Steps[0].To != "2.7.0" || plan.Steps[1].To != "2.8.0" || !plan.Steps[0].Required {
		t.Fatalf("path = %+v", plan.Plan)
	}
	if len(plan.Steps[0].Diff) == 0 || len(plan.Steps[1].Diff) == 0 {
		t.Error("a step shows no object diff")
	}
	if len(plan.DryRun) != 2 || plan.DryRun[0].Error != "" || plan.DryRun[1].Error != "" {
		t.Errorf("server dry run = %+v", plan.DryRun)
	}
	change := func(step int, name string) upgrade.ComponentChange {
		for _, cc := range plan.Steps[step].Components {
			if cc.Name == name {
				return cc
			}
		}
		t.Fatalf("step %d: no component %s", step, name)
		return upgrade.ComponentChange{}
	}
	if cc := change(1, "gitops-manager"); cc.Change != upgrade.ComponentRemoved {
		t.Errorf("gitops-manager in 2.8.0: %+v", cc)
	}
	if cc := change(1, "mongodb"); cc.Change != upgrade.ComponentChanged || len(cc.Images) != 1 || !strings.HasSuffix(cc.Images[0].To, ":7.0.16") {
		t.Errorf("mongodb in 2.8.0: %+v", cc)
	}
	if m := plan.Steps[0].Migrations; len(m) != 1 || m[0].Name != "pipelines-build-index-v2" || !slices.Equal(m[0].Backups, []string{"mongodb/pipelines-api"}) {
		t.Errorf("2.7.0 migrations = %+v", m)
	}
	for name, data := range generated(t, c.Client, "onprem") {
		for _, v := range data {
			for _, s := range plan.Steps {
				for _, dc := range s.Diff {
					for _, o := range dc.Objects {
						if len(v) >= 16 && strings.Contains(o.Diff, string(v)) {
							t.Errorf("the value of secret %s appears in the plan's diff", name)
						}
					}
				}
			}
		}
	}
	if st := loadState(t, c.Client); st.Version != "2.6.3" || len(st.History) != 1 {
		t.Fatalf("planning changed the state: %+v", st)
	}

	res, err := (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Version != "2.8.0" || len(res.Steps) != 2 {
		t.Fatalf("result = %+v", res)
	}
	st := loadState(t, c.Client)
	op := lastOp(st)
	if st.Version != "2.8.0" || op.Kind != state.KindUpgrade || op.Outcome != state.OutcomeSucceeded || len(op.Steps) != 2 {
		t.Fatalf("state after upgrade: version %s, op %+v", st.Version, op)
	}
	for i, want := range []struct{ migration, backup string }{
		{"pipelines-build-index-v2", "/backups/2.7.0/" + op.ID + "/pipelines-api-mongodb.archive.gz"},
		{"audit-log-partitions", "/backups/2.8.0/" + op.ID + "/audit-manager-postgresql.pgdump"},
	} {
		s := op.Steps[i]
		if s.Outcome != state.OutcomeSucceeded || !slices.Equal(s.Migrations, []string{want.migration}) ||
			len(s.Backups) != 1 || s.Backups[0].Path != want.backup || s.Backups[0].Claim != render.BackupClaim {
			t.Errorf("step %d = %+v", i, s)
		}
		if !st.Migrated(want.migration) {
			t.Errorf("migration %s not recorded", want.migration)
		}
	}
	if !slices.Equal(op.Steps[1].Removed, []string{"gitops-manager"}) {
		t.Errorf("2.8.0 removed %v", op.Steps[1].Removed)
	}
	if _, ok := st.Components["gitops-manager"]; ok {
		t.Error("gitops-manager still recorded")
	}
	for _, job := range []string{"onprem-migration-pipelines-build-index-v2", "onprem-backup-audit-manager-postgresql"} {
		j, err := c.Client.BatchV1().Jobs("onprem").Get(ctx, job, metav1.GetOptions{})
		if err != nil || j.Status.Succeeded != 1 {
			t.Errorf("job %s: %v %+v", job, err, j.Status)
		}
	}
	if _, err := c.Client.CoreV1().PersistentVolumeClaims("onprem").Get(ctx, render.BackupClaim, metav1.GetOptions{}); err != nil {
		t.Errorf("backup claim: %v", err)
	}
	if _, err := c.Client.AppsV1().Deployments("onprem").Get(ctx, "gitops-manager", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("gitops-manager deployment still there: %v", err)
	}
	if img := image(t, c.Client, "StatefulSet", "mongodb"); !strings.HasSuffix(img, ":7.0.16") {
		t.Errorf("mongodb image = %s", img)
	}
	// --to below the installed version: exit 2 material.
	_, err = (&UpgradePlan{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl, To: "2.7.0"}}).Run(ctx)
	var de *upgrade.DowngradeError
	if !errors.As(err, &de) || !errors.As(err, &ie) {
		t.Errorf("downgrade: %v", err)
	}

	// Roll the last step back: gitops-manager returns, MongoDB's image
	// goes back, the recorded version is 2.7.0.
	rb, err := (&Rollback{Target: Target{Cluster: cl, ConfigPath: src.ConfigPath}, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rb.From != "2.8.0" || rb.To != "2.7.0" || !slices.Contains(rb.RolledBack, "gitops-manager") || !slices.Contains(rb.RolledBack, "mongodb") {
		t.Errorf("rollback = %+v", rb)
	}
	if len(rb.Backups) != 1 || !strings.HasSuffix(rb.Backups[0].Path, "audit-manager-postgresql.pgdump") {
		t.Errorf("rollback names no backup: %+v", rb.Backups)
	}
	st = loadState(t, c.Client)
	if st.Version != "2.7.0" || lastOp(st).Kind != state.KindRollback || lastOp(st).Outcome != state.OutcomeSucceeded {
		t.Fatalf("after rollback: %s %+v", st.Version, lastOp(st))
	}
	if img := image(t, c.Client, "StatefulSet", "mongodb"); !strings.HasSuffix(img, ":7.0.14") {
		t.Errorf("mongodb image after rollback = %s", img)
	}
	if img := image(t, c.Client, "Deployment", "gitops-manager"); !strings.HasSuffix(img, ":2.7.0") {
		t.Errorf("gitops-manager after rollback = %s", img)
	}
	for name, rel := range revisions(t, c) {
		if !strings.HasPrefix(rel, "deployed/") {
			t.Errorf("release %s after rollback: %s", name, rel)
		}
	}

	// Hand edits before the step: a NetworkPolicy of the platform
	// component, which the step does not change, and gitops-api's image,
	// which it upgrades.
	np, err := c.Client.NetworkingV1().NetworkPolicies("onprem").Get(ctx, "onprem-routed-ingress", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	np.Spec.Ingress = append(np.Spec.Ingress, networkingv1.NetworkPolicyIngressRule{})
	if _, err := c.Client.NetworkingV1().NetworkPolicies("onprem").Update(ctx, np, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	updateDeployment(t, c.Client, "gitops-api", "kubectl-set", func(d *appsv1.Deployment) { d.Spec.Template.Spec.Containers[0].Image += "-nope" })

	// Upgrade again: the 2.8.0 migration completed already and is not
	// run again; gitops-manager is removed again; the step repairs the
	// platform component and names the drift of gitops-api it upgrades.
	res, err = (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 1 || len(res.Steps[0].Migrations) != 0 || len(res.Steps[0].Backups) != 0 || !slices.Equal(res.Steps[0].Removed, []string{"gitops-manager"}) {
		t.Errorf("second upgrade = %+v", res.Steps)
	}
	repairedIn := map[string]apply.ComponentResult{}
	for _, r := range res.Steps[0].Components {
		if len(r.Repaired) > 0 {
			repairedIn[r.Name] = r
		}
	}
	if r := repairedIn["platform"]; r.Action != apply.Repaired || !slices.Equal(r.Repaired, []string{"NetworkPolicy/onprem-routed-ingress ingress"}) {
		t.Errorf("the step's platform component: %+v", r)
	}
	if r := repairedIn["gitops-api"]; r.Action != apply.Upgraded || !slices.Equal(r.Repaired, []string{"Deployment/gitops-api image"}) {
		t.Errorf("the step's gitops-api: %+v", r)
	}
	if len(repairedIn) != 2 {
		t.Errorf("the step names drift in %v, want platform and gitops-api", slices.Sorted(maps.Keys(repairedIn)))
	}
	if got, err := c.Client.NetworkingV1().NetworkPolicies("onprem").Get(ctx, "onprem-routed-ingress", metav1.GetOptions{}); err != nil || len(got.Spec.Ingress) != len(np.Spec.Ingress)-1 {
		t.Errorf("the NetworkPolicy after the step: %v %+v", err, got)
	}
	if img := image(t, c.Client, "Deployment", "gitops-api"); !strings.HasSuffix(img, ":2.8.0") {
		t.Errorf("gitops-api after the step: %s", img)
	}
	if op := lastOp(loadState(t, c.Client)); !slices.Contains(op.Repaired, "platform: NetworkPolicy/onprem-routed-ingress ingress") ||
		!slices.Contains(op.Repaired, "gitops-api: Deployment/gitops-api image") {
		t.Errorf("the upgrade's record of what it reverted: %q", op.Repaired)
	}
	if loadState(t, c.Client).Version != "2.8.0" {
		t.Error("not at 2.8.0")
	}
}

// A migration Job that exits 1: nothing else was touched, the step is
// recorded as rolled back, the platform stays at 2.6.3, and the error says
// which Job failed with which exit code.
func TestFailedMigrationLeavesThePlatformAsItWas(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	installAt(t, c, "2.6.3")
	before := revisions(t, c)
	src, cl := clusterConfig(t, c, upgradePlatform("2.7.0",
		overlay(t, "Job", "onprem-migration-pipelines-build-index-v2", testcluster.AnnotationFail)))
	_, err := (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}, Timeout: time.Minute}).Run(ctx)
	var fe *upgrade.FailedError
	var jf *upgrade.JobFailedError
	if !errors.As(err, &fe) || !errors.As(err, &jf) || !strings.Contains(err.Error(), "exited with code 1") {
		t.Fatalf("err = %v", err)
	}
	if len(fe.RolledBack) != 0 || fe.Version != "2.6.3" {
		t.Errorf("failure = %+v", fe)
	}
	st := loadState(t, c.Client)
	op := lastOp(st)
	if st.Version != "2.6.3" || op.Outcome != state.OutcomeFailed || len(op.Steps) != 1 || op.Steps[0].Outcome != state.OutcomeRolledBack {
		t.Fatalf("state = %s %+v", st.Version, op)
	}
	if len(op.Steps[0].Backups) != 1 || st.Migrated("pipelines-build-index-v2") {
		t.Errorf("step = %+v, migrations %+v", op.Steps[0], st.Migrations)
	}
	if after := revisions(t, c); !mapsEqual(before, after) {
		t.Errorf("releases changed: before %v, after %v", before, after)
	}
}

// A component that never becomes ready: every component the step changed
// goes back to its revision from before, and the platform stays at 2.6.3
// (the migration that did complete is recorded and will not run again).
func TestNeverReadyComponentRollsTheStepBack(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	installAt(t, c, "2.6.3")
	src, cl := clusterConfig(t, c, upgradePlatform("2.7.0",
		overlay(t, "Deployment", "pipelines-api", testcluster.AnnotationNeverReady)))
	rep := &phases{}
	// The timeout is also each rollback's bound (upgrade.RollbackTimeout):
	// with 20 s, RabbitMQ's rollback on CI's loaded machine once ran out
	// before the API server had answered its roll's first look.
	_, err := (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}, Timeout: 40 * time.Second, Reporter: rep}).Run(ctx)
	var fe *upgrade.FailedError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "pipelines-api") || fe.RollbackErr != nil {
		t.Fatalf("err = %v", err)
	}
	if !slices.Contains(fe.RolledBack, "pipelines-api") || !slices.Contains(fe.RolledBack, "redis") {
		t.Errorf("rolled back %v", fe.RolledBack)
	}
	// The reporter (the console's, the CLI's lines) is told each rollback.
	for _, n := range fe.RolledBack {
		if p := rep.last(n); p != apply.PhaseRolledBack {
			t.Errorf("the last event of %s: %q, want %q", n, p, apply.PhaseRolledBack)
		}
	}
	if img := image(t, c.Client, "Deployment", "pipelines-api"); !strings.HasSuffix(img, ":2.6.3") {
		t.Errorf("pipelines-api image = %s", img)
	}
	if img := image(t, c.Client, "StatefulSet", "redis"); strings.HasSuffix(img, ":7.2.7") {
		t.Errorf("redis image = %s, still 2.7.0's", img)
	}
	st := loadState(t, c.Client)
	op := lastOp(st)
	if st.Version != "2.6.3" || op.Steps[0].Outcome != state.OutcomeRolledBack || !st.Migrated("pipelines-build-index-v2") {
		t.Errorf("state = %s %+v", st.Version, op.Steps)
	}
	for name, rel := range revisions(t, c) {
		if !strings.HasPrefix(rel, "deployed/") {
			t.Errorf("release %s: %s", name, rel)
		}
	}
	// Without the fault the same upgrade goes through, without running
	// the migration again.
	src, _ = clusterConfig(t, c, upgradePlatform("2.7.0"))
	res, err := (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}, Timeout: time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Steps) != 1 || len(res.Steps[0].Migrations) != 0 {
		t.Errorf("retry = %+v", res.Steps)
	}
	jobs, _ := c.Client.BatchV1().Jobs("onprem").List(ctx, metav1.ListOptions{LabelSelector: render.TaskLabel})
	for _, j := range jobs.Items {
		if !jobDone(&j) {
			t.Errorf("job %s did not complete", j.Name)
		}
	}
}

func jobDone(j *batchv1.Job) bool {
	for _, c := range j.Status.Conditions {
		if c.Type == batchv1.JobComplete && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestUpgradeWithoutAnInstallation(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	src, cl := clusterConfig(t, c, upgradePlatform("2.8.0"))
	_, err := (&UpgradePlan{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}}).Run(context.Background())
	var ni *NotInstalledError
	var ie *InputError
	if !errors.As(err, &ni) || !errors.As(err, &ie) || !strings.Contains(err.Error(), "onprem adopt") {
		t.Fatalf("err = %v", err)
	}
	_, err = (&Rollback{Target: Target{Cluster: cl, ConfigPath: src.ConfigPath}}).Run(context.Background())
	if !errors.As(err, &ni) {
		t.Errorf("rollback: %v", err)
	}
	if _, err = (&UpgradeVersions{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}}).Run(context.Background()); !errors.As(err, &ni) || !errors.As(err, &ie) {
		t.Errorf("versions: %v", err)
	}
}

// A platform whose Helm releases exist but that onprem has no record of
// (installed with plain Helm): adopt refuses a wrong version and missing
// secrets, listing every problem and recording nothing, then records it
// without changing a release, and the platform can be upgraded from there.
func TestAdoptAPlatformInstalledWithHelm(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	_, cl := installAt(t, c, "2.6.3")
	// What a plain Helm install leaves: the releases and the secrets, but
	// no onprem record.
	if err := state.NewStore(c.Client, "onprem").Delete(ctx); err != nil {
		t.Fatal(err)
	}
	before := revisions(t, c)
	redis, err := c.Client.CoreV1().Secrets("onprem").Get(ctx, "onprem-redis", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Client.CoreV1().Secrets("onprem").Delete(ctx, "onprem-redis", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	src28, _ := clusterConfig(t, c, upgradePlatform("2.8.0"))
	_, err = (&Adopt{Source: src28, Cluster: cl}).Run(ctx)
	var ae *AdoptError
	var ie *InputError
	if !errors.As(err, &ae) || !errors.As(err, &ie) {
		t.Fatalf("adopt as 2.8.0: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"component mongodb: the release runs mongo:7.0.14", "component audit-manager", "secret onprem-redis is missing"} {
		if !strings.Contains(msg, want) {
			t.Errorf("adopt as 2.8.0 does not say %q:\n%s", want, msg)
		}
	}
	src, _ := clusterConfig(t, c, upgradePlatform("2.6.3"))
	_, err = (&Adopt{Source: src, Cluster: cl}).Run(ctx)
	if !errors.As(err, &ae) || len(ae.Problems) != 1 || !strings.Contains(ae.Problems[0], "onprem-redis") {
		t.Fatalf("adopt without the redis secret: %v", err)
	}
	if st := loadState(t, c.Client); st.Stored() {
		t.Fatal("a refused adoption recorded something")
	}

	redis.ResourceVersion, redis.UID = "", ""
	if _, err := c.Client.CoreV1().Secrets("onprem").Create(ctx, redis, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := (&Adopt{Source: src, Cluster: cl}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Every release but onprem's own namespace-level one (which a plain
	// Helm install would not have, and the next upgrade installs).
	if res.Version != "2.6.3" || len(res.Components) != len(before)-1 || !slices.Equal(res.Pending, []string{"platform"}) {
		t.Errorf("adopted %+v, releases %v", res, before)
	}
	st := loadState(t, c.Client)
	if st.Version != "2.6.3" || lastOp(st).Kind != state.KindAdopt || st.Components["mongodb"].Revision != 1 {
		t.Errorf("state = %s %+v %+v", st.Version, lastOp(st), st.Components["mongodb"])
	}
	if after := revisions(t, c); !mapsEqual(before, after) {
		t.Errorf("adopt changed releases: %v → %v", before, after)
	}
	if _, err := (&Adopt{Source: src, Cluster: cl}).Run(ctx); err == nil || !strings.Contains(err.Error(), "already holds") {
		t.Errorf("second adopt: %v", err)
	}
	src27, _ := clusterConfig(t, c, upgradePlatform("2.7.0"))
	up, err := (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: src27, Cluster: cl}, Timeout: time.Minute}).Run(ctx)
	if err != nil || up.Version != "2.7.0" {
		t.Fatalf("upgrade after adopt: %v", err)
	}
}

// phases records the last phase reported for each component (and calls
// on with each event, when set).
type phases struct {
	mu sync.Mutex
	m  map[string]apply.Phase
	on func(apply.Event)
}

func (p *phases) Report(e apply.Event) {
	if p.on != nil {
		p.on(e)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]apply.Phase{}
	}
	p.m[e.Component] = e.Phase
}

func (p *phases) last(name string) apply.Phase {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[name]
}

// overlayAnnotations writes a kustomize Component that sets annotations
// on the pod template of the object of kind/name.
func overlayAnnotations(t *testing.T, kind, name string, annotations map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fault")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	value, err := json.Marshal(annotations)
	if err != nil {
		t.Fatal(err)
	}
	body := `apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
patches:
  - target: {kind: ` + kind + `, name: ` + name + `}
    patch: |
      - op: add
        path: /spec/template/metadata/annotations
        value: ` + string(value) + `
`
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return "  overlays: [" + dir + "]\n"
}

// An image the registry says does not exist: the upgrade stops waiting
// for it at once (not at its 5-minute timeout), rolls the step back, and
// its error names the cause as doctor's image-pull analyzer does.
func TestImageNotFoundRollsTheStepBackAtOnce(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	installAt(t, c, "2.6.3")
	const missing = "rpc error: code = NotFound desc = failed to pull and unpack image: not found"
	src, cl := clusterConfig(t, c, upgradePlatform("2.7.0", overlayAnnotations(t, "Deployment", "pipelines-api",
		map[string]string{testcluster.AnnotationWaiting: "ErrImagePull", testcluster.AnnotationWaitingMessage: missing})))
	var (
		mu                  sync.Mutex
		applying, rollingAt time.Time
		lines               []string // the progress, for a failure to show what the wait saw
	)
	rep := &phases{on: func(e apply.Event) {
		mu.Lock()
		defer mu.Unlock()
		if e.Component == "pipelines-api" && e.Phase == apply.PhaseApplying {
			applying = time.Now()
		}
	}}
	progress := func(line string) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, time.Now().Format("15:04:05.0")+" "+line)
		if strings.Contains(line, "rolling back the step's components") && rollingAt.IsZero() {
			rollingAt = time.Now()
		}
	}
	start := time.Now()
	_, err := (&UpgradeApply{UpgradeTarget: UpgradeTarget{Source: src, Cluster: cl}, Timeout: 5 * time.Minute, Reporter: rep, Progress: progress}).Run(ctx)
	took := time.Since(start)
	var fe *upgrade.FailedError
	var stuck *apply.StuckError
	if !errors.As(err, &fe) || !errors.As(err, &stuck) || fe.RollbackErr != nil {
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("err = %v\nprogress:\n%s", err, strings.Join(lines, "\n"))
	}
	if stuck.Component != "pipelines-api" || stuck.Fault.Analyzer != "image-pull" ||
		!strings.Contains(err.Error(), "component pipelines-api cannot be pulled from") || !strings.Contains(err.Error(), "the registry says it does not exist") {
		t.Errorf("the error does not name the cause: %v", err)
	}
	mu.Lock()
	waited := rollingAt.Sub(applying)
	mu.Unlock()
	if applying.IsZero() || rollingAt.IsZero() || waited > 20*time.Second {
		t.Errorf("from applying pipelines-api to the rollback: %s (applying at %v, rollback at %v)", waited, applying, rollingAt)
	}
	t.Logf("upgrade failed and rolled back in %s; %s from applying pipelines-api to the rollback", took.Round(100*time.Millisecond), waited.Round(100*time.Millisecond))
	if !slices.Contains(fe.RolledBack, "pipelines-api") {
		t.Errorf("rolled back %v", fe.RolledBack)
	}
	if img := image(t, c.Client, "Deployment", "pipelines-api"); !strings.HasSuffix(img, ":2.6.3") {
		t.Errorf("pipelines-api image = %s", img)
	}
	st := loadState(t, c.Client)
	if op := lastOp(st); st.Version != "2.6.3" || op.Steps[0].Outcome != state.OutcomeRolledBack {
		t.Errorf("state = %s %+v", st.Version, op.Steps)
	}
	for name, rel := range revisions(t, c) {
		if !strings.HasPrefix(rel, "deployed/") {
			t.Errorf("release %s: %s", name, rel)
		}
	}
}
