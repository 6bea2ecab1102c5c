package kube

import (
	"context"
	"crypto/tls"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const versionJSON = `{"major":"1","minor":"36","gitVersion":"v1.36.3","platform":"linux/amd64"}`

// apiServer is a TLS server that answers /version like kube-apiserver and
// records the Authorization header it saw.
type apiServer struct {
	*httptest.Server
	auth atomic.Value // string
	hits atomic.Int32
}

func newAPIServer(t *testing.T, h http.HandlerFunc) *apiServer {
	t.Helper()
	s := &apiServer{}
	if h == nil {
		h = func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/version" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, versionJSON)
		}
	}
	s.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		s.auth.Store(r.Header.Get("Authorization"))
		h(w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *apiServer) caPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
}

func statusHandler(code int, reason string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":%q,"reason":%q,"code":%d}`,
			strings.ToLower(reason), reason, code)
	}
}

// kctx is one context of a kubeconfig written by a test.
type kctx struct {
	name, server, namespace, token string
	ca                             []byte // nil: no CA (system roots)
}

func writeKubeconfig(t *testing.T, path, current string, contexts ...kctx) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for _, c := range contexts {
		cfg.Clusters[c.name] = &clientcmdapi.Cluster{Server: c.server, CertificateAuthorityData: c.ca}
		cfg.AuthInfos[c.name] = &clientcmdapi.AuthInfo{Token: c.token}
		cfg.Contexts[c.name] = &clientcmdapi.Context{Cluster: c.name, AuthInfo: c.name, Namespace: c.namespace}
	}
	cfg.CurrentContext = current
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// isolate makes the test independent of the machine's kubeconfig and
// in-cluster environment.
func isolate(t *testing.T) {
	t.Setenv("KUBECONFIG", "")
	home := filepath.Join(t.TempDir(), "home", ".kube", "config")
	oldHome, oldIn := homeKubeconfig, inClusterConfig
	homeKubeconfig = func() string { return home }
	inClusterConfig = func() (*rest.Config, error) { return nil, rest.ErrNotInCluster }
	t.Cleanup(func() { homeKubeconfig, inClusterConfig = oldHome, oldIn })
}

func connect(t *testing.T, o Options) (*Cluster, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return Connect(ctx, o)
}

func unreachable(t *testing.T, err error, want Reason) *UnreachableError {
	t.Helper()
	var u *UnreachableError
	if !errors.As(err, &u) {
		t.Fatalf("error = %T %v, want *UnreachableError", err, err)
	}
	if u.Reason != want {
		t.Fatalf("reason = %s, want %s; error: %v", u.Reason, want, err)
	}
	if !IsConnectError(err) {
		t.Errorf("IsConnectError(%v) = false", err)
	}
	return u
}

func authError(t *testing.T, err error, want Reason) *AuthError {
	t.Helper()
	var a *AuthError
	if !errors.As(err, &a) {
		t.Fatalf("error = %T %v, want *AuthError", err, err)
	}
	if a.Reason != want {
		t.Fatalf("reason = %s, want %s; error: %v", a.Reason, want, err)
	}
	var u *UnreachableError
	if errors.As(err, &u) {
		t.Errorf("an AuthError must not also be an UnreachableError")
	}
	if !IsConnectError(err) {
		t.Errorf("IsConnectError(%v) = false", err)
	}
	return a
}

func mustContain(t *testing.T, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("message %q\ndoes not contain %q", s, sub)
		}
	}
}

func TestConnect(t *testing.T) {
	isolate(t)
	srv := newAPIServer(t, nil)
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "dev",
		kctx{name: "dev", server: srv.URL, namespace: "team-a", token: "tok-123", ca: srv.caPEM()})

	c, err := connect(t, Options{Kubeconfig: path})
	if err != nil {
		t.Fatal(err)
	}
	if c.ServerVersion != "v1.36.3" || c.Info.Minor != "36" {
		t.Errorf("ServerVersion = %q, Info = %+v", c.ServerVersion, c.Info)
	}
	if c.Kubeconfig != path || c.Context != "dev" || c.Server != srv.URL {
		t.Errorf("Kubeconfig, Context, Server = %q, %q, %q", c.Kubeconfig, c.Context, c.Server)
	}
	if c.Config.QPS != DefaultQPS || c.Config.Burst != DefaultBurst {
		t.Errorf("QPS/Burst = %v/%v, want %v/%v", c.Config.QPS, c.Config.Burst, DefaultQPS, DefaultBurst)
	}
	if !strings.HasPrefix(c.Config.UserAgent, "onprem/") {
		t.Errorf("UserAgent = %q", c.Config.UserAgent)
	}
	if got := srv.auth.Load(); got != "Bearer tok-123" {
		t.Errorf("server saw Authorization %q, want the kubeconfig's token", got)
	}
	if c.Client == nil {
		t.Fatal("no Client")
	}

	// The Helm getter serves the same configuration.
	rc, err := c.Getter.ToRESTConfig()
	if err != nil || rc.Host != srv.URL || rc.QPS != DefaultQPS || rc.BearerToken != "tok-123" {
		t.Errorf("Getter.ToRESTConfig = %+v, %v", rc, err)
	}
	rc.Host = "changed"
	if c.Config.Host != srv.URL {
		t.Error("ToRESTConfig must return a copy")
	}
	ns, _, err := c.Getter.ToRawKubeConfigLoader().Namespace()
	if err != nil || ns != "team-a" {
		t.Errorf("Getter namespace = %q, %v; want the context's team-a", ns, err)
	}
	d1, err1 := c.Getter.ToDiscoveryClient()
	d2, err2 := c.Getter.ToDiscoveryClient()
	if err1 != nil || err2 != nil || d1 == nil || d1 != d2 {
		t.Errorf("ToDiscoveryClient should return one shared client: %v %v %v %v", d1, d2, err1, err2)
	}
	if m, err := c.Getter.ToRESTMapper(); err != nil || m == nil {
		t.Errorf("ToRESTMapper = %v, %v", m, err)
	}
}

func TestConnectExplicitContext(t *testing.T) {
	isolate(t)
	a, b := newAPIServer(t, nil), newAPIServer(t, nil)
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "a",
		kctx{name: "a", server: a.URL, ca: a.caPEM()},
		kctx{name: "b", server: b.URL, ca: b.caPEM()})
	c, err := connect(t, Options{Kubeconfig: path, Context: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Context != "b" || c.Server != b.URL || b.hits.Load() == 0 || a.hits.Load() != 0 {
		t.Errorf("context %q server %q; hits a=%d b=%d", c.Context, c.Server, a.hits.Load(), b.hits.Load())
	}
}

func TestConnectKUBECONFIGList(t *testing.T) {
	isolate(t)
	srv := newAPIServer(t, nil)
	dir := t.TempDir()
	// The first file sets the current context; the second holds it. A
	// missing file in the list is ignored, like kubectl does.
	first := filepath.Join(dir, "first")
	if err := os.WriteFile(first, []byte("apiVersion: v1\nkind: Config\ncurrent-context: prod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	second := writeKubeconfig(t, filepath.Join(dir, "second"), "", kctx{name: "prod", server: srv.URL, ca: srv.caPEM()})
	missing := filepath.Join(dir, "missing")
	t.Setenv("KUBECONFIG", strings.Join([]string{first, missing, second, first}, string(os.PathListSeparator)))

	c, err := connect(t, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := first + string(os.PathListSeparator) + second
	if c.Kubeconfig != want || c.Context != "prod" || c.ServerVersion != "v1.36.3" {
		t.Errorf("Kubeconfig %q (want %q), Context %q, version %q", c.Kubeconfig, want, c.Context, c.ServerVersion)
	}
}

func TestConnectHomeKubeconfig(t *testing.T) {
	isolate(t)
	srv := newAPIServer(t, nil)
	home := writeKubeconfig(t, homeKubeconfig(), "home", kctx{name: "home", server: srv.URL, ca: srv.caPEM()})
	c, err := connect(t, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Kubeconfig != home || c.Context != "home" {
		t.Errorf("Kubeconfig %q Context %q, want %q home", c.Kubeconfig, c.Context, home)
	}
}

func TestConnectInCluster(t *testing.T) {
	isolate(t)
	srv := newAPIServer(t, nil)
	inClusterConfig = func() (*rest.Config, error) {
		return &rest.Config{Host: srv.URL, BearerToken: "sa-token",
			TLSClientConfig: rest.TLSClientConfig{CAData: srv.caPEM()}}, nil
	}
	c, err := connect(t, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Kubeconfig != "" || c.Context != "" || c.Server != srv.URL || c.ServerVersion != "v1.36.3" {
		t.Errorf("in-cluster: %+v", c)
	}
	if got := srv.auth.Load(); got != "Bearer sa-token" {
		t.Errorf("Authorization %q", got)
	}
	if c.Getter.ToRawKubeConfigLoader() == nil {
		t.Error("no kubeconfig loader for the Helm SDK")
	}
}

func TestConnectNoKubeconfig(t *testing.T) {
	isolate(t)
	_, err := connect(t, Options{})
	u := unreachable(t, err, ReasonNoKubeconfig)
	mustContain(t, u.Error(), "no kubeconfig found", "~/.kube/config", "--kubeconfig", "KUBECONFIG", "not running inside a cluster")

	// $KUBECONFIG naming only missing files says so.
	t.Setenv("KUBECONFIG", "/nonexistent/a")
	_, err = connect(t, Options{})
	u = unreachable(t, err, ReasonNoKubeconfig)
	mustContain(t, u.Error(), "$KUBECONFIG (/nonexistent/a)")
}

func TestConnectMissingFile(t *testing.T) {
	isolate(t)
	path := filepath.Join(t.TempDir(), "nope", "config")
	_, err := connect(t, Options{Kubeconfig: path, Context: "x"})
	u := unreachable(t, err, ReasonKubeconfigMissing)
	if u.Kubeconfig != path {
		t.Errorf("Kubeconfig = %q", u.Kubeconfig)
	}
	mustContain(t, err.Error(), path, "does not exist", "--kubeconfig")
}

func TestConnectMissingContext(t *testing.T) {
	isolate(t)
	srv := newAPIServer(t, nil)
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "staging",
		kctx{name: "staging", server: srv.URL, ca: srv.caPEM()},
		kctx{name: "prod", server: srv.URL, ca: srv.caPEM()})
	_, err := connect(t, Options{Kubeconfig: path, Context: "prd"})
	u := unreachable(t, err, ReasonContextNotFound)
	if !slices.Equal(u.Contexts, []string{"prod", "staging"}) || u.Context != "prd" || u.Kubeconfig != path {
		t.Errorf("error fields: %+v", u)
	}
	mustContain(t, err.Error(), `context "prd"`, path, "prod, staging", "--context")
	if srv.hits.Load() != 0 {
		t.Error("the server was contacted although the context is wrong")
	}
}

func TestConnectNoCurrentContext(t *testing.T) {
	isolate(t)
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "",
		kctx{name: "one", server: "https://127.0.0.1:1"}, kctx{name: "two", server: "https://127.0.0.1:1"})
	_, err := connect(t, Options{Kubeconfig: path})
	u := unreachable(t, err, ReasonNoContext)
	mustContain(t, u.Error(), path, "no current-context", "one, two", "--context")
}

func TestConnectInvalidKubeconfig(t *testing.T) {
	isolate(t)
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte("clusters: [this is: not: yaml\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := connect(t, Options{Kubeconfig: path})
	u := unreachable(t, err, ReasonConfigInvalid)
	mustContain(t, u.Error(), path, "kubectl config view --kubeconfig "+path)

	// A context whose cluster has no server is incomplete.
	path2 := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "empty", kctx{name: "empty"})
	_, err = connect(t, Options{Kubeconfig: path2})
	u = unreachable(t, err, ReasonConfigInvalid)
	mustContain(t, u.Error(), path2, `context "empty"`)
}

func TestConnectRefused(t *testing.T) {
	isolate(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := "https://" + l.Addr().String()
	l.Close()
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "gone", kctx{name: "gone", server: server})
	start := time.Now()
	_, err = connect(t, Options{Kubeconfig: path, Timeout: 10 * time.Second})
	u := unreachable(t, err, ReasonRefused)
	if time.Since(start) > 5*time.Second {
		t.Errorf("a refused connection took %s to report", time.Since(start))
	}
	if u.Server != server || u.Context != "gone" || u.Kubeconfig != path {
		t.Errorf("fields: %+v", u)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("error does not unwrap to ECONNREFUSED: %v", err)
	}
	mustContain(t, err.Error(), server, path, `context "gone"`, "connection refused")
}

func TestConnectTimeout(t *testing.T) {
	isolate(t)
	srv := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "slow", kctx{name: "slow", server: srv.URL, ca: srv.caPEM()})
	start := time.Now()
	_, err := connect(t, Options{Kubeconfig: path, Timeout: 500 * time.Millisecond})
	elapsed := time.Since(start)
	u := unreachable(t, err, ReasonTimeout)
	if elapsed < 500*time.Millisecond || elapsed > 5*time.Second {
		t.Errorf("Connect returned after %s with a 500ms timeout", elapsed)
	}
	mustContain(t, u.Error(), "did not answer within 500ms", srv.URL, path, `context "slow"`)
}

func TestConnectDNS(t *testing.T) {
	isolate(t)
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "typo",
		kctx{name: "typo", server: "https://api.onprem-test.invalid:6443"})
	_, err := connect(t, Options{Kubeconfig: path, Timeout: 10 * time.Second})
	u := unreachable(t, err, ReasonDNS)
	mustContain(t, u.Error(), "api.onprem-test.invalid", "DNS", path)
}

func TestConnectUnauthorized(t *testing.T) {
	isolate(t)
	srv := newAPIServer(t, statusHandler(http.StatusUnauthorized, "Unauthorized"))
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "old", kctx{name: "old", server: srv.URL, ca: srv.caPEM(), token: "expired"})
	_, err := connect(t, Options{Kubeconfig: path})
	a := authError(t, err, ReasonUnauthorized)
	if a.Kubeconfig != path || a.Context != "old" || a.Server != srv.URL {
		t.Errorf("fields: %+v", a)
	}
	mustContain(t, err.Error(), "401 Unauthorized", path, `context "old"`, srv.URL, "refresh")
}

func TestConnectForbidden(t *testing.T) {
	isolate(t)
	srv := newAPIServer(t, statusHandler(http.StatusForbidden, "Forbidden"))
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "ro", kctx{name: "ro", server: srv.URL, ca: srv.caPEM()})
	_, err := connect(t, Options{Kubeconfig: path})
	authError(t, err, ReasonForbidden)
	mustContain(t, err.Error(), "403 Forbidden", path)
}

func TestConnectUntrustedCertificate(t *testing.T) {
	isolate(t)
	srv := newAPIServer(t, nil)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	// No certificate-authority: the test server's certificate is unknown.
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "mitm", kctx{name: "mitm", server: srv.URL})
	_, err := connect(t, Options{Kubeconfig: path})
	authError(t, err, ReasonTLS)
	mustContain(t, err.Error(), "certificate", srv.URL, path, "certificate-authority")
}

func TestConnectClientCertificateRefused(t *testing.T) {
	isolate(t)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, versionJSON) }))
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "x", kctx{name: "x", server: srv.URL, ca: ca})
	_, err := connect(t, Options{Kubeconfig: path, Timeout: 5 * time.Second})
	authError(t, err, ReasonTLS)
	mustContain(t, err.Error(), "client certificate", path)
}

func TestConnectNotKubernetes(t *testing.T) {
	isolate(t)
	for name, h := range map[string]http.HandlerFunc{
		"404": func(w http.ResponseWriter, r *http.Request) { http.Error(w, "<html>nginx</html>", http.StatusNotFound) },
		"200 not a version": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"hello":"world"}`)
		},
		"503": statusHandler(http.StatusServiceUnavailable, "ServiceUnavailable"),
	} {
		t.Run(name, func(t *testing.T) {
			srv := newAPIServer(t, h)
			path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "x", kctx{name: "x", server: srv.URL, ca: srv.caPEM()})
			_, err := connect(t, Options{Kubeconfig: path, Timeout: 5 * time.Second})
			u := unreachable(t, err, ReasonBadResponse)
			mustContain(t, u.Error(), srv.URL, "Kubernetes API server")
		})
	}

	// A plain HTTP server behind an https:// URL.
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "x",
		kctx{name: "x", server: strings.Replace(plain.URL, "http://", "https://", 1)})
	_, err := connect(t, Options{Kubeconfig: path, Timeout: 5 * time.Second})
	unreachable(t, err, ReasonBadResponse)
}

func TestConnectCanceled(t *testing.T) {
	isolate(t)
	srv := newAPIServer(t, func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	path := writeKubeconfig(t, filepath.Join(t.TempDir(), "config"), "x", kctx{name: "x", server: srv.URL, ca: srv.caPEM()})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err := Connect(ctx, Options{Kubeconfig: path, Timeout: 10 * time.Second})
	if !errors.Is(err, context.Canceled) || IsConnectError(err) {
		t.Fatalf("a canceled Connect returned %T %v, want context.Canceled", err, err)
	}
}

func TestErrorMessages(t *testing.T) {
	inCluster := (&UnreachableError{Server: "https://10.96.0.1:443", Reason: ReasonRefused, Err: syscall.ECONNREFUSED}).Error()
	mustContain(t, inCluster, "in-cluster service account", "https://10.96.0.1:443")

	list := "/a" + string(os.PathListSeparator) + "/b"
	invalid := (&UnreachableError{Kubeconfig: list, Context: "c", Reason: ReasonConfigInvalid, Err: errors.New("bad")}).Error()
	mustContain(t, invalid, "KUBECONFIG="+list+" kubectl config view --context c --minify")

	none := (&UnreachableError{Kubeconfig: "/k", Context: "c", Reason: ReasonContextNotFound, Err: errors.New("x")}).Error()
	mustContain(t, none, "no contexts at all")

	cred := (&AuthError{Kubeconfig: "/k", Context: "eks", Reason: ReasonCredentials, Err: errors.New("getting credentials: exec: executable aws not found")}).Error()
	mustContain(t, cred, "credential plugin", `context "eks"`)

	if got := classify(fmt.Errorf("Get x: %w", errors.New("getting credentials: exec: boom")), "/k", "c", "s", time.Second); !errors.As(got, new(*AuthError)) {
		t.Errorf("an exec plugin failure is classified as %T", got)
	}
}
