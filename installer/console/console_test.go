package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/gitops"
	"onprem.dev/onprem/installer/runner"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/topology"
	"onprem.dev/onprem/preflight"
)

// fakeSource is an in-memory Source for the unit tests.
type fakeSource struct {
	status     *action.StatusResult
	err        error
	preflights int
	fake       *fakeOps
}

func (f *fakeSource) Status(context.Context) (*action.StatusResult, error) { return f.status, f.err }
func (f *fakeSource) Preflight(context.Context) (*preflight.Report, error) {
	f.preflights++
	return &preflight.Report{Findings: []preflight.Finding{
		{ID: "kubernetes.version", Title: "the cluster runs a supported Kubernetes", Outcome: preflight.Outcome{Result: preflight.Pass, Message: "v1.36.3"}},
		{ID: "storage", Title: "a default StorageClass", Outcome: preflight.Outcome{Result: preflight.Fail, Message: "no default StorageClass",
			Remediation: "mark one default: kubectl annotate storageclass NAME storageclass.kubernetes.io/is-default-class=true"}},
	}}, errors.New("preflight: 1 check(s) failed (storage); nothing was changed")
}

func (f *fakeSource) Attachments(context.Context) (*Attachments, error) {
	return &Attachments{
		Runners: &action.RunnerListResult{Namespace: "onprem", Runners: []runner.Status{{Name: "gpu", Server: "https://10.0.0.9:6443", Namespace: "onprem-runner-gpu",
			Version: "2.8.0", Reachable: true, Release: "deployed", Agent: runner.Readiness{Ready: 1, Desired: 1}, Engine: runner.Readiness{Ready: 1, Desired: 1}, Ready: true}}},
		Runtimes: &action.RuntimeListResult{Namespace: "onprem", Repository: "https://git.example.com/cfg.git", ConfigRuntime: "edge",
			Runtimes: []gitops.Status{{Name: "edge", Server: "https://10.0.0.7:6443", Namespace: "edge", Version: "2.8.0", Chart: "gitops-runtime-0.26.0",
				Problem: "unreachable: dial tcp 10.0.0.7:6443: i/o timeout"}}},
	}, nil
}

func (f *fakeSource) Component(_ context.Context, name string) (*action.ComponentDetail, error) {
	if name != "pipelines-api" {
		return nil, errors.New(`component "` + name + `" is not installed`)
	}
	return &action.ComponentDetail{Name: name, Namespace: "onprem", Pods: []action.PodDetail{{Name: "pipelines-api-1", Phase: "Running", Ready: true,
		Containers: []action.ContainerDetail{{Name: "app", Image: "registry.example.com/pipelines-api:2.8.0", Ready: true, State: "running",
			Log: []string{"listening on :8080", "<script>alert(1)</script>"}}}}}}, nil
}

var token = strings.Repeat("ab", 32)

func start(t *testing.T, src Source) (*httptest.Server, *http.Client) {
	t.Helper()
	s, err := New(src, Options{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	return srv, &http.Client{Jar: jar, Timeout: 10 * time.Second}
}

func get(t *testing.T, c *http.Client, u string) (int, string, http.Header) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

func healthy() *fakeSource {
	return &fakeSource{status: &action.StatusResult{Installation: "prod", Namespace: "onprem", Installed: true, Version: "2.8.0",
		Components: []action.ComponentStatus{{Name: "pipelines-api", Chart: "service-2.8.0", Release: "deployed", Revision: 3, Ready: 2, Desired: 2}},
		Recent:     []state.Operation{{Kind: "install", Version: "2.8.0", Outcome: "succeeded", Started: time.Now(), Installer: "0.1.0", Host: "ops-1"}}}}
}

// Without a session every page is the login page with 401; a wrong token
// is refused; the right one sets a strict, HttpOnly cookie and the pages
// show the installation; security headers on every response.
func TestLoginAndPages(t *testing.T) {
	srv, c := start(t, healthy())

	for _, path := range []string{"/", "/live/overview", "/components/pipelines-api"} {
		code, body, _ := get(t, c, srv.URL+path)
		if code != http.StatusUnauthorized || !strings.Contains(body, `<label for="token">`) || strings.Contains(body, "pipelines-api</a>") {
			t.Errorf("%s without a session: %d\n%s", path, code, body)
		}
	}
	code, body, _ := get(t, c, srv.URL+"/login?token="+strings.Repeat("cd", 32))
	if code != http.StatusUnauthorized || !strings.Contains(body, "That token is not this console") {
		t.Errorf("a wrong token: %d", code)
	}

	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Get(srv.URL + "/login?token=" + token)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == SessionCookie {
			cookie = ck
		}
	}
	if resp.StatusCode != http.StatusSeeOther || cookie == nil || !cookie.HttpOnly || cookie.SameSite != http.SameSiteStrictMode || cookie.Value == token {
		t.Fatalf("login: %d, cookie %+v", resp.StatusCode, cookie)
	}

	code, body, h := get(t, c, srv.URL+"/login?token="+token) // follows to /
	if code != http.StatusOK || !strings.Contains(body, "Overview of prod") || !strings.Contains(body, `<a href="/components/pipelines-api">pipelines-api</a>`) ||
		!strings.Contains(body, "2/2") || !strings.Contains(body, "ops-1") {
		t.Fatalf("overview: %d\n%s", code, body)
	}
	for k, v := range map[string]string{"X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer", "Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"} {
		if h.Get(k) != v {
			t.Errorf("header %s = %q, want %q", k, h.Get(k), v)
		}
	}
	if !strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Errorf("CSP %q", h.Get("Content-Security-Policy"))
	}
	for _, want := range []string{"<title>Overview of prod · onprem console</title>", "<h1>", "<h2 id=\"components\">", "<h2 id=\"backups\">", "None recorded and none scheduled", `<dd id="lock">free</dd>`, `lang="en"`} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}

	// The component page escapes what it shows.
	code, body, _ = get(t, c, srv.URL+"/components/pipelines-api")
	if code != http.StatusOK || !strings.Contains(body, "listening on :8080") || strings.Contains(body, "<script>alert(1)") || !strings.Contains(body, "&lt;script&gt;") {
		t.Errorf("component page: %d\n%s", code, body)
	}
	// A component that cannot be read: a banner, not a failure.
	code, body, _ = get(t, c, srv.URL+"/components/nope")
	if code != http.StatusOK || !strings.Contains(body, `role="alert"`) || !strings.Contains(body, "is not installed") {
		t.Errorf("unknown component: %d\n%s", code, body)
	}
}

// The overview names each component's drift (what differs from what onprem
// applied), marks its row, and says that install reverts it.
func TestOverviewShowsDrift(t *testing.T) {
	src := healthy()
	src.status.Components = append(src.status.Components,
		action.ComponentStatus{Name: "gitops-ui", Chart: "service-2.8.0", Release: "deployed", Revision: 1, Ready: 1, Desired: 1,
			Drift: []string{"Deployment/gitops-ui image", "Service/gitops-ui (deleted)"}})
	srv, c := start(t, src)
	code, body, _ := get(t, c, srv.URL+"/login?token="+token)
	if code != http.StatusOK {
		t.Fatalf("login: %d", code)
	}
	row := regexp.MustCompile(`(?s)<tr class="(\w+)">\s*<th scope="row"><a href="/components/gitops-ui">.*?</tr>`).FindStringSubmatch(body)
	if row == nil {
		t.Fatalf("no row for gitops-ui:\n%s", body)
	}
	for _, want := range []string{"drifted: Deployment/gitops-ui image", "drifted: Service/gitops-ui (deleted)"} {
		if !strings.Contains(row[0], want) {
			t.Errorf("the row of gitops-ui does not say %q:\n%s", want, row[0])
		}
	}
	if row[1] != "bad" {
		t.Errorf("the row of a drifted component is %q, want bad", row[1])
	}
	if ok := regexp.MustCompile(`<tr class="ok">\s*<th scope="row"><a href="/components/pipelines-api">`).MatchString(body); !ok {
		t.Error("the component without drift is not shown ok")
	}
	if !strings.Contains(body, "'onprem install' reverts it") {
		t.Error("the overview does not say what reverts drift")
	}
}

// A change (POST) needs the session's CSRF token: without it 403, with it
// the change happens (here: logging out ends the session).
func TestCSRF(t *testing.T) {
	srv, c := start(t, healthy())
	if code, _, _ := get(t, c, srv.URL+"/login?token="+token); code != http.StatusOK {
		t.Fatal("login failed")
	}
	resp, err := c.PostForm(srv.URL+"/logout", url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout without the CSRF token: %d", resp.StatusCode)
	}
	resp, err = c.PostForm(srv.URL+"/logout", url.Values{"csrf": {strings.Repeat("0", 64)}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("logout with a wrong CSRF token: %d", resp.StatusCode)
	}
	_, body, _ := get(t, c, srv.URL+"/")
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF token in the page:\n%s", body)
	}
	resp, err = c.PostForm(srv.URL+"/logout", url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("logout with the CSRF token: %d", resp.StatusCode)
	}
	if code, _, _ := get(t, c, srv.URL+"/"); code != http.StatusUnauthorized {
		t.Errorf("after logout: %d", code)
	}
}

// When the cluster cannot be read the page says so in a banner and keeps
// polling; no stack trace, no 500.
func TestClusterLost(t *testing.T) {
	src := &fakeSource{err: errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")}
	srv, c := start(t, src)
	code, body, _ := get(t, c, srv.URL+"/login?token="+token)
	if code != http.StatusOK || !strings.Contains(body, "connection refused") || !strings.Contains(body, `data-live="/live/overview"`) || strings.Contains(body, "goroutine") {
		t.Errorf("cluster lost: %d\n%s", code, body)
	}
}

func TestNewRefusesAShortToken(t *testing.T) {
	if _, err := New(healthy(), Options{Token: "short"}); err == nil {
		t.Error("a short token was accepted")
	}
	a, _ := NewToken()
	b, _ := NewToken()
	if len(a) != 64 || a == b {
		t.Errorf("tokens %q %q", a, b)
	}
}

// Preflight runs only on a POST with the CSRF token, and shows every
// result with its remediation.
func TestPreflightPage(t *testing.T) {
	src := healthy()
	srv, c := start(t, src)
	_, body, _ := get(t, c, srv.URL+"/login?token="+token)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token")
	}
	code, body, _ := get(t, c, srv.URL+"/preflight")
	if code != http.StatusOK || !strings.Contains(body, "Run the checks") || src.preflights != 0 {
		t.Fatalf("GET /preflight: %d, %d runs\n%s", code, src.preflights, body)
	}
	resp, err := c.PostForm(srv.URL+"/preflight", url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || src.preflights != 0 {
		t.Fatalf("POST /preflight without the CSRF token: %d, %d runs", resp.StatusCode, src.preflights)
	}
	resp, err = c.PostForm(srv.URL+"/preflight", url.Values{"csrf": {m[1]}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	body = string(b)
	for _, want := range []string{"2 checks", "kubernetes.version", "no default StorageClass", "storageclass.kubernetes.io/is-default-class=true", "1 check(s) failed", `<tr class="fail">`} {
		if !strings.Contains(body, want) {
			t.Errorf("the preflight results lack %q", want)
		}
	}
	if resp.StatusCode != http.StatusOK || src.preflights != 1 {
		t.Errorf("POST /preflight: %d, %d runs", resp.StatusCode, src.preflights)
	}
}

// The runners and runtimes page shows each with its health, an
// unreachable one with the reason.
func TestAttachmentsPage(t *testing.T) {
	srv, c := start(t, healthy())
	get(t, c, srv.URL+"/login?token="+token)
	code, body, _ := get(t, c, srv.URL+"/attachments")
	for _, want := range []string{"<title>Runners and runtimes · onprem console</title>", "gpu", "1/1", "ready", "edge", "unreachable: dial tcp 10.0.0.7:6443: i/o timeout",
		"held by edge", `data-live="/live/attachments"`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("the runners and runtimes page lacks %q (%d)", want, code)
		}
	}
}

// With a replicated PostgreSQL the overview lists its members, their roles,
// nodes and lag, and says in a banner when no synchronous replica is ready;
// MongoDB's members with their lag in time.
func TestOverviewShowsReplicatedDatabases(t *testing.T) {
	src := healthy()
	lag, lagSeconds := int64(4096), 2.5
	src.status.Databases = []*topology.Topology{{Engine: "postgresql", Replicated: true, Desired: 3, Primary: "postgresql-1",
		Members: []topology.Member{
			{Name: "postgresql-0", Node: "node-a", Role: topology.RoleUnknown, Ready: false},
			{Name: "postgresql-1", Node: "node-b", Role: topology.RolePrimary, State: "running", Ready: true},
			{Name: "postgresql-2", Node: "node-c", Role: topology.RoleReplica, State: "running", Ready: true, Synchronous: false, LagBytes: &lag},
		}}, {Engine: "mongodb", Replicated: true, Desired: 3, Primary: "mongodb-0", Quorum: true,
		Members: []topology.Member{
			{Name: "mongodb-0", Node: "node-a", Role: topology.RolePrimary, State: "PRIMARY", Ready: true},
			{Name: "mongodb-1", Node: "node-b", Role: topology.RoleReplica, State: "SECONDARY", Ready: true, LagSeconds: &lagSeconds},
		}}}
	srv, c := start(t, src)
	code, body, _ := get(t, c, srv.URL+"/login?token="+token)
	if code != http.StatusOK {
		t.Fatalf("overview: %d", code)
	}
	for _, want := range []string{`<h2 id="databases">`, "<td>postgresql-1</td><td>primary</td><td>node-b</td>", "<td>postgresql-0</td><td>unknown</td><td>node-a</td><td> (not ready)</td>",
		"<td>4096 bytes</td>", `role="alert">primary postgresql-1, no synchronous replica`,
		"<h3>mongodb</h3>", "<td>mongodb-1</td><td>replica</td><td>node-b</td><td>SECONDARY</td><td></td><td>2.5 s</td>"} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %q", want)
		}
	}
	src.status.Databases = nil
	if _, body, _ := get(t, c, srv.URL+"/"); strings.Contains(body, `id="databases"`) {
		t.Error("a databases section without a replicated database")
	}
}
