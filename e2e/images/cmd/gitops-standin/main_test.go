package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The hooks' cf reads the values file the chart mounts, and refuses
// values without a runtime name or platform URL.
func TestCF(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", "global:\n  codefresh: {url: https://ci.example.com}\n  runtime: {name: codefresh}\n")
	noName := write("noname.yaml", "global:\n  codefresh: {url: https://ci.example.com}\n")
	for _, tc := range []struct {
		args []string
		want string // "" succeeds
	}{
		{[]string{"helm", "validate", "--values", good, "--namespace", "codefresh", "--hook"}, ""},
		{[]string{"account", "validate-usage", "--fail-condition=reached", "--values=" + good}, ""},
		{[]string{"helm", "validate", "--values", noName}, "global.runtime.name"},
		{[]string{"helm", "validate", "--values", filepath.Join(dir, "absent.yaml")}, "no such file"},
		{[]string{"helm", "validate"}, "--values is required"},
		{[]string{"runtime", "install", "--values", good}, "not a command"},
	} {
		err := cf(tc.args)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("cf %v: %v, want %q", tc.args, err, tc.want)
		}
	}
}

// A server's role comes from the chart's arguments and environment.
func TestRole(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	none := env(nil)
	for _, tc := range []struct {
		name string
		args []string
		env  func(string) string
		want string
	}{
		{"docker-entrypoint.sh", []string{"/usr/local/bin/argocd-server", "--port=8080"}, none, "argocd-server"},
		{"docker-entrypoint.sh", []string{"--save", "", "--appendonly", "no", "--requirepass s3cret"}, none, "redis"},
		{"docker-entrypoint.sh", nil, env(map[string]string{"DEPLOYMENT_NAME": "cap-app-proxy"}), "cap-app-proxy"},
		{"docker-entrypoint.sh", nil, env(map[string]string{"BINARY_NAME": "sources-server"}), "sources-server"},
		{"controller", []string{"--update-status"}, none, "controller"},
		{"docker-entrypoint.sh", []string{"controller"}, none, "docker-entrypoint.sh controller"},
	} {
		if got := role(tc.name, tc.args, tc.env); got != tc.want {
			t.Errorf("role(%s %v) = %q, want %q", tc.name, tc.args, got, tc.want)
		}
	}
	if p := redisPassword([]string{"--requirepass s3cret"}); p != "s3cret" {
		t.Errorf("redisPassword = %q", p)
	}
	// Redis without its Secret's value (the kubelet leaves $(VAR) as it is
	// when the variable is unset) does not start.
	err := serve(context.Background(), "docker-entrypoint.sh", []string{"--requirepass $(REDIS_PASSWORD)"}, none)
	if err == nil || !strings.Contains(err.Error(), "argocd-redis") {
		t.Errorf("redis without a password: %v", err)
	}
}

// fakeAPI is an API server's Secret creation: 201 once per name, 409
// after, 403 for a name it is told to refuse.
type fakeAPI struct {
	mu      sync.Mutex
	secrets map[string]map[string]string
	refuse  string
	auth    string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.auth = r.Header.Get("Authorization")
	if r.Method != http.MethodPost || r.URL.Path != "/api/v1/namespaces/codefresh/secrets" {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	var s struct {
		Metadata   struct{ Name string }
		StringData map[string]string
	}
	if err := json.NewDecoder(r.Body).Decode(&s); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch {
	case s.Metadata.Name == f.refuse:
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": "secrets is forbidden"})
	case f.secrets[s.Metadata.Name] != nil:
		w.WriteHeader(http.StatusConflict)
	default:
		f.secrets[s.Metadata.Name] = s.StringData
		w.WriteHeader(http.StatusCreated)
	}
}

func TestEnsureSecret(t *testing.T) {
	api := &fakeAPI{secrets: map[string]map[string]string{}, refuse: "forbidden"}
	srv := httptest.NewTLSServer(api)
	defer srv.Close()
	k := &kube{base: srv.URL, namespace: "codefresh", token: "sa-token", client: srv.Client()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	created, err := k.ensureSecret(ctx, "argocd-redis", map[string]string{"auth": randomToken()})
	if err != nil || !created {
		t.Fatalf("first create: %v, %v", created, err)
	}
	first := api.secrets["argocd-redis"]["auth"]
	if len(first) < 16 || api.auth != "Bearer sa-token" {
		t.Fatalf("password %q, Authorization %q", first, api.auth)
	}
	// An existing Secret is kept as it is.
	created, err = k.ensureSecret(ctx, "argocd-redis", map[string]string{"auth": randomToken()})
	if err != nil || created || api.secrets["argocd-redis"]["auth"] != first {
		t.Fatalf("second create: %v, %v; password changed: %v", created, err, api.secrets["argocd-redis"]["auth"] != first)
	}
	// A refusal (RBAC) is an error at once, with the API server's word.
	if _, err := k.ensureSecret(ctx, "forbidden", map[string]string{"k": "v"}); err == nil || !strings.Contains(err.Error(), "403 secrets is forbidden") {
		t.Fatalf("refused create: %v", err)
	}
	// An API server that does not answer is retried until the context
	// ends.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	short, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	gone := &kube{base: "https://" + addr, namespace: "codefresh", client: srv.Client()}
	if _, err := gone.ensureSecret(short, "argocd-redis", map[string]string{"auth": "x"}); err == nil {
		t.Fatal("no error from an API server that does not answer")
	}
}
