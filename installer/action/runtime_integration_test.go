package action

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/configrepo"
	"onprem.dev/onprem/installer/gitops"
	"onprem.dev/onprem/installer/gitops/gitopstest"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
)

// gitopsPlatform is the smallest platform runtimes belong to: the GitOps
// module, no pipelines module.
const gitopsPlatform = "  version: 2.8.0\n  domain: ci.example.com\n  modules:\n    pipelines: {enabled: false}\n"

func tokenFile(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "git-token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// GitOps runtimes on two clusters of the integration ring, with a real Git
// server that checks the token and the runtime chart served from an OCI
// registry on loopback: a refused token leaves nothing behind; the first
// runtime initialises the configuration repository and holds the
// configuration; one runtime per cluster and unique names; Git sources as
// Applications; a managed cluster; designate-config; the configuration
// runtime cannot go first; uninstall; spec.runtimes[] converged by install.
func TestRuntimesOnTwoClusters(t *testing.T) {
	platform, remote := testcluster.Start(t), testcluster.Start(t)
	ctx := context.Background()
	const token = "s3cret-git-token-0123456789"
	git := testservers.StartGit(t, token)
	configURL := git.NewRepo(t, "config")
	appsURL := git.NewRepo(t, "apps")
	chartRepo := gitopstest.ServeOCI(t, "0.26.0")
	fetch := RuntimeFetch{ChartRepository: chartRepo}
	fetch.Chart.PlainHTTP = true

	src, pcl := clusterConfig(t, platform, gitopsPlatform+"  runtimeConfig:\n    repository: {url: "+configURL+", path: platform}\n    accountId: acc-1\n")
	if _, err := (&Install{Source: src, Cluster: pcl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	rref := config.ClusterRef{Kubeconfig: remote.Kubeconfig}
	const platformToken = "platform-token-7c1e5b"
	platformTokenPath := tokenFile(t, platformToken)
	installWith := func(name string, ref config.ClusterRef, tokenPath, platformTokenPath string) (*gitops.Result, error) {
		return (&RuntimeInstall{Source: src, Cluster: pcl, Name: name, RuntimeCluster: ref, TokenFile: tokenPath, TokenEnv: "-",
			PlatformTokenFile: platformTokenPath, PlatformTokenEnv: "-", Fetch: fetch, Timeout: 2 * time.Minute}).Run(ctx)
	}
	install := func(name string, ref config.ClusterRef, tokenPath string) (*gitops.Result, error) {
		return installWith(name, ref, tokenPath, platformTokenPath)
	}
	target := Target{Cluster: pcl, ConfigPath: src.ConfigPath}
	records := func() map[string]bool {
		st, _ := runnerState(t, platform.Client)
		out := map[string]bool{}
		for n := range st.Runtimes {
			out[n] = true
		}
		return out
	}

	// A refused token: named as such, exit code 2, nothing created.
	_, err := install("", rref, tokenFile(t, "wrong-token"))
	var ie *InputError
	var ae *configrepo.AuthError
	if !errors.As(err, &ie) || !errors.As(err, &ae) || !strings.Contains(err.Error(), "refused authentication") || strings.Contains(err.Error(), "wrong-token") {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := remote.Client.CoreV1().Namespaces().Get(ctx, "codefresh", metav1.GetOptions{}); err == nil {
		t.Error("a refused token left the runtime's namespace behind")
	}
	if secrets, _ := remote.Client.CoreV1().Secrets("").List(ctx, metav1.ListOptions{LabelSelector: gitops.LabelRuntime}); len(secrets.Items) != 0 {
		t.Errorf("a refused token left Secrets behind: %d", len(secrets.Items))
	}
	if len(records()) != 0 {
		t.Errorf("a refused token left a record: %v", records())
	}
	// No token at all.
	if _, err := install("", rref, ""); !errors.As(err, &ie) || !strings.Contains(err.Error(), "--git-token-file") {
		t.Errorf("no token: %v", err)
	}

	// No platform token: named, nothing created.
	if _, err := installWith("", rref, tokenFile(t, token), ""); !errors.As(err, &ie) || !strings.Contains(err.Error(), "a platform token is required") ||
		!strings.Contains(err.Error(), "--platform-token-file") {
		t.Errorf("no platform token: %v", err)
	}
	if _, err := remote.Client.CoreV1().Namespaces().Get(ctx, "codefresh", metav1.GetOptions{}); err == nil {
		t.Error("a missing platform token left the runtime's namespace behind")
	}

	// The first runtime, default name, on the remote cluster.
	res, err := install("", rref, tokenFile(t, token))
	if err != nil {
		t.Fatalf("%v: %+v", err, res)
	}
	if res.Name != "codefresh" || res.Action != apply.Installed || res.Namespace != "codefresh" || res.ConfigRuntime != "codefresh" || res.RepositoryCommit == "" {
		t.Errorf("first runtime: %+v", res)
	}
	kept := secretData(t, remote.Client, "codefresh", render.RuntimeGitCredentials)
	if string(kept["password"]) != token || string(kept["url"]) != configURL {
		t.Errorf("the Git credentials Secret: url %q", kept["url"])
	}
	st, raw := runnerState(t, platform.Client)
	if bytes.Contains(raw, []byte(token)) {
		t.Error("the Git token is in the installation's state")
	}
	if st.RuntimeConfig == nil || st.RuntimeConfig.ConfigRuntime != "codefresh" || st.RuntimeConfig.Path != "platform" || st.Runtimes["codefresh"].Status != "deployed" {
		t.Errorf("state: %+v %+v", st.RuntimeConfig, st.Runtimes)
	}
	repo := configrepo.Remote{URL: configURL, Path: "platform", Token: token}
	if who, err := configrepo.ConfigRuntime(ctx, repo); err != nil || who != "codefresh" {
		t.Errorf("the repository designates %q (%v)", who, err)
	}
	for _, dep := range []string{"server", "app-proxy"} {
		d, err := remote.Client.AppsV1().Deployments("codefresh").Get(ctx, dep, metav1.GetOptions{})
		if err != nil || d.Status.ReadyReplicas != 1 {
			t.Errorf("Deployment codefresh/%s: %v", dep, err)
		}
	}
	// The upstream contract, in the installed objects: the platform token
	// and the platform's CA (self-signed here) on the runtime's cluster,
	// referenced by the chart; the runtime's name, the platform's URL and
	// account, its designation.
	if got := secretData(t, remote.Client, "codefresh", render.RuntimePlatformToken); string(got[render.RuntimePlatformTokenKey]) != platformToken {
		t.Error("the platform token Secret does not hold the token given")
	}
	platformCA := secretData(t, platform.Client, "onprem", "onprem-tls")["ca.crt"]
	if got := secretData(t, remote.Client, "codefresh", render.RuntimePlatformCA); len(platformCA) == 0 || !bytes.Equal(got[render.RuntimePlatformCAKey], platformCA) {
		t.Error("the runtime's cluster does not hold the platform's CA")
	}
	if _, raw := runnerState(t, platform.Client); bytes.Contains(raw, []byte(platformToken)) {
		t.Error("the platform token is in the installation's state")
	}
	proxy, err := remote.Client.AppsV1().Deployments("codefresh").Get(ctx, "app-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, e := range proxy.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
		if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil {
			env[e.Name] = "secret:" + r.SecretKeyRef.Name + "/" + r.SecretKeyRef.Key
		}
	}
	for k, v := range map[string]string{
		"RUNTIME_NAME": "codefresh", "CODEFRESH_URL": "https://ci.example.com", "CODEFRESH_ACCOUNT_ID": "acc-1", "IS_CONFIGURATION_RUNTIME": "true",
		"CODEFRESH_USER_TOKEN": "secret:" + render.RuntimePlatformToken + "/" + render.RuntimePlatformTokenKey,
		"GIT_PASSWORD":         "secret:" + render.RuntimeGitCredentials + "/password",
		"NODE_EXTRA_CA_CERTS":  "/etc/ssl/platform/" + render.RuntimePlatformCAKey,
	} {
		if env[k] != v {
			t.Errorf("app-proxy %s = %q, want %q", k, env[k], v)
		}
	}

	// Converged re-run: no new revision, nothing pushed; the kept token is
	// reused.
	again, err := install("codefresh", rref, "")
	if err != nil {
		t.Fatal(err)
	}
	if again.Action != apply.Unchanged || again.RepositoryCommit != "" {
		t.Errorf("re-run: %+v", again)
	}

	// One runtime per cluster; names unique in the installation.
	if _, err := install("edge", rref, tokenFile(t, token)); !errors.As(err, &ie) || !strings.Contains(err.Error(), "already runs runtime codefresh") {
		t.Errorf("second runtime on a cluster: %v", err)
	}
	if _, err := install("codefresh", config.ClusterRef{}, tokenFile(t, token)); !errors.As(err, &ie) || !strings.Contains(err.Error(), "names are unique") {
		t.Errorf("a name installed elsewhere: %v", err)
	}
	// An unreachable runtime cluster: named, before anything is touched.
	var ue *kube.UnreachableError
	if _, err := install("far", config.ClusterRef{Kubeconfig: unreachableKubeconfig(t)}, tokenFile(t, token)); !errors.As(err, &ue) {
		t.Errorf("unreachable runtime cluster: %v", err)
	}

	// A second runtime on the platform's cluster.
	if _, err := install("edge", config.ClusterRef{}, tokenFile(t, token)); err != nil {
		t.Fatal(err)
	}
	list, err := (&RuntimeList{Target: target}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Runtimes) != 2 || list.ConfigRuntime != "codefresh" {
		t.Fatalf("list: %+v", list)
	}
	for _, s := range list.Runtimes {
		if !s.Reachable || !s.Ready || s.Release != "deployed" || s.Config != (s.Name == "codefresh") {
			t.Errorf("list: %+v", s)
		}
	}
	// Both upgraded at the installed version, each on its recorded
	// cluster with the tokens kept there: nothing changes.
	ups, err := (&RuntimeUpgrade{AttachmentUpgrade: AttachmentUpgrade{Source: src, Cluster: pcl, All: true, Timeout: 2 * time.Minute}, Fetch: fetch}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	servers := map[string]string{}
	for _, s := range list.Runtimes {
		servers[s.Name] = s.Server
	}
	if len(ups) != 2 {
		t.Errorf("runtime upgrade --all upgraded %d runtimes, want 2: %+v", len(ups), ups)
	}
	for _, u := range ups {
		if u.Action != apply.Unchanged || u.Error != "" || u.Server == "" || u.Server != servers[u.Name] {
			t.Errorf("runtime upgrade --all, %s: %+v; want unchanged, on %s", u.Name, u, servers[u.Name])
		}
	}

	// Git sources: an Application each.
	gs, err := (&GitSourceAdd{Target: target, Source: gitops.GitSourceOptions{Runtime: "codefresh", Name: "apps",
		Repository: config.GitRepository{URL: appsURL, Path: "prod"}}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gs.URL != appsURL || gs.Path != "prod" || gs.Destination != "codefresh" {
		t.Errorf("git source: %+v", gs)
	}
	dc, err := dynamic.NewForConfig(remote.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	app, err := dc.Resource(gitops.Applications).Namespace("codefresh").Get(ctx, "apps", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if repoURL, _, _ := unstructured.NestedString(app.Object, "spec", "source", "repoURL"); repoURL != appsURL {
		t.Errorf("Application source %q", repoURL)
	}
	// As the upstream runtime expects it: in the runtime's project, which
	// exists, labelled as a Git source.
	if project, _, _ := unstructured.NestedString(app.Object, "spec", "project"); project != "codefresh" || app.GetLabels()[gitops.LabelEntity] != gitops.EntityGitSource {
		t.Errorf("Application project %q, labels %v", project, app.GetLabels())
	}
	if _, err := dc.Resource(gitops.AppProjects).Namespace("codefresh").Get(ctx, "codefresh", metav1.GetOptions{}); err != nil {
		t.Errorf("the runtime's AppProject: %v", err)
	}
	if _, err := (&GitSourceAdd{Target: target, Source: gitops.GitSourceOptions{Runtime: "codefresh", Name: "nowhere",
		Repository: config.GitRepository{URL: git.URL + "/missing.git"}}}).Run(ctx); err == nil {
		t.Error("a git source in a repository that does not exist was accepted")
	}
	sources, err := (&GitSourceList{Target: target, Runtime: "codefresh"}).Run(ctx)
	if err != nil || len(sources) != 1 || sources[0].Name != "apps" {
		t.Errorf("git sources: %+v, %v", sources, err)
	}
	if err := (&GitSourceRemove{Target: target, Runtime: "codefresh", Name: "apps"}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := (&GitSourceRemove{Target: target, Runtime: "codefresh", Name: "apps"}).Run(ctx); !errors.As(err, &ie) {
		t.Errorf("removing a source twice: %v", err)
	}

	// A managed cluster: the platform's cluster, registered with the
	// remote runtime.
	added, err := (&RuntimeClusterAdd{ManagedClusterChange: ManagedClusterChange{Target: target, Runtime: "codefresh", Name: "platform", External: config.ClusterRef{Kubeconfig: platform.Kubeconfig}, Timeout: time.Minute}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if added.Server != platform.RESTConfig.Host {
		t.Errorf("managed cluster: %+v", added)
	}
	health, err := (&RuntimeClusterList{Target: target, Runtime: "codefresh"}).Run(ctx)
	if err != nil || len(health) != 1 || health[0].Health != "Healthy" {
		t.Errorf("managed clusters: %+v, %v", health, err)
	}
	if _, err := (&RuntimeClusterAdd{ManagedClusterChange: ManagedClusterChange{Target: target, Runtime: "codefresh", Name: "far", External: config.ClusterRef{Kubeconfig: unreachableKubeconfig(t)}}}).Run(ctx); !errors.As(err, &ue) {
		t.Errorf("unreachable managed cluster: %v", err)
	}
	if _, err := (&RuntimeClusterRemove{ManagedClusterChange: ManagedClusterChange{Target: target, Runtime: "codefresh", Name: "platform", External: config.ClusterRef{Kubeconfig: platform.Kubeconfig}}}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if health, err := (&RuntimeClusterList{Target: target, Runtime: "codefresh"}).Run(ctx); err != nil || len(health) != 0 {
		t.Errorf("managed clusters after remove: %+v, %v", health, err)
	}

	// The configuration runtime goes last, or after a designate-config.
	_, err = (&RuntimeUninstall{AttachmentUninstall: AttachmentUninstall{Target: target, Name: "codefresh"}}).Run(ctx)
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "onprem runtime designate-config edge") {
		t.Fatalf("uninstalling the configuration runtime first: %v", err)
	}
	d, err := (&RuntimeDesignate{Target: target, Name: "edge"}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.Previous != "codefresh" || d.ConfigRuntime != "edge" || d.RepositoryCommit == "" || d.Next != "onprem runtime upgrade codefresh edge -c onprem.yaml" {
		t.Errorf("designate: %+v", d)
	}
	if who, err := configrepo.ConfigRuntime(ctx, repo); err != nil || who != "edge" {
		t.Errorf("the repository designates %q (%v)", who, err)
	}
	un, err := (&RuntimeUninstall{AttachmentUninstall: AttachmentUninstall{Target: target, Name: "codefresh"}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(un.Removed) == 0 {
		t.Errorf("uninstall: %+v", un)
	}
	if _, err := remote.Client.CoreV1().Namespaces().Get(ctx, "codefresh", metav1.GetOptions{}); err == nil {
		t.Error("the runtime's namespace is still there")
	}
	if _, err := remote.Client.CoreV1().Secrets("codefresh").Get(ctx, render.RuntimeGitCredentials, metav1.GetOptions{}); err == nil {
		t.Error("the Git token is still there")
	}
	if got := records(); len(got) != 1 || !got["edge"] {
		t.Errorf("records after uninstall: %v", got)
	}

	// spec.runtimes[]: install converges them, with their Git sources; the
	// token comes from the environment variable the file names.
	t.Setenv("RUNTIME_GIT_TOKEN", token)
	declared := gitopsPlatform + "  runtimeConfig:\n    repository: {url: " + configURL + ", path: platform}\n    configRuntime: edge\n" +
		"    accountId: acc-1\n    platformToken: {file: " + platformTokenPath + "}\n" +
		"  runtimes:\n    - name: edge\n      gitToken: {env: RUNTIME_GIT_TOKEN}\n      gitSources:\n        - name: apps\n          repository: {url: " + appsURL + ", path: staging}\n" +
		"    - name: codefresh\n      gitToken: {env: RUNTIME_GIT_TOKEN}\n      cluster: {kubeconfig: " + remote.Kubeconfig + "}\n"
	src2, _ := clusterConfig(t, platform, declared)
	ires, err := (&Install{Source: src2, Cluster: pcl, Timeout: 2 * time.Minute, RuntimeFetch: fetch}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// edge was installed while codefresh held the configuration: the
	// converge tells its chart that it holds it now (a new revision).
	if len(ires.Runtimes) != 2 || ires.Runtimes[0].Action != apply.Upgraded || ires.Runtimes[1].Action != apply.Installed || ires.Runtimes[1].ConfigRuntime != "edge" {
		t.Errorf("install's runtimes: %+v", ires.Runtimes)
	}
	edgeProxy, err := platform.Client.AppsV1().Deployments("edge").Get(ctx, "app-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range edgeProxy.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "IS_CONFIGURATION_RUNTIME" && e.Value != "true" {
			t.Errorf("edge's chart was not told it holds the configuration: %s=%s", e.Name, e.Value)
		}
	}
	sources, err = (&GitSourceList{Target: target, Runtime: "edge"}).Run(ctx)
	if err != nil || len(sources) != 1 || sources[0].Path != "staging" {
		t.Errorf("declared git sources: %+v, %v", sources, err)
	}
}
