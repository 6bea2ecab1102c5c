package action

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

const smallPlatform = "  version: 2.8.0\n  domain: ci.example.com\n  modules:\n    pipelines: {enabled: false}\n"

func clusterConfig(t testing.TB, c *testcluster.Cluster, body string) (Source, kube.Options) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "onprem.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	return Source{ConfigPath: path, Lookup: noEnv}, kube.Options{Kubeconfig: c.Kubeconfig}
}

// generated returns the data of every generated secret.
func generated(t *testing.T, c kubernetes.Interface, ns string) map[string]map[string][]byte {
	t.Helper()
	list, err := c.CoreV1().Secrets(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "onprem.dev/generated=true"})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string][]byte{}
	for _, s := range list.Items {
		out[s.Name] = s.Data
	}
	return out
}

// Install, status, converged re-run, uninstall keeping the data, and a
// reinstall that finds the same credentials.
func TestInstallLifecycle(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	src, cl := clusterConfig(t, c, smallPlatform)

	res, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Secrets == nil || len(res.Secrets.Created) == 0 {
		t.Fatalf("no secrets generated: %+v", res.Secrets)
	}
	secretsBefore := generated(t, c.Client, "onprem")
	if len(secretsBefore) != len(res.Secrets.Created) {
		t.Errorf("generated secrets = %d, created %d", len(secretsBefore), len(res.Secrets.Created))
	}

	// Nothing differs after the install; a changed value shows as a
	// change of exactly that object, with no secret value in sight.
	d, err := (&Diff{Source: src, Cluster: cl}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Components) != 0 {
		t.Errorf("diff after install: %+v", d.Components)
	}
	d, err = (&Diff{Source: src, Cluster: cl, Set: []string{"gitops-api.replicas=3"}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Three replicas: the Deployment changes and a PodDisruptionBudget
	// appears.
	changes := map[string]string{}
	if len(d.Components) == 1 && d.Components[0].Name == "gitops-api" {
		for _, o := range d.Components[0].Objects {
			changes[o.Kind+" "+string(o.Change)] = o.Diff
		}
	}
	if len(changes) != 2 || !strings.Contains(changes["Deployment changed"], "+  replicas: 3") || changes["PodDisruptionBudget added"] == "" {
		t.Errorf("diff with --set: %+v", d.Components)
	}
	for _, s := range secretsBefore {
		for _, v := range s {
			for _, c := range d.Components {
				for _, o := range c.Objects {
					if len(v) >= 16 && strings.Contains(o.Diff, string(v)) {
						t.Error("a generated secret value appears in the diff")
					}
				}
			}
		}
	}

	st, err := (&Status{Target: Target{Cluster: cl, ConfigPath: src.ConfigPath}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Installed || st.Version != "2.8.0" || st.LastOperation == nil || st.LastOperation.Outcome != "succeeded" {
		t.Fatalf("status = %+v", st)
	}
	for _, comp := range st.Components {
		if comp.Release != "deployed" || comp.Ready != comp.Desired || comp.Desired == 0 && comp.Name != "platform" {
			t.Errorf("status of %s = %+v", comp.Name, comp)
		}
	}

	res, err = (&Install{Source: src, Cluster: cl}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range res.Components {
		if comp.Action != apply.Unchanged || comp.Revision != 1 {
			t.Errorf("re-run: %s %s rev %d", comp.Name, comp.Action, comp.Revision)
		}
	}
	if len(res.Secrets.Created) != 0 || !reflect.DeepEqual(generated(t, c.Client, "onprem"), secretsBefore) {
		t.Error("re-run changed generated secrets")
	}

	un, err := (&Uninstall{Target: Target{Cluster: cl, ConfigPath: src.ConfigPath}, Timeout: time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(un.Removed) != len(res.Components) || un.Removed[len(un.Removed)-1] != "platform" {
		t.Errorf("removed = %v", un.Removed)
	}
	pvcs, _ := c.Client.CoreV1().PersistentVolumeClaims("onprem").List(ctx, metav1.ListOptions{})
	if len(pvcs.Items) == 0 {
		t.Error("uninstall removed the volumes")
	}
	if !reflect.DeepEqual(generated(t, c.Client, "onprem"), secretsBefore) {
		t.Error("uninstall changed generated secrets")
	}
	deps, _ := c.Client.AppsV1().Deployments("onprem").List(ctx, metav1.ListOptions{})
	if len(deps.Items) != 0 {
		t.Errorf("%d deployments left", len(deps.Items))
	}

	res, err = (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Secrets.Created) != 0 || !reflect.DeepEqual(generated(t, c.Client, "onprem"), secretsBefore) {
		t.Error("reinstall after uninstall changed generated secrets")
	}
	s, err := state.NewStore(c.Client, "onprem").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, op := range s.History {
		kinds = append(kinds, op.Kind+":"+op.Outcome)
	}
	if strings.Join(kinds, " ") != "install:succeeded install:succeeded uninstall:succeeded install:succeeded" {
		t.Errorf("history = %v", kinds)
	}

	if _, err := (&Uninstall{Target: Target{Cluster: cl, ConfigPath: src.ConfigPath}, Purge: true}).Run(ctx); !errors.Is(err, ErrNotConfirmed) {
		t.Errorf("purge without confirmation: %v", err)
	}
	if _, err := (&Uninstall{Target: Target{Cluster: cl, ConfigPath: src.ConfigPath}, Purge: true, Confirmed: true, Timeout: time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if left := generated(t, c.Client, "onprem"); len(left) != 0 {
		t.Errorf("purge left %d generated secrets", len(left))
	}
}

// A second install against the same cluster waits for the lock, then fails
// naming the holder.
func TestInstallWaitsForTheLock(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	src, cl := clusterConfig(t, c, smallPlatform)
	held, err := state.Acquire(ctx, c.Client, "onprem", state.LockOptions{Holder: "alice@ops-1 pid 42 (onprem 0.1.0 install)", Wait: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	start := time.Now()
	_, err = (&Install{Source: src, Cluster: cl, LockWait: 2 * time.Second}).Run(ctx)
	var he *state.HeldError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), "alice@ops-1") {
		t.Fatalf("err = %v", err)
	}
	if time.Since(start) < 2*time.Second {
		t.Errorf("gave up after %s, before --lock-wait", time.Since(start))
	}
	deps, _ := c.Client.AppsV1().Deployments("onprem").List(ctx, metav1.ListOptions{})
	if len(deps.Items) != 0 {
		t.Error("an install ran without the lock")
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	src, cl := clusterConfig(t, c, smallPlatform)
	// The namespace exists (an earlier install, or the operator made it).
	if _, err := state.Acquire(ctx, c.Client, "onprem", state.LockOptions{Holder: "test"}); err != nil {
		t.Fatal(err)
	}
	res, err := (&Install{Source: src, Cluster: cl, DryRun: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, comp := range res.Components {
		if comp.Action != apply.Validated {
			t.Errorf("%s: %s", comp.Name, comp.Action)
		}
	}
	deps, _ := c.Client.AppsV1().Deployments("onprem").List(ctx, metav1.ListOptions{})
	secrets, _ := c.Client.CoreV1().Secrets("onprem").List(ctx, metav1.ListOptions{})
	if len(deps.Items) != 0 || len(secrets.Items) != 0 {
		t.Errorf("dry run created %d deployments, %d secrets", len(deps.Items), len(secrets.Items))
	}
}

func TestUnreachableClusterNamesKubeconfigAndContext(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: gone, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: prod, context: {cluster: gone, user: u}}]
current-context: prod
`), 0o600)
	src := Source{ConfigPath: filepath.Join(dir, "onprem.yaml"), Lookup: noEnv}
	os.WriteFile(src.ConfigPath, []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n"+smallPlatform), 0o644)
	_, err := (&Install{Source: src, Cluster: kube.Options{Kubeconfig: kc, Timeout: 3 * time.Second}}).Run(context.Background())
	var ue *kube.UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), kc) || !strings.Contains(err.Error(), "prod") {
		t.Fatalf("err = %v", err)
	}
}

// A component that never becomes ready: the install stops at its timeout,
// records the failure in the state (status shows it), leaves what was
// applied in place, and a re-run after the fault is gone converges.
func TestInstallRecordsAComponentThatNeverBecomesReady(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	// The fault, injected the way an operator could: an overlay that marks
	// gitops-ui's pods so that the simulated kubelet never makes them ready.
	overlay := filepath.Join(t.TempDir(), "never-ready")
	os.MkdirAll(overlay, 0o755)
	os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(`apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
patches:
  - target: {kind: Deployment, name: gitops-ui}
    patch: |
      - op: add
        path: /spec/template/metadata/annotations
        value: {`+testcluster.AnnotationNeverReady+`: "true"}
`), 0o644)
	src, cl := clusterConfig(t, c, smallPlatform+"  overlays: ["+overlay+"]\n")
	res, err := (&Install{Source: src, Cluster: cl, Timeout: 15 * time.Second}).Run(ctx)
	var fe *apply.FailedError
	if !errors.As(err, &fe) || len(fe.Components) != 1 || fe.Components[0] != "gitops-ui" {
		t.Fatalf("err = %v", err)
	}
	ui, _ := findResult(res, "gitops-ui")
	if !strings.Contains(strings.Join(ui.NotReady, "\n"), "not ready") {
		t.Errorf("no reason given: %+v", ui)
	}
	st, err := (&Status{Target: Target{Cluster: cl, ConfigPath: src.ConfigPath}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.LastOperation == nil || st.LastOperation.Outcome != state.OutcomeFailed || !strings.Contains(st.LastOperation.Message, "gitops-ui") {
		t.Errorf("last operation = %+v", st.LastOperation)
	}
	var uiStatus *ComponentStatus
	for i := range st.Components {
		if st.Components[i].Name == "gitops-ui" {
			uiStatus = &st.Components[i]
		}
	}
	if uiStatus == nil || uiStatus.LastError == "" || uiStatus.Ready != 0 {
		t.Errorf("gitops-ui status = %+v", uiStatus)
	}
	// Installed components stayed.
	if api, _ := findResult(res, "gitops-api"); api.Action != apply.Installed {
		t.Errorf("gitops-api = %+v", api)
	}
	src, _ = clusterConfig(t, c, smallPlatform)
	res, err = (&Install{Source: src, Cluster: cl, Timeout: time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ui, _ := findResult(res, "gitops-ui"); ui.Action != apply.Upgraded {
		t.Errorf("gitops-ui after the fix = %+v", ui)
	}
}

func findResult(res *InstallResult, name string) (apply.ComponentResult, bool) {
	if res == nil {
		return apply.ComponentResult{}, false
	}
	for _, c := range res.Components {
		if c.Name == name {
			return c, true
		}
	}
	return apply.ComponentResult{}, false
}
