//go:build linux

package platform

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/images"
	"onprem.dev/onprem/e2e/kindcluster"
	"onprem.dev/onprem/e2e/refservice"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/internal/fsutil"
)

// env is what the steps of TestPlatform share.
type env struct {
	t          *testing.T
	dir        string
	bin        string
	cluster    *kindcluster.Cluster
	kubeconfig string
	registry   string
	nodeIP     string
	client     *http.Client
	timing     *timing
	steps      []stepTime
	// publicKeyFile is bundle.pub of the key the e2e's bundles are signed
	// with (signingKeys); every configuration trusts it in spec.trust.
	publicKeyFile string
	// haConfig is the high-availability step's onprem.yaml.
	haConfig string
	// built are the images the e2e built; ociLayout is the OCI layout
	// its bundles are made from, and chartRepository the repository that
	// serves the real runtime chart's versions (bundle create).
	built           []images.Image
	ociLayout       string
	chartRepository string
}

type stepTime struct {
	Name string
	Took time.Duration
}

// step runs one named step, logs its duration, and names it when it fails.
func (e *env) step(name string, f func()) {
	e.t.Helper()
	e.t.Logf("=== step: %s", name)
	t0 := time.Now()
	// A step fails when the test turns failed during it (a step after a
	// failed one runs on, and is not blamed).
	failedBefore := e.t.Failed()
	done := false
	defer func() {
		if !done {
			e.t.Logf("=== step FAILED after %s: %s", time.Since(t0).Round(100*time.Millisecond), name)
			e.logStep("FAILED", time.Since(t0), name)
			e.evidence(name)
		}
	}()
	f()
	done = failedBefore || !e.t.Failed()
	took := time.Since(t0)
	e.steps = append(e.steps, stepTime{Name: name, Took: took})
	e.t.Logf("=== step done in %s: %s", took.Round(100*time.Millisecond), name)
	e.logStep("done", took, name)
}

// logStep appends a step's outcome to steps.log in the output folder, so
// that every step's time outlives a run that fails or is stopped (the
// timing figures are written only at the end of a whole run).
func (e *env) logStep(outcome string, took time.Duration, name string) {
	dir := outputDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, "steps.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s\t%s\t%6.1fs\t%s\n", time.Now().UTC().Format(time.RFC3339), outcome, took.Seconds(), name)
}

// buildOnprem builds the onprem binary the test drives.
func buildOnprem(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "onprem")
	cmd := exec.Command("go", "build", "-o", bin, "onprem.dev/onprem/cmd/onprem")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build onprem: %v\n%s", err, out)
	}
	return bin
}

// run runs the onprem binary and returns its stdout, its stderr and its
// error (an *exec.ExitError for a non-zero exit).
func (e *env) run(args ...string) (stdout, stderr string, err error) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	args = append(args, "--log-level", "info")
	cmd := exec.CommandContext(ctx, e.bin, args...)
	cmd.Dir = e.dir
	cmd.Env = append(os.Environ(), "KUBECONFIG="+e.kubeconfig)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	t0 := time.Now()
	err = cmd.Run()
	e.t.Logf("$ onprem %s   (%s, %v)\n%s", strings.Join(args, " "), time.Since(t0).Round(100*time.Millisecond), exitOf(err),
		indent(tailLines(errOut.String(), 15)))
	return out.String(), errOut.String(), err
}

func exitOf(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "exit 0"
	case errors.As(err, &ee):
		return "exit " + strconv.Itoa(ee.ExitCode())
	default:
		return err.Error()
	}
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	return "\t" + strings.ReplaceAll(s, "\n", "\n\t")
}

// onprem runs the binary and fails the test, with the command and the
// tail of its output, when it exits non-zero.
func (e *env) onprem(args ...string) string {
	e.t.Helper()
	stdout, stderr, err := e.run(args...)
	if err != nil {
		e.t.Fatalf("onprem %s: %s\nstderr:\n%s\nstdout:\n%s", strings.Join(args, " "), exitOf(err),
			tailLines(stderr, 60), tailLines(stdout, 40))
	}
	return stdout
}

// onpremJSON runs the binary with -o json and decodes its stdout into v.
func (e *env) onpremJSON(v any, args ...string) {
	e.t.Helper()
	decodeJSON(e.t, []byte(e.onprem(append(args, "-o", "json")...)), v)
}

// onpremFails runs the binary, which must exit non-zero, and returns
// everything it printed.
func (e *env) onpremFails(args ...string) string {
	e.t.Helper()
	stdout, stderr, err := e.run(args...)
	if err == nil {
		e.t.Fatalf("onprem %s succeeded; it had to fail\nstderr:\n%s", strings.Join(args, " "), tailLines(stderr, 40))
	}
	return stderr + stdout
}

// overlay writes a kustomize Component with the given patches (YAML list
// items indented by two spaces) and returns its folder.
func (e *env) overlay(name, patches string) string {
	e.t.Helper()
	d := filepath.Join(e.dir, "overlays", name)
	if err := os.MkdirAll(d, 0o755); err != nil {
		e.t.Fatal(err)
	}
	body := "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n" + patches
	if err := os.WriteFile(filepath.Join(d, "kustomization.yaml"), []byte(body), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return d
}

// writeConfig writes an onprem.yaml for version: the registry the bundles
// were pushed to, the ingress controller on fixed NodePorts, the e2e
// overlay that shrinks CPU requests (two cores run the control plane and
// the whole platform), and extra overlays.
func (e *env) writeConfig(name, version string, extraOverlays ...string) string {
	e.t.Helper()
	overlays := []string{e.overlay("e2e-cpu", cpuPatch("Deployment")+cpuPatch("StatefulSet"))}
	for _, o := range extraOverlays {
		if o != "" {
			overlays = append(overlays, o)
		}
	}
	trust, requireSignatures := "", ""
	if e.publicKeyFile != "" {
		// The bundles are signed and push attached their image
		// signatures: preflight and install refuse any image without one.
		requireSignatures = ", requireSignatures: true"
		pem, err := os.ReadFile(e.publicKeyFile)
		if err != nil {
			e.t.Fatal(err)
		}
		trust = "  trust:\n    - name: e2e vendor\n      publicKey: |\n"
		for l := range strings.Lines(string(pem)) {
			trust += "        " + l
		}
	}
	cfg := fmt.Sprintf(`apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: %q
  namespace: %s
  domain: %s
  registry: {host: %q, pathPrefix: onprem, insecure: true%s}
  ingress: {serviceType: NodePort}
  components:
    ingress:
      values:
        nodePorts: {http: 30080, https: %d}
  overlays: [%s]
  runtimeConfig: {accountId: %s}
`, version, namespace, domain, e.registry, requireSignatures, httpsNodePort, strings.Join(overlays, ", "), e2eAccount) + trust
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return path
}

// signingKeys makes the key pair the e2e's bundles are signed with, in dir,
// which 'onprem bundle create' then uses by itself (ONPREM_KEY_DIR of the
// commands e.onprem runs).
func (e *env) signingKeys(dir string) {
	e.t.Helper()
	e.t.Setenv("ONPREM_KEY_DIR", dir)
	e.onprem("bundle", "keygen")
	e.publicKeyFile = filepath.Join(dir, "bundle.pub")
}

// e2eAccount is the platform account the e2e's runtime registers with.
const e2eAccount = "e2e-account-0001"

// cpuPatch lowers the first container's CPU request of every object of
// kind to 10m: the sizing profile's requests add up to more than the two
// cores of the test machine, which also run the control plane. (The
// ingress controller and the databases cannot keep a larger share here,
// as 'onprem local up' gives them: with a runner installed beside the
// platform, 120m more failed the capacity preflight. Under load, the
// pods' slice's weight in the node, kindcluster.PodsCPUShares, is what
// keeps the path every request takes served.)
func cpuPatch(kind string) string {
	return `  - target: {kind: ` + kind + `}
    patch: |
      - op: replace
        path: /spec/template/spec/containers/0/resources/requests/cpu
        value: 10m
`
}

// cronJobCPUPatch does the same for the scheduled backup's CronJob, in an
// overlay of the configurations with spec.backup only (onprem refuses a
// patch that matches no object): beside a build runner and a GitOps
// runtime on the real chart, the ring's node has less free than its
// 100m.
const cronJobCPUPatch = `  - target: {kind: CronJob}
    patch: |
      - op: replace
        path: /spec/jobTemplate/spec/template/spec/containers/0/resources/requests/cpu
        value: 10m
`

// allReady checks with `onprem status` that the platform is at version and
// every component's release is deployed with all its replicas ready, and
// that no component's live objects have drifted from its release.
func (e *env) allReady(version string) {
	e.t.Helper()
	e.step("every component Ready at "+version, func() {
		var st action.StatusResult
		e.onpremJSON(&st, "status", "--namespace", namespace, "--kubeconfig", e.kubeconfig)
		if st.Version != version {
			e.t.Fatalf("status: version %q, want %s", st.Version, version)
		}
		if len(st.Components) < 10 {
			e.t.Fatalf("status lists %d components", len(st.Components))
		}
		for _, c := range st.Components {
			if c.Release != "deployed" || c.Ready < c.Desired {
				e.t.Errorf("component %s: release %s, %d/%d ready %s", c.Name, c.Release, c.Ready, c.Desired, c.LastError)
			}
			// What onprem applied is what runs.
			if len(c.Drift) > 0 || c.DriftError != "" {
				e.t.Errorf("component %s drifted from its release: %q %s", c.Name, c.Drift, c.DriftError)
			}
		}
		if e.t.Failed() {
			e.t.FailNow()
		}
	})
}

// ingressClient makes the HTTPS client that reaches the platform's domain
// through the ingress controller's NodePort on the node, trusting the CA
// onprem generated.
func (e *env) ingressClient(ctx context.Context) {
	e.t.Helper()
	s, err := e.cluster.Client.CoreV1().Secrets(namespace).Get(ctx, "onprem-tls", metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("the platform's TLS Secret: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.Data["ca.crt"]) {
		e.t.Fatal("onprem-tls has no CA certificate in ca.crt")
	}
	addr := net.JoinHostPort(e.nodeIP, strconv.Itoa(httpsNodePort))
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	e.client = &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, ServerName: domain},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
	}}
}

// request sends one request through the ingress controller, retrying
// while the route is not served yet (the controller picks up endpoints a
// moment after they turn ready).
func (e *env) request(method, path, body string, want int) []byte {
	e.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, err := http.NewRequest(method, "https://"+domain+path, strings.NewReader(body))
		if err != nil {
			e.t.Fatal(err)
		}
		resp, err := e.client.Do(req)
		var data []byte
		if err == nil {
			data, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == want {
				return data
			}
			err = fmt.Errorf("%s: %s", resp.Status, bytes.TrimSpace(data))
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s https://%s%s through the ingress controller (%s:%d): %v", method, domain, path, e.nodeIP, httpsNodePort, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// checkService asks a service, through the ingress controller, for its
// dependencies: it must be the named service at version, ready, with
// every one of deps answering.
func (e *env) checkService(prefix, service, version string, deps ...string) {
	e.t.Helper()
	var h refservice.Health
	decodeJSON(e.t, e.request(http.MethodGet, prefix+"/deps", "", http.StatusOK), &h)
	if h.Service != service || h.Version != version || !h.Ready {
		e.t.Fatalf("%s/deps: %+v, want service %s version %s ready", prefix, h, service, version)
	}
	for _, d := range deps {
		if h.Deps[d] != "ok" {
			e.t.Fatalf("%s/deps: %s is %q: %+v", prefix, d, h.Deps[d], h.Deps)
		}
	}
	e.t.Logf("%s: %s %s ready, dependencies %v", prefix, h.Service, h.Version, h.Deps)
}

// recordTargets are where records go: pipelines-api and gitops-api
// through the ingress controller (MongoDB), audit-manager through the API
// server's service proxy (PostgreSQL; it has no route).
var recordTargets = []struct {
	name, prefix, store string
}{
	{"pipelines-api", "/api", "mongodb"},
	{"gitops-api", "/gitops/api", "mongodb"},
	{"audit-manager", "", "postgresql"},
}

func (e *env) putRecord(ctx context.Context, key, value string) {
	e.t.Helper()
	for _, tg := range recordTargets {
		if tg.prefix != "" {
			e.request(http.MethodPut, tg.prefix+"/records/"+key, value, http.StatusOK)
			continue
		}
		_, err := e.cluster.Client.CoreV1().RESTClient().Put().
			AbsPath("/api/v1/namespaces", namespace, "services", tg.name+":http", "proxy", "records", key).
			Body([]byte(value)).DoRaw(ctx)
		if err != nil {
			e.t.Fatalf("writing record %s to %s: %v", key, tg.name, err)
		}
	}
}

// checkRecords reads every record back from every target's databases.
func (e *env) checkRecords(ctx context.Context, records map[string]string) {
	e.t.Helper()
	for key, want := range records {
		for _, tg := range recordTargets {
			var data []byte
			if tg.prefix != "" {
				data = e.request(http.MethodGet, tg.prefix+"/records/"+key, "", http.StatusOK)
			} else {
				var err error
				data, err = e.cluster.Client.CoreV1().RESTClient().Get().
					AbsPath("/api/v1/namespaces", namespace, "services", tg.name+":http", "proxy", "records", key).DoRaw(ctx)
				if err != nil {
					e.t.Fatalf("reading record %s from %s: %v", key, tg.name, err)
				}
			}
			var got struct {
				Values map[string]string `json:"values"`
			}
			decodeJSON(e.t, data, &got)
			if got.Values[tg.store] != want {
				e.t.Fatalf("record %s in %s's %s: %q, want %q (all: %v)", key, tg.name, tg.store, got.Values[tg.store], want, got.Values)
			}
			for store, v := range got.Values {
				if v != want {
					e.t.Fatalf("record %s in %s's %s: %q, want %q", key, tg.name, store, v, want)
				}
			}
		}
	}
	e.t.Logf("%d record(s) read back from MongoDB (pipelines-api, gitops-api) and PostgreSQL (audit-manager)", len(records))
}

// evidence writes a support bundle of the cluster into the output folder
// ($ONPREM_CACHE/e2e) when a step fails, so that a red run comes with what
// support would ask for.
func (e *env) evidence(step string) {
	if e.bin == "" || e.kubeconfig == "" {
		return
	}
	dir := filepath.Join(outputDir(), "support-bundles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Logf("no support bundle of the failed step: %v", err)
		return
	}
	slug := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, strings.ToLower(step))
	if len(slug) > 60 {
		slug = slug[:60]
	}
	file := filepath.Join(dir, time.Now().UTC().Format("20060102-150405")+"-"+slug+".tar.gz")
	if _, _, err := e.run("support-bundle", "--file", file, "--kubeconfig", e.kubeconfig, "--no-preflight"); err != nil {
		e.t.Logf("no support bundle of the failed step: %v", err)
		return
	}
	e.t.Logf("support bundle of the failed step: %s ('onprem support-bundle analyze %s' reads it)", file, file)
}

// outputDir is where the test leaves what outlives the run (the checkout
// of a CI run is thrown away).
func outputDir() string {
	return filepath.Join(fsutil.CacheRoot(), "e2e")
}
