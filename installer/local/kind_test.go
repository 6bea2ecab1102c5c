//go:build linux

package local

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/e2e/kindcluster"
	"onprem.dev/onprem/e2e/localdemo"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/release"
)

// mongoServices are the services that need a MongoDB database. The kind
// test leaves them out: db-provision runs mongosh for them, and the
// offline MongoDB stand-in (FerretDB, e2e/images) has no mongosh yet.
var mongoServices = []string{"gitops-api", "gitops-ui", "cron-executor", "event-handler"}

// TestLocalUpDown runs Up for real on this machine with no registry: the
// offline kind node image and the platform's images from a docker-archive
// (e2e/localdemo, as 'make demo' does), then checks the install, that the
// platform answers through the host ports mapped to the ingress (routed by
// the Host header and, over HTTPS, by SNI, to platform services), and that
// Down removes the cluster and its files.
//
// The configuration is reduced: the pipelines module and the GitOps
// services that use MongoDB are off (see mongoServices); ingress, the four
// databases, db-provision (PostgreSQL) and four services are installed.
func TestLocalUpDown(t *testing.T) {
	if os.Getenv(kindcluster.SkipEnv) == "1" {
		t.Skipf("%s=1: kind clusters are skipped", kindcluster.SkipEnv)
	}
	ctx := context.Background()
	demo, err := localdemo.Prepare(ctx, localdemo.Options{Log: t.Logf})
	if err != nil {
		t.Fatal(err)
	}

	// Not kindcluster's random "onprem-xxxxxxxx" form: its reaper leaves
	// this cluster alone.
	name := fmt.Sprintf("local-test-%d", os.Getpid())
	dir := t.TempDir()
	kubeconfig, _ := Paths(dir, name)
	t.Cleanup(func() {
		if os.Getenv(kindcluster.KeepEnv) == "1" {
			t.Logf("%s=1: keeping cluster %s: KUBECONFIG=%s; remove it with: onprem local down --name %s", kindcluster.KeepEnv, name, kubeconfig, name)
			return
		}
		if _, err := (&Down{Name: name, Dir: dir, Log: testLog(t)}).Run(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	rels, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel := rels.Latest()
	cfg := filepath.Join(t.TempDir(), "onprem.yaml")
	var comps []string
	for _, c := range localComponents(rel) {
		if !slices.Contains(mongoServices, c) {
			comps = append(comps, c)
		}
	}
	g := generated{Name: name, Version: rel.Version, Domain: DefaultDomain, Components: comps, Kubeconfig: kubeconfig, Path: cfg}
	content := string(g.yaml())
	for _, c := range mongoServices {
		content += "    " + c + ": {enabled: false}\n"
	}
	content += "  modules:\n    pipelines:\n      enabled: false\n"
	write(t, cfg, content)

	ports := freePorts(t)
	u := &Up{
		Name: name, NodeImage: demo.NodeImage, ImageArchives: []string{demo.Archive}, ConfigPath: cfg,
		Ports: ports, Dir: dir, Timeout: 5 * time.Minute, Log: testLog(t), Reporter: apply.NewLineReporter(testWriter{t}),
	}
	t0 := time.Now()
	res, err := u.Run(ctx)
	if err != nil {
		t.Fatalf("local up: %v", err)
	}
	t.Logf("local up took %s (install %s)", time.Since(t0).Round(time.Second), res.Install.Elapsed.Round(time.Second))

	// The result.
	wantURL := fmt.Sprintf("https://onprem.localhost:%d", ports.HTTPS)
	if res.URL != wantURL || res.Cluster != name || res.Kubeconfig != kubeconfig || res.Config != cfg || res.Generated ||
		res.NodeImage != demo.NodeImage || res.Version != rel.Version || res.Namespace != "onprem" {
		t.Errorf("result: %+v", res)
	}
	installed := map[string]bool{}
	for _, c := range res.Install.Components {
		if c.Action == apply.Failed || c.Error != "" {
			t.Errorf("component %s: %s %s", c.Name, c.Action, c.Error)
		}
		installed[c.Name] = true
	}
	for _, c := range []string{"ingress", "mongodb", "postgresql", "redis", "rabbitmq", "db-provision", "argo-hub", "api-events", "audit-manager", "analytics-reporter"} {
		if !installed[c] {
			t.Errorf("%s was not installed: %v", c, installed)
		}
	}

	// The installation as 'onprem status' sees it, through the kubeconfig.
	st, err := (&action.Status{Target: action.Target{Cluster: kube.Options{Kubeconfig: kubeconfig}}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Installed || st.Version != rel.Version || st.LastOperation == nil || st.LastOperation.Outcome != "succeeded" {
		t.Errorf("status: installed %v, version %s, last operation %+v", st.Installed, st.Version, st.LastOperation)
	}
	for _, c := range st.Components {
		if c.Ready < c.Desired {
			t.Errorf("status: %s %d/%d ready", c.Name, c.Ready, c.Desired)
		}
	}

	// The platform answers on this machine's ports: plain HTTP with the
	// Host header, and HTTPS with SNI and the generated certificate.
	checkService(t, ports.ListenAddress, ports.HTTP, "http://onprem.localhost/argo-hub/version", "argo-hub", rel.Version)
	checkService(t, ports.ListenAddress, ports.HTTPS, "https://onprem.localhost/api/events/version", "api-events", rel.Version)

	// Down removes the cluster and the kubeconfig, and says so once.
	d := &Down{Name: name, Dir: dir, Log: testLog(t)}
	dres, err := d.Run(ctx)
	if err != nil || !dres.Deleted || !slices.Contains(dres.Removed, kubeconfig) {
		t.Fatalf("local down: %+v %v", dres, err)
	}
	prov, _, err := connectKind(ctx, testLog(t))
	if err != nil {
		t.Fatal(err)
	}
	clusters, err := prov.List()
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(clusters, name) {
		t.Errorf("cluster %s is still there: %v", name, clusters)
	}
	if _, err := os.Stat(kubeconfig); !os.IsNotExist(err) {
		t.Errorf("kubeconfig %s: %v", kubeconfig, err)
	}
	if _, err := os.Stat(cfg); err != nil {
		t.Errorf("down removed the operator's configuration: %v", err)
	}
	if conn, err := net.DialTimeout("tcp", net.JoinHostPort(ports.ListenAddress, fmt.Sprint(ports.HTTPS)), time.Second); err == nil {
		conn.Close()
		t.Errorf("port %d still answers", ports.HTTPS)
	}
	dres, err = d.Run(ctx)
	if err != nil || dres.Deleted {
		t.Errorf("second local down: %+v %v", dres, err)
	}
}

// checkService asks url through the host port (the platform's domain is
// not resolved: the connection goes to the mapped address, the Host header
// and SNI carry the domain) and checks that the named service answered.
func checkService(t *testing.T, addr string, port int, url, service, version string) {
	t.Helper()
	target := net.JoinHostPort(addr, fmt.Sprint(port))
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	var peerNames []string
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, target)
			},
			TLSClientConfig: &tls.Config{
				ServerName:         "onprem.localhost",
				InsecureSkipVerify: true, // the platform's own CA, generated in the cluster
				VerifyConnection: func(cs tls.ConnectionState) error {
					if len(cs.PeerCertificates) > 0 {
						peerNames = cs.PeerCertificates[0].DNSNames
					}
					return nil
				},
			},
		},
	}
	var last string
	// The ingress controller may take a moment to see the last routes.
	for deadline := time.Now().Add(time.Minute); ; {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var got struct{ Service, Version string }
			if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &got) == nil && got.Service == service && got.Version == version {
				if strings.HasPrefix(url, "https:") && !slices.Contains(peerNames, "onprem.localhost") {
					t.Errorf("%s: the certificate names %v, not onprem.localhost", url, peerNames)
				}
				t.Logf("%s via %s: %s", url, target, strings.TrimSpace(string(body)))
				return
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Errorf("%s via %s: want %s %s, last answer: %s", url, target, service, version, last)
			return
		}
		time.Sleep(2 * time.Second)
	}
}
