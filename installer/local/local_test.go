package local

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

var testPorts = Ports{HTTP: 8080, HTTPS: 8443, ListenAddress: "127.0.0.1"}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// noEnv is an environment with no ONPREM_* variable.
var noEnv = envconfig.MapLookuper(map[string]string{})

func TestKindConfigDefault(t *testing.T) {
	c, err := kindConfig(nil, "demo", testPorts, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.Kind != "Cluster" || c.APIVersion != "kind.x-k8s.io/v1alpha4" || c.Name != "demo" {
		t.Errorf("type and name: %+v", c.TypeMeta)
	}
	if len(c.Nodes) != 1 || c.Nodes[0].Role != v1alpha4.ControlPlaneRole {
		t.Fatalf("nodes: %+v", c.Nodes)
	}
	want := []v1alpha4.PortMapping{
		{ContainerPort: 30080, HostPort: 8080, ListenAddress: "127.0.0.1", Protocol: "TCP"},
		{ContainerPort: 30443, HostPort: 8443, ListenAddress: "127.0.0.1", Protocol: "TCP"},
	}
	if !reflect.DeepEqual(c.Nodes[0].ExtraPortMappings, want) {
		t.Errorf("port mappings: %+v", c.Nodes[0].ExtraPortMappings)
	}
	if len(c.KubeadmConfigPatches) != 0 || len(c.ContainerdConfigPatches) != 0 {
		t.Errorf("patches on a cgroup v2 host: %v %v", c.KubeadmConfigPatches, c.ContainerdConfigPatches)
	}
	// What kind is given is valid YAML of its v1alpha4 API.
	data, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back v1alpha4.Cluster
	if err := yaml.UnmarshalStrict(data, &back); err != nil {
		t.Errorf("round trip: %v\n%s", err, data)
	}

	c, err = kindConfig(nil, "demo", Ports{HTTP: 80, HTTPS: 443, ListenAddress: "0.0.0.0"}, true)
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(c.KubeadmConfigPatches, "---\n")
	for _, s := range []string{"failCgroupV1: false", "kind: InitConfiguration", "kind: JoinConfiguration", "SystemVerification"} {
		if !strings.Contains(joined, s) {
			t.Errorf("cgroup v1 patches lack %q:\n%s", s, joined)
		}
	}
	if m := c.Nodes[0].ExtraPortMappings; m[0].HostPort != 80 || m[1].HostPort != 443 || m[0].ListenAddress != "0.0.0.0" {
		t.Errorf("other ports: %+v", m)
	}
}

func TestKindConfigFromFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kind.yaml")
	write(t, path, `kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
name: ignored
nodes:
- role: worker
- role: control-plane
  extraPortMappings:
  - {containerPort: 5000, hostPort: 5000}
containerdConfigPatches:
- |
  [plugins."io.containerd.cri.v1.images".registry]
  config_path = "/etc/containerd/certs.d"
`)
	base, err := readKindConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kindConfig(base, "demo", testPorts, true)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "demo" || len(c.Nodes) != 2 || len(c.ContainerdConfigPatches) != 1 || len(c.KubeadmConfigPatches) != 3 {
		t.Errorf("merged: name %s, %d nodes, %d containerd patches, %d kubeadm patches", c.Name, len(c.Nodes), len(c.ContainerdConfigPatches), len(c.KubeadmConfigPatches))
	}
	if len(c.Nodes[0].ExtraPortMappings) != 0 {
		t.Errorf("the worker got port mappings: %+v", c.Nodes[0].ExtraPortMappings)
	}
	if m := c.Nodes[1].ExtraPortMappings; len(m) != 3 || m[0].ContainerPort != 5000 || m[1].ContainerPort != HTTPNodePort || m[2].ContainerPort != HTTPSNodePort {
		t.Errorf("control-plane mappings: %+v", m)
	}
	if len(base.Nodes[1].ExtraPortMappings) != 1 || len(base.KubeadmConfigPatches) != 0 || base.Name != "ignored" {
		t.Error("kindConfig changed its base")
	}

	// A mapping of the ingress's node port is refused, naming it.
	base.Nodes[1].ExtraPortMappings = append(base.Nodes[1].ExtraPortMappings, v1alpha4.PortMapping{ContainerPort: HTTPSNodePort, HostPort: 443})
	_, err = kindConfig(base, "demo", testPorts, false)
	wantInput(t, err, "--kind-config", "containerPort 30443", "--https-port")
	// No control-plane node.
	_, err = kindConfig(&v1alpha4.Cluster{Nodes: []v1alpha4.Node{{Role: v1alpha4.WorkerRole}}}, "demo", testPorts, false)
	wantInput(t, err, "--kind-config", "control-plane")
}

func TestReadKindConfigRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		content string
		want    []string
	}{
		"missing":       {"", []string{"--kind-config", "no such file"}},
		"wrong-version": {"kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha3\n", []string{"--kind-config", "v1alpha3", "kind.x-k8s.io/v1alpha4"}},
		"unknown-field": {"kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodez: []\n", []string{"--kind-config", "nodez"}},
		"onprem-yaml":   {"apiVersion: onprem.dev/v1alpha1\nkind: Installation\n", []string{"--kind-config", "want kind: Cluster"}},
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, name+".yaml")
			if c.content != "" {
				write(t, path, c.content)
			}
			_, err := readKindConfig(path)
			wantInput(t, err, c.want...)
		})
	}
}

func TestGeneratedConfigInstallsOnTheMappedPorts(t *testing.T) {
	dir := t.TempDir()
	rels, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel := rels.Latest()
	path := filepath.Join(dir, "demo.yaml")
	g := generated{Name: "demo", Version: rel.Version, Domain: DefaultDomain, Components: localComponents(rel), Kubeconfig: "/k", Path: path}
	write(t, path, string(g.yaml()))

	src := action.Source{ConfigPath: path, Lookup: lookup(noEnv)}
	l, err := src.Load(context.Background())
	if err != nil {
		t.Fatalf("the generated configuration is invalid: %v\n%s", err, g.yaml())
	}
	defer l.Close()
	in := l.Installation
	if in.Spec.Version != rel.Version || in.Spec.Domain != "onprem.localhost" || in.Metadata.Name != "demo" ||
		in.Spec.Ingress.Mode != config.IngressModeInstall || in.Spec.Ingress.ServiceType != config.ServiceTypeNodePort {
		t.Errorf("generated configuration: %+v", in.Spec)
	}
	if diffs, err := checkServing(context.Background(), action.Source{ConfigPath: path, Lookup: noEnv}); err != nil || len(diffs) != 0 {
		t.Errorf("checkServing of the generated file: %v %v", diffs, err)
	}

	res, err := render.Render(context.Background(), l.RenderOptions(nodePortSets()))
	if err != nil {
		t.Fatal(err)
	}
	var svc, lowered, pods int
	for _, c := range res.Components {
		for _, o := range c.Objects {
			switch o.GetKind() {
			case "Service":
				if c.Name != "ingress" {
					continue
				}
				spec, _ := o.Object["spec"].(map[string]any)
				ports, _ := spec["ports"].([]any)
				got := map[string]string{}
				for _, p := range ports {
					pm := p.(map[string]any)
					got[pm["name"].(string)] = toString(pm["nodePort"])
				}
				if spec["type"] != "NodePort" || got["web"] != "30080" || got["websecure"] != "30443" {
					t.Errorf("ingress Service: type %v, node ports %v", spec["type"], got)
				}
				svc++
			case "Deployment", "StatefulSet", "Job":
				pods++
				tmpl := nested(o.Object, "spec", "template", "spec")
				for _, ct := range tmpl["containers"].([]any) {
					req := nested(ct.(map[string]any), "resources", "requests")
					want := "10m"
					if c.Name == "ingress" || c.Name == "mongodb" || c.Name == "postgresql" {
						want = "50m" // the path every request takes keeps a larger share
					}
					if req["cpu"] == want {
						lowered++
					} else {
						t.Errorf("%s %s of %s asks for CPU %v, want %s", o.GetKind(), o.GetName(), c.Name, req["cpu"], want)
					}
				}
			}
		}
	}
	if svc != 1 || pods < 15 || lowered < pods {
		t.Errorf("%d ingress Services, %d workloads, %d containers with lowered CPU requests", svc, pods, lowered)
	}
}

func TestCheckServingNamesWhatTheFileLacks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "onprem.yaml")
	write(t, path, string(config.Starter("2.8.0")))
	diffs, err := checkServing(context.Background(), action.Source{ConfigPath: path, Lookup: noEnv})
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(diffs, "\n")
	for _, s := range []string{"spec.ingress.serviceType: NodePort", "nodePorts: {http: 30080, https: 30443}"} {
		if !strings.Contains(joined, s) {
			t.Errorf("diffs lack %q: %v", s, diffs)
		}
	}
}

// fakeProvider stands in for kind's provider.
type fakeProvider struct {
	clusters  []string
	created   []string
	deleted   []string
	deleteKC  string
	createErr error
}

func (f *fakeProvider) List() ([]string, error) { return f.clusters, nil }
func (f *fakeProvider) Create(name string, _ ...cluster.CreateOption) error {
	f.created = append(f.created, name)
	return f.createErr
}
func (f *fakeProvider) Delete(name, kc string) error {
	f.deleted, f.deleteKC = append(f.deleted, name), kc
	return nil
}
func (f *fakeProvider) ListInternalNodes(string) ([]nodes.Node, error) {
	return nil, errors.New("fake: no nodes")
}

func connected(p provider) connectFunc {
	return func(context.Context, *slog.Logger) (provider, bool, error) { return p, false, nil }
}

func TestUpRefusesBadInputBeforeTouchingAnything(t *testing.T) {
	dir := t.TempDir()
	archive := filepath.Join(dir, "images.tar")
	write(t, archive, "x")
	unknown := "9.9.9"
	for name, c := range map[string]struct {
		up   Up
		want []string
	}{
		"missing archive":     {Up{ImageArchives: []string{archive, filepath.Join(dir, "nope.tar")}}, []string{"--image-archive", "nope.tar", "no such file", "docker save"}},
		"archive is a folder": {Up{ImageArchives: []string{dir}}, []string{"--image-archive", "not a file"}},
		"bad name":            {Up{Name: "My_Cluster"}, []string{"--name", "My_Cluster", "lower-case"}},
		"same ports":          {Up{Ports: Ports{HTTP: 9000, HTTPS: 9000}}, []string{"--http-port", "--https-port", "9000"}},
		"port out of range":   {Up{Ports: Ports{HTTPS: 70000}}, []string{"--https-port 70000", "between 1 and 65535"}},
		"bad listen address":  {Up{Ports: Ports{ListenAddress: "localhost"}}, []string{"--listen-address", "not an IP"}},
		"missing config":      {Up{ConfigPath: filepath.Join(dir, "missing.yaml")}, []string{"--config", "missing.yaml", "config init"}},
		"missing kind config": {Up{KindConfig: filepath.Join(dir, "kind.yaml")}, []string{"--kind-config", "kind.yaml"}},
		"unknown version":     {Up{Overrides: config.Overrides{Version: &unknown}}, []string{"--platform-version", "9.9.9"}},
		"every problem at once": {Up{Name: "Bad_Name", Ports: Ports{HTTP: 9000, HTTPS: 9000}, ImageArchives: []string{dir}, Overrides: config.Overrides{Version: &unknown}},
			[]string{"--name", "--http-port and --https-port", "--image-archive", "--platform-version"}},
	} {
		t.Run(name, func(t *testing.T) {
			u := c.up
			// Free ports where the case sets none: the refusal must not
			// depend on 8080 and 8443 being free (a demo cluster keeps them).
			if u.Ports == (Ports{}) {
				u.Ports = freePorts(t)
			}
			u.Dir, u.Log, u.Lookup = filepath.Join(dir, "state-"+strings.ReplaceAll(name, " ", "-")), quiet(), noEnv
			fake := &fakeProvider{}
			u.connect = connected(fake)
			res, err := u.Run(context.Background())
			if res != nil {
				t.Errorf("a result: %+v", res)
			}
			var ie *action.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("want an input error (exit 2), got %T: %v", err, err)
			}
			for _, s := range c.want {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("the error lacks %q: %v", s, err)
				}
			}
			if len(fake.created) > 0 {
				t.Error("a cluster was created")
			}
			if entries, _ := os.ReadDir(u.Dir); len(entries) > 0 {
				t.Errorf("files were written: %v", entries)
			}
		})
	}
}

func TestUpChecksTheConfigurationBeforeTouchingAnything(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "onprem.yaml")
	write(t, cfg, string(config.Starter("2.8.0")))
	unknown := "9.9.9"
	fake := &fakeProvider{}
	u := &Up{ConfigPath: cfg, Overrides: config.Overrides{Version: &unknown}, Dir: filepath.Join(dir, "state"), Log: quiet(), Lookup: noEnv, connect: connected(fake)}
	_, err := u.Run(context.Background())
	var ce config.Errors
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "spec.version") || !strings.Contains(err.Error(), "9.9.9") {
		t.Fatalf("want the configuration's errors (exit 2), got %T: %v", err, err)
	}
	if len(fake.created) > 0 {
		t.Error("a cluster was created")
	}
	if _, err := os.Stat(u.Dir); err == nil {
		t.Error("files were written")
	}
}

func TestUpRefusesAnExistingCluster(t *testing.T) {
	for _, name := range []string{"onprem", "demo"} {
		dir := t.TempDir()
		fake := &fakeProvider{clusters: []string{"other", name}}
		u := &Up{Name: name, Dir: dir, Log: quiet(), Lookup: noEnv, connect: connected(fake)}
		_, err := u.Run(context.Background())
		var ee *ExistsError
		if !errors.As(err, &ee) {
			t.Fatalf("want *ExistsError, got %T: %v", err, err)
		}
		down := "'onprem local down'"
		if name != DefaultName {
			down = "'onprem local down --name " + name + "'"
		}
		wantInput(t, err, "exists already", down, "another name with --name")
		if len(fake.created) > 0 {
			t.Error("a cluster was created")
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("files were written: %v", entries)
		}
	}
}

func TestUpRefusesAPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	fake := &fakeProvider{}
	u := &Up{Dir: t.TempDir(), Log: quiet(), Lookup: noEnv, connect: connected(fake), Ports: Ports{HTTP: port}}
	_, err = u.Run(context.Background())
	wantInput(t, err, "--http-port "+strconv.Itoa(port), "127.0.0.1:"+strconv.Itoa(port), "choose another port")
	if len(fake.created) > 0 {
		t.Error("a cluster was created")
	}
}

func TestUpCleansUpWhenKindFails(t *testing.T) {
	dir := t.TempDir()
	fake := &fakeProvider{createErr: errors.New("boom")}
	u := &Up{Dir: dir, Log: quiet(), Lookup: noEnv, connect: connected(fake), NodeImage: "example.com/node:v1",
		Ports: freePorts(t)}
	_, err := u.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "example.com/node:v1") {
		t.Fatalf("error: %v", err)
	}
	if !slices.Equal(fake.created, []string{"onprem"}) {
		t.Errorf("created: %v", fake.created)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("files left behind: %v", entries)
	}
}

func TestDockerErrors(t *testing.T) {
	old := dockerCommand
	t.Cleanup(func() { dockerCommand = old })

	dockerCommand = filepath.Join(t.TempDir(), "no-docker")
	_, err := dockerInfo(context.Background())
	var de *DockerError
	if !errors.As(err, &de) || !de.Missing || !strings.Contains(err.Error(), "install Docker") {
		t.Errorf("no docker: %v", err)
	}

	script := filepath.Join(t.TempDir(), "docker")
	write(t, script, "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?' >&2\nexit 1\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	dockerCommand = script
	_, err = dockerInfo(context.Background())
	if !errors.As(err, &de) || de.Missing {
		t.Fatalf("docker down: %T %v", err, err)
	}
	for _, s := range []string{"docker does not answer", "Cannot connect to the Docker daemon", "start the Docker daemon", "docker info"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error lacks %q: %v", s, err)
		}
	}
	// Up and Down say the same, before anything is touched.
	u := &Up{Dir: t.TempDir(), Log: quiet(), Lookup: noEnv}
	if _, err := u.Run(context.Background()); !errors.As(err, &de) {
		t.Errorf("up: %v", err)
	}
	d := &Down{Dir: t.TempDir(), Log: quiet()}
	if _, err := d.Run(context.Background()); !errors.As(err, &de) {
		t.Errorf("down: %v", err)
	}

	write(t, script, "#!/bin/sh\necho 2\n")
	if v, err := dockerInfo(context.Background()); err != nil || v != "2" {
		t.Errorf("docker answers: %q %v", v, err)
	}
}

func TestDownIsIdempotentAndRemovesOnlyItsFiles(t *testing.T) {
	dir := t.TempDir()
	kc, gen := Paths(dir, "demo")
	write(t, kc, "kubeconfig")
	write(t, gen, generatedHeader+" \"demo\".\n")
	fake := &fakeProvider{clusters: []string{"demo"}}
	d := &Down{Name: "demo", Dir: dir, Log: quiet(), connect: connected(fake)}
	res, err := d.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !res.Deleted || !slices.Equal(fake.deleted, []string{"demo"}) || fake.deleteKC != kc || !slices.Equal(res.Removed, []string{kc, gen}) {
		t.Errorf("down: %+v, deleted %v with kubeconfig %s", res, fake.deleted, fake.deleteKC)
	}

	// Again: already gone. An operator's own NAME.yaml stays.
	write(t, gen, "apiVersion: onprem.dev/v1alpha1\n")
	fake.clusters, fake.deleted = nil, nil
	res, err = d.Run(context.Background())
	if err != nil || res.Deleted || len(fake.deleted) > 0 || len(res.Removed) > 0 {
		t.Errorf("second down: %+v %v", res, err)
	}
	if _, err := os.Stat(gen); err != nil {
		t.Errorf("the operator's file was removed: %v", err)
	}
	_, err = (&Down{Name: "../x", Dir: dir, Log: quiet(), connect: connected(fake)}).Run(context.Background())
	wantInput(t, err, "--name", "../x")
}

func TestReach(t *testing.T) {
	if got := serveURL("https", "onprem.localhost", 443); got != "https://onprem.localhost" {
		t.Error(got)
	}
	if got := serveURL("https", "onprem.localhost", 8443); got != "https://onprem.localhost:8443" {
		t.Error(got)
	}
	r := strings.Join(reach("onprem.localhost", testPorts, true), "\n")
	for _, s := range []string{"resolves to 127.0.0.1 by itself", "self-signed", "curl -k https://onprem.localhost:8443/", "curl http://onprem.localhost:8080/"} {
		if !strings.Contains(r, s) {
			t.Errorf("reach lacks %q:\n%s", s, r)
		}
	}
	r = strings.Join(reach("ci.example.com", Ports{HTTP: 80, HTTPS: 443, ListenAddress: "0.0.0.0"}, false), "\n")
	for _, s := range []string{"'127.0.0.1 ci.example.com' to /etc/hosts", "--resolve ci.example.com:443:127.0.0.1", "curl http://ci.example.com/"} {
		if !strings.Contains(r, s) {
			t.Errorf("reach lacks %q:\n%s", s, r)
		}
	}
	if strings.Contains(r, "self-signed") {
		t.Errorf("self-signed with the operator's certificate:\n%s", r)
	}
}

func TestKindLoggerCleansStatusLines(t *testing.T) {
	for in, want := range map[string]string{
		" ✓ Ensuring node image (onprem.dev/kind-node:v1.36.3) 🖼\n": "Ensuring node image (onprem.dev/kind-node:v1.36.3) 🖼",
		" • Preparing nodes 📦  ...\n":                               "Preparing nodes 📦  ...",
		"\n":                                                        "",
	} {
		if got := clean(in); got != want {
			t.Errorf("clean(%q) = %q, want %q", in, got, want)
		}
	}
}

// freePorts returns two ports nothing listens on.
func freePorts(t *testing.T) Ports {
	t.Helper()
	var ps []int
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ps = append(ps, ln.Addr().(*net.TCPAddr).Port)
	}
	return Ports{HTTP: ps[0], HTTPS: ps[1], ListenAddress: "127.0.0.1"}
}

func wantInput(t *testing.T, err error, want ...string) {
	t.Helper()
	var ie *action.InputError
	if !errors.As(err, &ie) {
		t.Fatalf("want an input error (exit 2), got %T: %v", err, err)
	}
	for _, s := range want {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("the error lacks %q: %v", s, err)
		}
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func nested(m map[string]any, keys ...string) map[string]any {
	for _, k := range keys {
		m, _ = m[k].(map[string]any)
	}
	return m
}

func toString(v any) string {
	switch n := v.(type) {
	case int64:
		return strconv.FormatInt(n, 10)
	case float64:
		return strconv.FormatFloat(n, 'f', -1, 64)
	case int:
		return strconv.Itoa(n)
	}
	return ""
}

// testLog is a logger that writes to the test's log.
func testLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// testWriter writes lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
