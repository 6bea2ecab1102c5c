package configrepo

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/e2e/testservers"
)

const token = "glpat-s3cret-token-0123456789"

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// gitLog is `git log -1 --format=FORMAT rev` in repository name.
func gitLog(t *testing.T, srv *testservers.GitServer, name, rev, format string) string {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", srv.Dir(name), "log", "-1", "--format="+format, rev).CombinedOutput()
	if err != nil {
		t.Fatalf("git log: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// noSecret fails the test when err's text has the token.
func noSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		return
	}
	for _, s := range append(secrets, token) {
		if strings.Contains(err.Error(), s) {
			t.Errorf("a secret is in the error: %v", err)
		}
	}
}

// proxy serves srv through a reverse proxy whose before hook may answer a
// request itself (returning true) or act before forwarding it.
func proxy(t *testing.T, srv *testservers.GitServer, before func(w http.ResponseWriter, r *http.Request) bool) *httptest.Server {
	t.Helper()
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if before != nil && before(w, r) {
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func isReceivePack(r *http.Request) bool {
	return strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.URL.Query().Get("service") == "git-receive-pack"
}
