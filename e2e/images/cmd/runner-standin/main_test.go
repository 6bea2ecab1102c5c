package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/charts"
)

// syncBuffer is an output that goroutines share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// envOf is a getenv over a map.
func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// freePort is a loopback TCP port nobody listens on (just now).
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// running is a role started in the background.
type running struct {
	cancel context.CancelFunc
	done   chan int
	stderr *syncBuffer

	once sync.Once
	code int
}

func start(argv []string, env map[string]string) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan int, 1), stderr: &syncBuffer{}}
	go func() { r.done <- dispatch(ctx, argv, envOf(env), io.Discard, r.stderr) }()
	return r
}

// stop sends the equivalent of SIGTERM and returns the exit code; a
// second call (a deferred one) returns the same.
func (r *running) stop(t *testing.T) int {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case r.code = <-r.done:
		case <-time.After(10 * time.Second):
			r.code = -1
			t.Errorf("did not stop within 10 s; output:\n%s", r.stderr)
		}
	})
	return r.code
}

// eventually retries f until it succeeds or 10 s pass.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRoleOf(t *testing.T) {
	for _, tc := range []struct {
		argv     []string
		role     string
		wantArgs []string
	}{
		{nil, roleAgent, nil},
		{[]string{"/usr/local/bin/runner-agent"}, roleAgent, []string{}},
		{[]string{"runner-agent"}, roleAgent, []string{}},
		{[]string{"/usr/bin/buildkitd", "--config", "f"}, roleBuildkitd, []string{"--config", "f"}},
		{[]string{"buildctl", "debug", "workers"}, roleBuildctl, []string{"debug", "workers"}},
		// The engine's chart sets args only: they follow the entrypoint.
		{[]string{"runner-agent", "--config", "/etc/buildkit/buildkitd.toml", "--oci-worker-no-process-sandbox"}, roleBuildkitd,
			[]string{"--config", "/etc/buildkit/buildkitd.toml", "--oci-worker-no-process-sandbox"}},
		{[]string{"runner-agent", "buildctl", "debug", "workers"}, roleBuildctl, []string{"debug", "workers"}},
		{[]string{"runner-agent", "buildkitd"}, roleBuildkitd, []string{}},
		{[]string{"runner-agent", "serve"}, roleAgent, []string{"serve"}},
	} {
		role, args := roleOf(tc.argv)
		if role != tc.role || !slices.Equal(args, tc.wantArgs) {
			t.Errorf("roleOf(%q) = %s %q, want %s %q", tc.argv, role, args, tc.role, tc.wantArgs)
		}
	}
	var stderr bytes.Buffer
	if code := dispatch(context.Background(), []string{"runner-agent", "serve"}, envOf(nil), io.Discard, &stderr); code != 2 {
		t.Errorf("runner-agent serve: exit %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "the agent takes none") {
		t.Errorf("runner-agent serve: %q does not say why", stderr.String())
	}
}

func TestBuildkitdArgs(t *testing.T) {
	a, err := parseBuildkitdArgs([]string{"--config", "/etc/buildkit/buildkitd.toml", "--oci-worker-no-process-sandbox"}, io.Discard)
	if err != nil {
		t.Fatalf("the chart's args: %v", err)
	}
	if a.config != "/etc/buildkit/buildkitd.toml" || !a.configGiven || !a.noProcessSandbox || len(a.addrs) != 0 {
		t.Errorf("the chart's args = %+v", a)
	}
	a, err = parseBuildkitdArgs([]string{"--addr", "unix:///a.sock", "--addr=tcp://127.0.0.1:1"}, io.Discard)
	if err != nil || !slices.Equal(a.addrs, []string{"unix:///a.sock", "tcp://127.0.0.1:1"}) || a.configGiven {
		t.Errorf("--addr twice = %+v, %v", a, err)
	}
	for _, args := range [][]string{
		{"--config", "/c.toml", "--rootless-mode"},
		{"--oci-worker-snapshotter", "native"},
		{"--config", "/c.toml", "extra"},
	} {
		var stderr bytes.Buffer
		code := dispatch(context.Background(), append([]string{"buildkitd"}, args...), envOf(nil), io.Discard, &stderr)
		if code != 2 {
			t.Errorf("buildkitd %q: exit %d, want 2", args, code)
		}
		if !strings.Contains(stderr.String(), "not supported") {
			t.Errorf("buildkitd %q: the message does not say what is supported: %q", args, stderr.String())
		}
	}
	var stderr bytes.Buffer
	if code := dispatch(context.Background(), []string{"buildkitd", "--config", filepath.Join(t.TempDir(), "none.toml")}, envOf(nil), io.Discard, &stderr); code != 1 {
		t.Errorf("buildkitd with a missing --config: exit %d, want 1 (%s)", code, stderr.String())
	}
}

// chartConfig is the runner chart's buildkitd.toml, rendered with values.
func chartConfig(t *testing.T, values map[string]any) string {
	t.Helper()
	c, err := charts.Load("runner")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := charts.Template(c, "runner", "runner-default", values)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		for _, doc := range strings.Split(m.Content, "\n---") {
			var cm corev1.ConfigMap
			if err := yaml.Unmarshal([]byte(doc), &cm); err != nil {
				t.Fatalf("%s: %v", m.Template, err)
			}
			if cm.Kind == "ConfigMap" && cm.Name == "runner-engine" {
				return cm.Data["buildkitd.toml"]
			}
		}
	}
	t.Fatal("the runner chart renders no ConfigMap runner-engine")
	return ""
}

func TestGRPCAddresses(t *testing.T) {
	// The chart's own file, mirrors and insecure registries included.
	doc := chartConfig(t, map[string]any{"engine": map[string]any{
		"port": 4321, "registryMirror": "registry.example.com/docker.io", "insecureRegistries": []any{"registry.example.com"},
	}})
	got, err := grpcAddresses(doc)
	want := []string{"tcp://0.0.0.0:4321", "unix:///run/user/1000/buildkit/buildkitd.sock"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("the chart's config: %q, %v; want %q\n%s", got, err, want, doc)
	}
	for _, tc := range []struct {
		doc  string
		want []string
	}{
		{"debug = true\n", nil},
		{"[grpc]\n  address = [\n    \"unix:///x.sock\", # the socket\n    'tcp://127.0.0.1:1',\n  ]\n[worker.oci]\n  address = [\"no\"]\n", []string{"unix:///x.sock", "tcp://127.0.0.1:1"}},
		{"grpc.address = [\"tcp://[::1]:2\"]\n[grpc]\n  uid = 0\n", []string{"tcp://[::1]:2"}},
		{"[grpc.tls]\n  address = [\"no\"]\n[ grpc ]\naddress=[\"unix:///a#b.sock\"]\n", []string{"unix:///a#b.sock"}},
	} {
		got, err := grpcAddresses(tc.doc)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("grpcAddresses(%q) = %q, %v; want %q", tc.doc, got, err, tc.want)
		}
	}
	for _, doc := range []string{
		"[grpc]\naddress = \"unix:///x.sock\"\n",
		"[grpc]\naddress = [\"unix:///x.sock\"\n",
		"[grpc]\naddress = [\"a\" \"b\"]\n",
		"[grpc]\naddress = [\"a\"]\naddress = [\"b\"]\n",
		"[grpc]\naddress = [1234]\n",
	} {
		if got, err := grpcAddresses(doc); err == nil {
			t.Errorf("grpcAddresses(%q) = %q, want an error", doc, got)
		}
	}
}

func TestParseEndpoint(t *testing.T) {
	for in, want := range map[string]endpoint{
		"unix:///run/user/1000/buildkit/buildkitd.sock": {"unix", "/run/user/1000/buildkit/buildkitd.sock"},
		"tcp://runner-engine.ns-engine.svc:1234":        {"tcp", "runner-engine.ns-engine.svc:1234"},
		"tcp://0.0.0.0:1234":                            {"tcp", "0.0.0.0:1234"},
	} {
		if got, err := parseEndpoint(in); err != nil || got != want {
			t.Errorf("parseEndpoint(%q) = %+v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "/run/buildkit.sock", "unix://relative.sock", "tcp://host", "tcp://host:", "docker-container://buildkitd"} {
		if got, err := parseEndpoint(in); err == nil {
			t.Errorf("parseEndpoint(%q) = %+v, want an error", in, got)
		}
	}
}

// TestEngineAnswersBuildctl runs the engine as the chart starts it (the
// entrypoint with the chart's args and its config, here on a temporary
// socket and a loopback port) and probes it as the chart does.
func TestEngineAnswersBuildctl(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "run", "buildkit", "buildkitd.sock")
	port := freePort(t)
	cfg := filepath.Join(dir, "buildkitd.toml")
	doc := fmt.Sprintf("debug = false\n\n[grpc]\n  address = [\"tcp://127.0.0.1:%d\", \"unix://%s\"]\n\n[worker.oci]\n  enabled = true\n", port, sock)
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	eng := start([]string{"/usr/local/bin/runner-agent", "--config", cfg, "--oci-worker-no-process-sandbox"}, nil)
	defer eng.stop(t)

	buildctl := func(host string, args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := dispatch(context.Background(), append([]string{"/usr/bin/buildctl"}, args...), envOf(map[string]string{"BUILDKIT_HOST": host}), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	hosts := []string{"unix://" + sock, fmt.Sprintf("tcp://127.0.0.1:%d", port)}
	var ids []string
	for _, h := range hosts {
		eventually(t, "buildctl debug workers against "+h, func() error {
			code, out, errOut := buildctl(h, "debug", "workers")
			if code != 0 {
				return fmt.Errorf("exit %d: %s", code, errOut)
			}
			fields := strings.Fields(out)
			if len(fields) < 4 {
				return fmt.Errorf("output %q lists no worker", out)
			}
			ids = append(ids, fields[2])
			return nil
		})
	}
	if len(ids) != 2 || ids[0] != ids[1] {
		t.Errorf("the worker ids over the socket and over TCP: %q, want one worker", ids)
	}
	for _, addr := range []string{sock, fmt.Sprint(port)} {
		if !strings.Contains(eng.stderr.String(), "listening on") || !strings.Contains(eng.stderr.String(), addr) {
			t.Errorf("the engine's log does not say it listens on %s:\n%s", addr, eng.stderr)
		}
	}

	// Other command lines, and an engine that is not there.
	for _, args := range [][]string{{}, {"debug"}, {"debug", "workers", "-v"}, {"build"}, {"--addr", hosts[0], "debug", "workers"}} {
		if code, _, errOut := buildctl(hosts[0], args...); code != 2 || !strings.Contains(errOut, "debug workers") {
			t.Errorf("buildctl %q: exit %d (%q), want 2 and the supported form", args, code, errOut)
		}
	}
	missing := "unix://" + filepath.Join(dir, "none.sock")
	if code, _, errOut := buildctl(missing, "debug", "workers"); code != 1 || !strings.Contains(errOut, "none.sock") {
		t.Errorf("buildctl against no engine: exit %d (%q), want 1 and the address", code, errOut)
	}
	// Something that is not the engine: a server that answers otherwise.
	other, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	go func() {
		c, err := other.Accept()
		if err == nil {
			_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\n\r\n")
			c.Close()
		}
	}()
	if code, _, errOut := buildctl("tcp://"+other.Addr().String(), "debug", "workers"); code != 1 || !strings.Contains(errOut, "answered") {
		t.Errorf("buildctl against another server: exit %d (%q), want 1 and what it answered", code, errOut)
	}

	// A connection that speaks another protocol is answered and closed;
	// the engine keeps serving.
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\n")
	reply, _ := io.ReadAll(c)
	c.Close()
	if !strings.HasPrefix(string(reply), "error unknown request") {
		t.Errorf("a foreign request got %q", reply)
	}

	if code := eng.stop(t); code != 0 {
		t.Errorf("the engine exited %d on SIGTERM, want 0:\n%s", code, eng.stderr)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket %s is left behind after a clean stop (%v)", sock, err)
	}
	if code, _, _ := buildctl(hosts[1], "debug", "workers"); code != 1 {
		t.Errorf("buildctl after the engine stopped: exit %d, want 1", code)
	}
}

// TestEngineDefaultsAndStaleSocket: no config file and no --addr gives
// buildkitd's rootless socket under XDG_RUNTIME_DIR, and a socket left by
// a killed engine is replaced.
func TestEngineDefaultsAndStaleSocket(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "buildkit", "buildkitd.sock")
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		t.Fatal(err)
	}
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	want := endpoint{"unix", sock}
	if os.Geteuid() == 0 {
		// As root, buildkitd's default socket is /run/buildkit's.
		want = endpoint{"unix", "/run/buildkit/buildkitd.sock"}
	}
	a := buildkitdArgs{config: filepath.Join(dir, "absent.toml")}
	eps, err := listenAddresses(a, envOf(map[string]string{"XDG_RUNTIME_DIR": dir}))
	if err != nil || len(eps) != 1 || eps[0] != want {
		t.Fatalf("the default address: %+v, %v; want %s", eps, err, want)
	}
	eng := start([]string{"buildkitd", "--addr", "unix://" + sock}, nil)
	eventually(t, "the engine on a stale socket", func() error {
		_, err := queryWorkers(context.Background(), "unix://"+sock, time.Second)
		return err
	})
	if code := eng.stop(t); code != 0 {
		t.Errorf("exit %d:\n%s", code, eng.stderr)
	}
}

var fullAgentEnv = map[string]string{
	"ONPREM_RUNNER_NAME":        "default",
	"ONPREM_VERSION":            "2.8.0",
	"ONPREM_PLATFORM_URL":       "https://ci.example.com/api",
	"ONPREM_RUNNER_TOKEN":       "tok-3f9a1c7e5b2d",
	"ONPREM_RUNNER_CONCURRENCY": "4",
	"ONPREM_RUNNER_NAMESPACE":   "runner-default",
	"BUILDKIT_HOST":             "tcp://runner-engine.runner-default-engine.svc:1234",
	"PORT":                      "8080",
}

func withEnv(changes map[string]string) map[string]string {
	m := map[string]string{}
	for k, v := range fullAgentEnv {
		m[k] = v
	}
	for k, v := range changes {
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	return m
}

func TestAgentNamesMissingEnv(t *testing.T) {
	var stderr bytes.Buffer
	if code := dispatch(context.Background(), []string{"runner-agent"}, envOf(nil), io.Discard, &stderr); code != 2 {
		t.Errorf("no environment: exit %d, want 2", code)
	}
	for _, n := range requiredAgentEnv {
		if !strings.Contains(stderr.String(), n) {
			t.Errorf("no environment: %q does not name %s", stderr.String(), n)
		}
	}
	stderr.Reset()
	env := withEnv(map[string]string{"ONPREM_VERSION": "", "BUILDKIT_HOST": ""})
	if code := dispatch(context.Background(), []string{"runner-agent"}, envOf(env), io.Discard, &stderr); code != 2 {
		t.Errorf("two missing: exit %d, want 2", code)
	}
	if got := stderr.String(); !strings.Contains(got, "ONPREM_VERSION, BUILDKIT_HOST") || strings.Contains(got, "ONPREM_RUNNER_NAME") {
		t.Errorf("two missing: %q, want exactly ONPREM_VERSION and BUILDKIT_HOST named", got)
	}
	for name, bad := range map[string]string{
		"ONPREM_PLATFORM_URL":       "ci.example.com",
		"BUILDKIT_HOST":             "docker-container://buildkitd",
		"PORT":                      "http",
		"ONPREM_RUNNER_CONCURRENCY": "0",
	} {
		stderr.Reset()
		code := dispatch(context.Background(), []string{"runner-agent"}, envOf(withEnv(map[string]string{name: bad})), io.Discard, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), name) {
			t.Errorf("%s=%s: exit %d (%q), want 2 naming it", name, bad, code, stderr.String())
		}
		if strings.Contains(stderr.String(), fullAgentEnv["ONPREM_RUNNER_TOKEN"]) {
			t.Errorf("%s=%s: the token is printed: %q", name, bad, stderr.String())
		}
	}
}

// TestAgentReadyzFollowsTheEngine: /healthz from the start, /readyz 503
// until the engine at BUILDKIT_HOST answers and 200 after, /version; and
// the token in none of it.
func TestAgentReadyzFollowsTheEngine(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "engine", "buildkitd.sock")
	port := freePort(t)
	env := withEnv(map[string]string{
		"BUILDKIT_HOST":      "unix://" + sock,
		"PORT":               fmt.Sprint(port),
		"ONPREM_PLATFORM_CA": filepath.Join(dir, "absent", "ca.crt"),
	})
	token := env["ONPREM_RUNNER_TOKEN"]
	ag := start([]string{"/usr/local/bin/runner-agent"}, env)
	defer ag.stop(t)

	var bodies []string
	get := func(path string) (int, string, error) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		bodies = append(bodies, string(b))
		return resp.StatusCode, string(b), err
	}
	eventually(t, "/healthz", func() error {
		code, body, err := get("/healthz")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, body)
		}
		return err
	})
	code, body, err := get("/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, sock) {
		t.Errorf("/readyz without an engine = %d %q (%v), want 503 naming the engine's address", code, body, err)
	}

	eng := start([]string{"buildkitd", "--addr", "unix://" + sock}, nil)
	defer eng.stop(t)
	eventually(t, "/readyz once the engine runs", func() error {
		code, body, err := get("/readyz")
		if err == nil && code != http.StatusOK {
			err = fmt.Errorf("%d %s", code, body)
		}
		return err
	})
	code, body, err = get("/version")
	var v map[string]string
	if err != nil || code != http.StatusOK || json.Unmarshal([]byte(body), &v) != nil ||
		v["runner"] != "default" || v["version"] != "2.8.0" || len(v) != 2 {
		t.Errorf("/version = %d %q (%v)", code, body, err)
	}
	if code, _, _ := get("/nothing"); code != http.StatusNotFound {
		t.Errorf("/nothing = %d, want 404", code)
	}

	// The engine goes away: not ready again.
	if code := eng.stop(t); code != 0 {
		t.Errorf("the engine exited %d", code)
	}
	if code, body, _ := get("/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz after the engine stopped = %d %q, want 503", code, body)
	}
	if code := ag.stop(t); code != 0 {
		t.Errorf("the agent exited %d on SIGTERM, want 0:\n%s", code, ag.stderr)
	}
	log := ag.stderr.String()
	for _, want := range []string{"runner default", "not ready", "ready: the engine", "absent"} {
		if !strings.Contains(log, want) {
			t.Errorf("the agent's log does not say %q:\n%s", want, log)
		}
	}
	for _, out := range append(bodies, log, eng.stderr.String()) {
		if strings.Contains(out, token) {
			t.Errorf("the token is in the output: %q", out)
		}
	}
}
