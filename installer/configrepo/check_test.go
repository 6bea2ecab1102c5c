package configrepo

import (
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"onprem.dev/onprem/e2e/testservers"
)

func TestCheckAcceptsTheTokenOnAnEmptyRepository(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	u := srv.NewRepo(t, "config")
	if err := Check(testCtx(t), Remote{URL: u, Token: token}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	srv.Commit(t, "config", "main", map[string]string{"a.txt": "a\n"}, "first")
	if err := Check(testCtx(t), Remote{URL: u, Token: token, Branch: "main", Path: "platform"}); err != nil {
		t.Fatalf("Check of a repository with a commit: %v", err)
	}
	if got := srv.Requests(); got.Refused != 0 || got.Authenticated < 4 {
		t.Errorf("requests %+v: want the token sent with every request (ls-remote and the push advertisement, twice)", got)
	}
}

func TestCheckRefusedToken(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	u := srv.NewRepo(t, "config")
	for name, r := range map[string]Remote{
		"wrong token":             {URL: u, Token: "wrong-token"},
		"wrong token in the URL":  {URL: strings.Replace(u, "http://", "http://someone:"+token+"x@", 1)},
		"no token":                {URL: u},
		"token, wrong URL secret": {URL: strings.Replace(u, "http://", "http://someone:url-secret@", 1), Token: "wrong-token"},
	} {
		t.Run(name, func(t *testing.T) {
			err := Check(testCtx(t), r)
			var ae *AuthError
			if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized || ae.Push {
				t.Fatalf("Check: %v, want an *AuthError (401, reading)", err)
			}
			msg := err.Error()
			if !strings.Contains(msg, "git repository "+u+" refused authentication") || !strings.Contains(msg, "token") {
				t.Errorf("message %q: want the URL, 'refused authentication' and the token named", msg)
			}
			noSecret(t, err, "wrong-token", "url-secret", "someone:")
		})
	}
}

func TestCheckReadOnlyToken(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	srv.NewRepo(t, "config")
	// A host that lets the token read but not push, as GitHub does with a
	// read-only token: 403 on the push advertisement.
	p := proxy(t, srv, func(w http.ResponseWriter, r *http.Request) bool {
		if isReceivePack(r) {
			http.Error(w, "Permission to config denied", http.StatusForbidden)
			return true
		}
		return false
	})
	err := Check(testCtx(t), Remote{URL: p.URL + "/config.git", Token: token})
	var ae *AuthError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusForbidden || !ae.Push {
		t.Fatalf("Check: %v, want an *AuthError (403, pushing)", err)
	}
	if !strings.Contains(err.Error(), "refused authentication for pushing") || !strings.Contains(err.Error(), "write access") {
		t.Errorf("message: %v", err)
	}
	noSecret(t, err)
}

func TestCheckUnreachable(t *testing.T) {
	t.Parallel()
	port := testservers.FreePort(t)
	u := fmt.Sprintf("http://127.0.0.1:%d/config.git", port)
	err := Check(testCtx(t), Remote{URL: strings.Replace(u, "http://", "http://me:"+token+"@", 1)})
	var ue *UnreachableError
	if !errors.As(err, &ue) || ue.URL != u {
		t.Fatalf("Check: %v, want an *UnreachableError for %s", err, u)
	}
	if msg := err.Error(); !strings.Contains(msg, "git repository "+u+" cannot be reached") || !strings.Contains(msg, "connection refused") {
		t.Errorf("message %q: want the URL and the cause", msg)
	}
	noSecret(t, err)
	var ne net.Error
	if !errors.As(err, &ne) {
		t.Errorf("the cause is not kept: %v", err)
	}
}

func TestCheckNotFound(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	err := Check(testCtx(t), Remote{URL: srv.URL + "/missing.git", Token: token})
	var ae *AuthError
	if err == nil || errors.As(err, &ae) || !strings.Contains(err.Error(), "was not found") {
		t.Fatalf("Check: %v, want 'was not found'", err)
	}
	noSecret(t, err)
}

func TestCheckTLS(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	srv.NewRepo(t, "config")
	target, _ := url.Parse(srv.URL)
	ts := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake below
	ts.StartTLS()
	t.Cleanup(ts.Close)
	u := ts.URL + "/config.git"
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}

	err := Check(testCtx(t), Remote{URL: u, Token: token})
	var ue *UnreachableError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "--git-ca-file") {
		t.Errorf("an untrusted certificate: %v, want an *UnreachableError naming --git-ca-file", err)
	}
	if err := Check(testCtx(t), Remote{URL: u, Token: token, CAFile: ca}); err != nil {
		t.Errorf("with the CA file: %v", err)
	}
	if err := Check(testCtx(t), Remote{URL: u, Token: token, InsecureSkipTLSVerify: true}); err != nil {
		t.Errorf("skipping the check: %v", err)
	}
	res, err := Init(testCtx(t), Remote{URL: u, Token: token, CAFile: ca}, "edge", true)
	if err != nil || !res.Pushed {
		t.Fatalf("Init over TLS: %+v %v", res, err)
	}
	if err := Check(testCtx(t), Remote{URL: u, Token: token, CAFile: filepath.Join(t.TempDir(), "missing.pem")}); err == nil || !strings.Contains(err.Error(), "CA file") {
		t.Errorf("a missing CA file: %v", err)
	}
}

func TestRemoteIsChecked(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	u := srv.NewRepo(t, "config")
	for _, tc := range []struct {
		name string
		r    Remote
		want string
	}{
		{"parent", Remote{URL: u, Token: token, Path: "../x"}, `path "../x"`},
		{"inner parent", Remote{URL: u, Token: token, Path: "a/../../x"}, "not clean"},
		{"absolute", Remote{URL: u, Token: token, Path: "/etc"}, "is absolute"},
		{"unclean", Remote{URL: u, Token: token, Path: "a//b"}, "not clean"},
		{"trailing", Remote{URL: u, Token: token, Path: "a/"}, "not clean"},
		{"dot-dot segment", Remote{URL: u, Token: token, Path: ".."}, "leaves the repository"},
		{".git", Remote{URL: u, Token: token, Path: "x/.git/hooks"}, ".git"},
		{"backslash", Remote{URL: u, Token: token, Path: `a\b`}, `"\"`},
		{"empty URL", Remote{Token: token}, "URL is empty"},
		{"ssh", Remote{URL: "git@github.com:org/config.git", Token: token}, "SSH"},
		{"ssh URL", Remote{URL: "ssh://git@github.com/org/config.git", Token: token}, "SSH"},
		{"plain http", Remote{URL: "http://git.example.com/config.git", Token: token}, "unencrypted"},
		{"plain http, credentials", Remote{URL: "http://me:" + token + "@git.example.com/config.git"}, "http://git.example.com/config.git"},
		{"ref branch", Remote{URL: u, Token: token, Branch: "refs/heads/main"}, "short name"},
		{"bad branch", Remote{URL: u, Token: token, Branch: "a..b"}, "not a valid branch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for op, run := range map[string]func() error{
				"Check":         func() error { return Check(testCtx(t), tc.r) },
				"Init":          func() error { _, err := Init(testCtx(t), tc.r, "edge", true); return err },
				"Designate":     func() error { _, err := Designate(testCtx(t), tc.r, "edge"); return err },
				"ConfigRuntime": func() error { _, err := ConfigRuntime(testCtx(t), tc.r); return err },
			} {
				err := run()
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: %v, want %q", op, err, tc.want)
				}
				noSecret(t, err)
			}
		})
	}
	if got := srv.Requests(); got.Authenticated+got.Refused != 0 {
		t.Errorf("a refused Remote reached the server: %+v", got)
	}
	if srv.Commits(t, "config", "main") != 0 {
		t.Error("a refused Remote committed")
	}
}

func TestCredentials(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	srv.NewRepo(t, "config")
	var mu sync.Mutex
	users := map[string]bool{}
	p := proxy(t, srv, func(w http.ResponseWriter, r *http.Request) bool {
		u, _, _ := r.BasicAuth()
		mu.Lock()
		users[u] = true
		mu.Unlock()
		return false
	})
	u := p.URL + "/config.git"
	seen := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for n := range users {
			out = append(out, n)
		}
		clear(users)
		sort.Strings(out)
		return out
	}
	for _, tc := range []struct {
		name  string
		r     Remote
		users []string
	}{
		{"token", Remote{URL: u, Token: token}, []string{DefaultUsername}},
		{"the URL's username with the token", Remote{URL: strings.Replace(u, "http://", "http://x-token-auth@", 1), Token: token}, []string{"x-token-auth"}},
		{"the URL's password without a token", Remote{URL: strings.Replace(u, "http://", "http://me:"+url.PathEscape(token)+"@", 1)}, []string{"me"}},
		{"the token before the URL's password", Remote{URL: strings.Replace(u, "http://", "http://me:stale@", 1), Token: token}, []string{"me"}},
	} {
		if err := Check(testCtx(t), tc.r); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if got := seen(); !reflect.DeepEqual(got, tc.users) {
			t.Errorf("%s: usernames sent %v, want %v", tc.name, got, tc.users)
		}
	}
}

func TestScrub(t *testing.T) {
	c, err := connect(Remote{URL: "https://me:p%40ss@git.example.com/x.git", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	if c.url != "https://git.example.com/x.git" {
		t.Errorf("url %s kept credentials", c.url)
	}
	err = c.scrub(fmt.Errorf("a %s b p@ss c p%%40ss: %w", token, io.EOF))
	if msg := err.Error(); msg != "a *** b *** c ***: EOF" || !errors.Is(err, io.EOF) {
		t.Errorf("scrubbed: %q (still wraps EOF: %v)", msg, errors.Is(err, io.EOF))
	}
	plain := errors.New("nothing secret")
	if c.scrub(plain) != plain {
		t.Error("an error without secrets was rewrapped")
	}
}
