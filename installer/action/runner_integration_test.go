package action

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/runner"
	"onprem.dev/onprem/installer/state"
)

// pipelinesPlatform is the smallest platform runners can register with:
// the pipelines module (runtime-manager reads the registrations), no
// GitOps module.
const pipelinesPlatform = "  version: 2.8.0\n  domain: ci.example.com\n  modules:\n    gitops: {enabled: false}\n"

func unreachableKubeconfig(t *testing.T) string {
	t.Helper()
	kc := filepath.Join(t.TempDir(), "gone.kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: gone, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: far-away, context: {cluster: gone, user: u}}]
current-context: far-away
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

func secretData(t *testing.T, c kubernetes.Interface, ns, name string) map[string][]byte {
	t.Helper()
	s, err := c.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret %s/%s: %v", ns, name, err)
	}
	return s.Data
}

func runnerState(t *testing.T, c kubernetes.Interface) (*state.State, []byte) {
	t.Helper()
	st, err := state.NewStore(c, "onprem").Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st, secretData(t, c, "onprem", state.SecretName)[state.DataKey]
}

func gone(t *testing.T, err error, what string) {
	t.Helper()
	if !apierrors.IsNotFound(err) {
		t.Errorf("%s: still there (%v)", what, err)
	}
}

// A runner on a second cluster, from install to uninstall, with the
// platform on the first.
func TestRunnerOnARemoteCluster(t *testing.T) {
	t.Parallel() // its own cluster
	platform, remote := testcluster.Start(t), testcluster.Start(t)
	ctx := context.Background()
	src, pcl := clusterConfig(t, platform, pipelinesPlatform)
	if _, err := (&Install{Source: src, Cluster: pcl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	rref := config.ClusterRef{Kubeconfig: remote.Kubeconfig}
	install := func(name string, ref config.ClusterRef) (*runner.Result, error) {
		return (&RunnerInstall{Source: src, Cluster: pcl, Name: name, RunnerCluster: ref, Timeout: 2 * time.Minute}).Run(ctx)
	}

	res, err := install("gpu", rref)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != apply.Installed || res.Revision != 1 || !res.TokenCreated || res.Namespace != "onprem-runner-gpu" || res.Version != "2.8.0" {
		t.Errorf("install: %+v", res)
	}
	const ns, engineNS = "onprem-runner-gpu", "onprem-runner-gpu-engine"

	// The runner's cluster: the token, the namespaces and their Pod
	// Security levels, the release, ready workloads, a Role of its own
	// namespace.
	token := secretData(t, remote.Client, ns, runner.TokenSecret)[runner.TokenKey]
	if len(token) != 43 {
		t.Fatalf("token of %d bytes", len(token))
	}
	for n, level := range map[string]string{ns: "restricted", engineNS: "privileged"} {
		nsObj, err := remote.Client.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := nsObj.Labels["pod-security.kubernetes.io/enforce"]; got != level {
			t.Errorf("namespace %s enforces %q, want %q", n, got, level)
		}
	}
	for n, dep := range map[string]string{ns: runner.AgentDeployment, engineNS: runner.EngineDeployment} {
		d, err := remote.Client.AppsV1().Deployments(n).Get(ctx, dep, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if d.Status.ReadyReplicas != 1 {
			t.Errorf("%s/%s: %d ready", n, dep, d.Status.ReadyReplicas)
		}
	}
	role, err := remote.Client.RbacV1().Roles(ns).Get(ctx, "runner-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range role.Rules {
		for _, res := range r.Resources {
			if !slices.Contains([]string{"pods", "pods/log", "pods/exec", "secrets", "configmaps"}, res) {
				t.Errorf("the agent's Role grants %s", res)
			}
		}
	}
	if crs, _ := remote.Client.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{LabelSelector: runner.LabelRunner}); len(crs.Items) != 0 {
		t.Errorf("the runner has cluster-wide bindings: %v", crs.Items)
	}
	if rbs, _ := remote.Client.RbacV1().RoleBindings(engineNS).List(ctx, metav1.ListOptions{}); len(rbs.Items) != 0 {
		t.Errorf("someone may act in the engine's namespace: %v", rbs.Items)
	}
	ca := secretData(t, platform.Client, "onprem", "onprem-tls")["ca.crt"]
	if cm, err := remote.Client.CoreV1().ConfigMaps(ns).Get(ctx, runner.PlatformCAConfigMap, metav1.GetOptions{}); err != nil || cm.Data["ca.crt"] != string(ca) {
		t.Errorf("the platform's CA did not reach the runner (%v)", err)
	}
	// Nothing of the runner on the platform's cluster but its registration.
	_, err = platform.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	gone(t, err, "runner namespace on the platform's cluster")

	// The platform's cluster: the registration and the record, with no
	// token in the record.
	if reg := secretData(t, platform.Client, "onprem", runner.Registrations); !bytes.Equal(reg["gpu"], token) {
		t.Error("the registration differs from the runner's token")
	}
	st, raw := runnerState(t, platform.Client)
	rec, ok := st.Runners["gpu"]
	if !ok || rec.Server != remote.RESTConfig.Host || rec.Namespace != ns || rec.EngineNamespace != engineNS ||
		rec.Version != "2.8.0" || rec.Revision != 1 || rec.Status != "deployed" || rec.RegisteredAt.IsZero() {
		t.Errorf("record = %+v", rec)
	}
	if bytes.Contains(raw, token) {
		t.Fatal("the token is in the installation's state")
	}

	// Again: nothing changes, not the token, not the Helm revision.
	res, err = install("gpu", rref)
	if err != nil {
		t.Fatal(err)
	}
	if res.Action != apply.Unchanged || res.Revision != 1 || res.TokenCreated {
		t.Errorf("re-install: %+v", res)
	}
	if !bytes.Equal(secretData(t, remote.Client, ns, runner.TokenSecret)[runner.TokenKey], token) {
		t.Error("re-install changed the token")
	}

	list, err := (&RunnerList{Target: Target{Cluster: pcl, ConfigPath: src.ConfigPath}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Runners) != 1 || !list.Runners[0].Ready || !list.Runners[0].Reachable || list.Runners[0].Release != "deployed" ||
		list.Runners[0].Agent != (runner.Readiness{Ready: 1, Desired: 1}) {
		t.Errorf("list = %+v", list.Runners)
	}

	// The same name elsewhere: refused, naming where it runs; nothing
	// touched.
	_, err = install("gpu", config.ClusterRef{})
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), remote.RESTConfig.Host) || !strings.Contains(err.Error(), ns) {
		t.Errorf("duplicate name: %v", err)
	}
	_, err = platform.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	gone(t, err, "namespace of a refused runner")

	// An unreachable runner cluster: named, and nothing touched.
	kc := unreachableKubeconfig(t)
	_, err = install("far", config.ClusterRef{Kubeconfig: kc})
	var ue *kube.UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), kc) || !strings.Contains(err.Error(), "far-away") || !strings.Contains(err.Error(), "runner far") {
		t.Errorf("unreachable: %v", err)
	}

	// Upgrade to the installed version: converged, nothing to do.
	ups, err := (&RunnerUpgrade{AttachmentUpgrade: AttachmentUpgrade{Source: src, Cluster: pcl, All: true, Timeout: time.Minute}}).Run(ctx)
	if err != nil || len(ups) != 1 || ups[0].Action != apply.Unchanged {
		t.Errorf("upgrade --all: %+v %v", ups, err)
	}

	// Uninstall: both sides clean.
	un, err := (&RunnerUninstall{AttachmentUninstall: AttachmentUninstall{Target: Target{Cluster: pcl, ConfigPath: src.ConfigPath}, Name: "gpu", Timeout: time.Minute}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(un.Removed) == 0 || len(un.Kept) != 0 {
		t.Errorf("uninstall: %+v", un)
	}
	for _, n := range []string{ns, engineNS} {
		_, err := remote.Client.CoreV1().Namespaces().Get(ctx, n, metav1.GetOptions{})
		gone(t, err, "namespace "+n)
	}
	_, err = platform.Client.CoreV1().Secrets("onprem").Get(ctx, runner.Registrations, metav1.GetOptions{})
	gone(t, err, "the registrations Secret")
	if st, _ := runnerState(t, platform.Client); len(st.Runners) != 0 {
		t.Errorf("records left: %v", st.Runners)
	}

	// A runner whose cluster went away: listed as unreachable (not an
	// error), and forgotten on request.
	if _, err := install("gpu", rref); err != nil {
		t.Fatal(err)
	}
	if err := remote.Stop(); err != nil {
		t.Fatal(err)
	}
	list, err = (&RunnerList{Target: Target{Cluster: pcl, ConfigPath: src.ConfigPath}, RunnerTimeout: 2 * time.Second}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Runners) != 1 || list.Runners[0].Reachable || list.Runners[0].Ready || !strings.Contains(list.Runners[0].Problem, "unreachable") {
		t.Errorf("list with the runner's cluster gone: %+v", list.Runners)
	}
	_, err = (&RunnerUninstall{AttachmentUninstall: AttachmentUninstall{Target: Target{Cluster: pcl, ConfigPath: src.ConfigPath}, Name: "gpu"}}).Run(ctx)
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--forget") {
		t.Errorf("uninstall with the cluster gone: %v", err)
	}
	if _, err := (&RunnerUninstall{AttachmentUninstall: AttachmentUninstall{Target: Target{Cluster: pcl, ConfigPath: src.ConfigPath}, Name: "gpu", Forget: true}}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st, _ := runnerState(t, platform.Client); len(st.Runners) != 0 {
		t.Errorf("records left after --forget: %v", st.Runners)
	}
}

// spec.runners[] is converged by 'onprem install': on the platform's
// cluster and on another one, after the components; a re-run changes
// nothing; an unreachable runner cluster stops the install before
// anything is touched.
func TestInstallConvergesDeclaredRunners(t *testing.T) {
	t.Parallel() // its own cluster
	platform, remote := testcluster.Start(t), testcluster.Start(t)
	ctx := context.Background()
	body := pipelinesPlatform + "  runners:\n    - name: local\n    - name: remote\n      concurrency: 8\n      cluster: {kubeconfig: " + remote.Kubeconfig + "}\n"
	src, pcl := clusterConfig(t, platform, body)

	res, err := (&Install{Source: src, Cluster: pcl, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runners) != 2 || res.Runners[0].Name != "local" || res.Runners[1].Name != "remote" {
		t.Fatalf("runners = %+v", res.Runners)
	}
	for _, r := range res.Runners {
		if r.Action != apply.Installed || !r.TokenCreated {
			t.Errorf("%s: %+v", r.Name, r)
		}
	}
	if d, err := platform.Client.AppsV1().Deployments("onprem-runner-local").Get(ctx, runner.AgentDeployment, metav1.GetOptions{}); err != nil || d.Status.ReadyReplicas != 1 {
		t.Errorf("local agent: %v", err)
	}
	d, err := remote.Client.AppsV1().Deployments("onprem-runner-remote").Get(ctx, runner.AgentDeployment, metav1.GetOptions{})
	if err != nil || d.Status.ReadyReplicas != 1 {
		t.Fatalf("remote agent: %v", err)
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "ONPREM_RUNNER_CONCURRENCY" && e.Value != "8" {
			t.Errorf("concurrency %s", e.Value)
		}
	}
	reg := secretData(t, platform.Client, "onprem", runner.Registrations)
	st, raw := runnerState(t, platform.Client)
	if len(reg) != 2 || len(st.Runners) != 2 || st.Runners["remote"].Server != remote.RESTConfig.Host || st.Runners["local"].Server != platform.RESTConfig.Host {
		t.Errorf("registrations %d, records %+v", len(reg), st.Runners)
	}
	for _, tok := range reg {
		if bytes.Contains(raw, tok) {
			t.Fatal("a token is in the installation's state")
		}
	}
	if op := st.History[len(st.History)-1]; op.Outcome != state.OutcomeSucceeded || st.Version != "2.8.0" {
		t.Errorf("last operation %+v, version %s", op, st.Version)
	}

	// A converged re-run: no new revision, same tokens.
	res, err = (&Install{Source: src, Cluster: pcl}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Runners {
		if r.Action != apply.Unchanged || r.Revision != 1 || r.TokenCreated {
			t.Errorf("re-run: %+v", r)
		}
	}
	for n, tok := range secretData(t, platform.Client, "onprem", runner.Registrations) {
		if !bytes.Equal(tok, reg[n]) {
			t.Errorf("re-run changed %s's token", n)
		}
	}

	// The runner leaves onprem.yaml: install leaves it alone, and says so.
	src2, _ := clusterConfig(t, platform, pipelinesPlatform+"  runners:\n    - name: local\n")
	res, err = (&Install{Source: src2, Cluster: pcl}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runners) != 1 || !slices.Equal(res.UndeclaredRunners, []string{"remote"}) {
		t.Errorf("runners %+v, undeclared %v", res.Runners, res.UndeclaredRunners)
	}

	// A declared runner on a cluster that cannot be reached: exit 3 before
	// anything is touched.
	kc := unreachableKubeconfig(t)
	src3, _ := clusterConfig(t, platform, pipelinesPlatform+"  runners:\n    - name: far\n      cluster: {kubeconfig: "+kc+"}\n")
	before, _ := runnerState(t, platform.Client)
	_, err = (&Install{Source: src3, Cluster: pcl}).Run(ctx)
	var ue *kube.UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), kc) || !strings.Contains(err.Error(), "spec.runners[0]") {
		t.Errorf("unreachable declared runner: %v", err)
	}
	if after, _ := runnerState(t, platform.Client); len(after.History) != len(before.History) {
		t.Error("an install with an unreachable runner cluster was recorded")
	}

	// A declared runner whose name runs elsewhere: exit 2, before anything
	// is touched.
	src4, _ := clusterConfig(t, platform, pipelinesPlatform+"  runners:\n    - name: remote\n")
	_, err = (&Install{Source: src4, Cluster: pcl}).Run(ctx)
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "spec.runners[0]") || !strings.Contains(err.Error(), remote.RESTConfig.Host) {
		t.Errorf("a declared name that runs elsewhere: %v", err)
	}
	if after, _ := runnerState(t, platform.Client); len(after.History) != len(before.History) {
		t.Error("an install with a clashing runner was recorded")
	}
}

// Air-gapped: the platform and a declared runner installed from a bundle.
// The runner's images are the bundle's, relocated to the private registry
// and pinned by digest; the pull Secret is copied to both of its
// namespaces; its build engine pulls docker.io images through the registry.
func TestRunnerFromABundle(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	reg := testservers.Registry(t)
	ctx := context.Background()
	path, rel := makeBundle(t, t.TempDir(), "2.8.0", reg)

	// The operator's pull Secret, made before the install.
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "onprem"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pull := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "regcred", Namespace: "onprem"}, Type: corev1.SecretTypeDockerConfigJson,
		Data: map[string][]byte{corev1.DockerConfigJsonKey: []byte(`{"auths":{"` + reg + `":{"auth":"cHVsbGVyOnB1bGw="}}}`)}}
	if _, err := c.Client.CoreV1().Secrets("onprem").Create(ctx, pull, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src, cl := clusterConfig(t, c, pipelinesPlatform+
		"  registry: {host: \""+reg+"\", pathPrefix: onprem, insecure: true, pullSecret: regcred}\n  runners:\n    - name: airgap\n")
	src.Bundles = []string{path}
	trustTestKey(t, &src)
	res, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runners) != 1 || res.Runners[0].Action != apply.Installed {
		t.Fatalf("runners = %+v", res.Runners)
	}
	pinned := func(name string) string {
		img, ok := rel.Image(name)
		if !ok || img.Digest == "" {
			t.Fatalf("bundle image %s: %+v", name, img)
		}
		repo, err := images.Relocate(images.Repository(img, "quay.io/codefresh"), reg, "onprem")
		if err != nil {
			t.Fatal(err)
		}
		return repo + ":" + img.Tag + "@" + img.Digest
	}
	for ns, want := range map[string][]string{
		"onprem-runner-airgap":        {pinned(rel.Runner.Images["agent"])},
		"onprem-runner-airgap-engine": {pinned(rel.Runner.Images["engine"])},
	} {
		if got := podImages(t, c, ns); !slices.Equal(got, want) {
			t.Errorf("%s: images %v, want %v", ns, got, want)
		}
		if s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, "regcred", metav1.GetOptions{}); err != nil || !bytes.Equal(s.Data[corev1.DockerConfigJsonKey], pull.Data[corev1.DockerConfigJsonKey]) {
			t.Errorf("%s: the pull Secret was not copied (%v)", ns, err)
		}
	}
	cm, err := c.Client.CoreV1().ConfigMaps("onprem-runner-airgap-engine").Get(ctx, "runner-engine", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if toml := cm.Data["buildkitd.toml"]; !strings.Contains(toml, `mirrors = ["`+reg+`/onprem"]`) || !strings.Contains(toml, `[registry."`+reg+`"]`) {
		t.Errorf("buildkitd.toml:\n%s", toml)
	}
	// The runner list and a runner upgrade work from the bundle too.
	ups, err := (&RunnerUpgrade{AttachmentUpgrade: AttachmentUpgrade{Source: src, Cluster: cl, Names: []string{"airgap"}, Timeout: time.Minute}}).Run(ctx)
	if err != nil || len(ups) != 1 || ups[0].Action != apply.Unchanged {
		t.Errorf("upgrade: %+v %v", ups, err)
	}
}
