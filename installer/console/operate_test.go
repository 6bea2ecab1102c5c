package console

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/backupstore"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/diff"
	"onprem.dev/onprem/upgrade"
)

// The fake's operations: an upgrade that reports and then waits for the
// test (gate), or fails with a rollback; a configuration with one problem
// on line 3 when it says "profile: huge".
type fakeOps struct {
	mu       sync.Mutex
	gate     chan struct{}
	fail     bool
	upgrades []string
	applied  []string
	ended    int // upgrades that returned
}

func (f *fakeSource) ops() *fakeOps {
	if f.fake == nil {
		f.fake = &fakeOps{gate: make(chan struct{})}
	}
	return f.fake
}

func (f *fakeSource) UpgradeVersions(context.Context) (*action.UpgradeVersionsResult, error) {
	return &action.UpgradeVersionsResult{Installation: "prod", Namespace: "onprem", Installed: "2.6.3", Configured: "2.6.3",
		Reachable: []action.VersionInfo{{Version: "2.7.0", Migrations: []string{"pipelines-build-index-v2"}, Installable: true}, {Version: "2.8.0", Installable: true}}}, nil
}

func (f *fakeSource) UpgradePlan(_ context.Context, to string) (*action.UpgradePlanResult, error) {
	if to == "9.9.9" {
		return nil, errors.New(`version "9.9.9" is unknown; versions reachable from 2.6.3: 2.7.0, 2.8.0`)
	}
	return &action.UpgradePlanResult{Installation: "prod", Namespace: "onprem", Plan: &upgrade.Plan{From: "2.6.3", To: to, Steps: []*upgrade.StepPlan{{
		From: "2.6.3", To: to, Components: []upgrade.ComponentChange{
			{Name: "pipelines-api", Change: upgrade.ComponentChanged, FromChart: "service-2.6.3", ToChart: "service-" + to,
				Images: []upgrade.ImageChange{{Container: "app", From: "pipelines-api:2.6.3", To: "pipelines-api:" + to}}},
			{Name: "redis", Change: upgrade.ComponentUnchanged}},
		Migrations: []upgrade.MigrationPlan{{Name: "pipelines-build-index-v2", Component: "pipelines-api", Backups: []string{"mongodb/pipelines"}}},
	}}}}, nil
}

func (f *fakeSource) Upgrade(ctx context.Context, to string, p Progress) error {
	o := f.ops()
	o.mu.Lock()
	o.upgrades = append(o.upgrades, to)
	fail := o.fail
	o.mu.Unlock()
	defer func() {
		time.Sleep(100 * time.Millisecond) // an interrupted upgrade records its end
		o.mu.Lock()
		o.ended++
		o.mu.Unlock()
	}()
	p.Line("step 1/1: 2.6.3 → " + to)
	p.Component(apply.Event{Component: "pipelines-api", Phase: apply.PhaseApplying})
	select {
	case <-o.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	if fail {
		p.Component(apply.Event{Component: "pipelines-api", Phase: apply.PhaseFailed, Err: errors.New("not ready: password=hunter2hunter2 refused")})
		p.Line("  step failed: pipelines-api did not become ready\n  rolling back the step's components")
		p.Line("  rolled back pipelines-api to revision 1")
		return errors.New("step 2.6.3 → " + to + " failed and was rolled back: pipelines-api did not become ready")
	}
	p.Component(apply.Event{Component: "pipelines-api", Phase: apply.PhaseReady, Revision: 2, Elapsed: 3 * time.Second})
	return nil
}

func (f *fakeSource) Configuration(context.Context) (*Configuration, error) {
	text := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n"
	return &Configuration{Path: "/ops/onprem.yaml", Text: text, Digest: Digest([]byte(text)), Effective: text + "  profile: small\n"}, nil
}

func (f *fakeSource) CheckConfiguration(_ context.Context, text []byte) (*ConfigCheck, error) {
	c := &ConfigCheck{Digest: Digest(text)}
	if strings.Contains(string(text), "huge") {
		c.Problems = config.Errors{{File: "onprem.yaml", Line: 3, Path: "spec.profile", Message: `"huge" is not one of small, medium, large`}}
		return c, nil
	}
	c.Diff = &action.DiffResult{Namespace: "onprem", Version: "2.8.0", Components: []diff.Component{{Name: "pipelines-api",
		Objects: []diff.Object{{Kind: "Deployment", Name: "pipelines-api", Change: diff.Changed, Diff: "-  replicas: 2\n+  replicas: 3\n"}}}}}
	return c, nil
}

func (f *fakeSource) ApplyConfiguration(_ context.Context, text []byte, p Progress) error {
	o := f.ops()
	o.mu.Lock()
	o.applied = append(o.applied, string(text))
	o.mu.Unlock()
	p.Line("wrote /ops/onprem.yaml")
	return nil
}

func (f *fakeSource) SupportBundle(_ context.Context, dir string) (string, error) {
	path := filepath.Join(dir, "onprem-support-20261125-120000.tar.gz")
	return path, os.WriteFile(path, []byte("bundle bytes"), 0o600)
}

func (f *fakeSource) Backups(context.Context) (*action.BackupListResult, error) {
	return &action.BackupListResult{Where: "s3://backups/prod", Backups: []backupstore.Object{{Name: "prod-20261124-020000.onprem-backup", Size: 52_000, Modified: time.Now()}}}, nil
}

// login logs in and returns the session's CSRF token.
func login(t *testing.T, c *http.Client, base string) string {
	t.Helper()
	_, body, _ := get(t, c, base+"/login?token="+token)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token")
	}
	return m[1]
}

func post(t *testing.T, c *http.Client, u string, form url.Values) (int, string, http.Header) {
	t.Helper()
	resp, err := c.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// waitOp polls an operation's live part until it is final.
func waitOp(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, body, _ := get(t, c, u)
		if strings.Contains(body, "data-final") {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("the operation did not end:\n%s", body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The upgrade page lists the reachable versions; the plan shows what
// changes; applying needs the CSRF token and the confirmation, runs in the
// background (a second one is refused while it runs), and its page shows
// the progress to the end; a failing one shows its rollback, redacted.
func TestUpgradeFromTheConsole(t *testing.T) {
	src := healthy()
	o := src.ops()
	srv, c := start(t, src)
	csrf := login(t, c, srv.URL)

	code, body, _ := get(t, c, srv.URL+"/upgrade")
	for _, want := range []string{`<dd id="installed">2.6.3</dd>`, `<option value="2.7.0">`, `<option value="2.8.0">`, "pipelines-build-index-v2"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("the upgrade page lacks %q (%d)", want, code)
		}
	}
	code, body, _ = get(t, c, srv.URL+"/upgrade/plan?to=2.8.0")
	for _, want := range []string{"2.6.3 → 2.8.0", "pipelines-api", "service-2.6.3 → service-2.8.0", "app: pipelines-api:2.6.3 → pipelines-api:2.8.0",
		"backs up mongodb/pipelines", `name="confirm"`} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("the plan lacks %q (%d)", want, code)
		}
	}
	if strings.Contains(body, ">redis<") {
		t.Error("the plan lists an unchanged component")
	}
	_, body, _ = get(t, c, srv.URL+"/upgrade/plan?to=9.9.9")
	if !strings.Contains(body, "versions reachable from 2.6.3") || strings.Contains(body, `id="apply"`) {
		t.Errorf("an unknown version's plan:\n%s", body)
	}

	if code, _, _ := post(t, c, srv.URL+"/upgrade", url.Values{"to": {"2.8.0"}, "confirm": {"yes"}}); code != http.StatusForbidden {
		t.Errorf("apply without the CSRF token: %d", code)
	}
	if code, _, _ := post(t, c, srv.URL+"/upgrade", url.Values{"csrf": {csrf}, "to": {"2.8.0"}}); code != http.StatusBadRequest {
		t.Errorf("apply without the confirmation: %d", code)
	}
	if len(o.upgrades) != 0 {
		t.Fatalf("an upgrade ran without the token and the confirmation: %v", o.upgrades)
	}

	code, body, _ = post(t, c, srv.URL+"/upgrade", url.Values{"csrf": {csrf}, "to": {"2.8.0"}, "confirm": {"yes"}})
	if code != http.StatusOK || !strings.Contains(body, `data-live="/live/operations/1"`) || !strings.Contains(body, "Upgrade to 2.8.0") {
		t.Fatalf("apply: %d\n%s", code, body)
	}
	code, body, _ = post(t, c, srv.URL+"/upgrade", url.Values{"csrf": {csrf}, "to": {"2.7.0"}, "confirm": {"yes"}})
	if code != http.StatusConflict || !strings.Contains(body, "Upgrade to 2.8.0 is running") {
		t.Errorf("a second upgrade while one runs: %d\n%s", code, body)
	}
	// The operation runs in its own goroutine: its first lines reach the
	// page once that goroutine has run, so read until they are there.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		_, body, _ = get(t, c, srv.URL+"/live/operations/1")
		if strings.Contains(body, "applying") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(body, "running") || !strings.Contains(body, "applying") || strings.Contains(body, "data-final") {
		t.Errorf("the running operation:\n%s", body)
	}
	o.gate <- struct{}{}
	body = waitOp(t, c, srv.URL+"/live/operations/1")
	for _, want := range []string{"succeeded", "ready", "step 1/1: 2.6.3 → 2.8.0", "Upgrade to 2.8.0: done"} {
		if !strings.Contains(body, want) {
			t.Errorf("the ended operation lacks %q:\n%s", want, body)
		}
	}

	o.fail = true
	code, _, _ = post(t, c, srv.URL+"/upgrade", url.Values{"csrf": {csrf}, "to": {"2.7.0"}, "confirm": {"yes"}})
	if code != http.StatusOK {
		t.Fatalf("the second upgrade: %d", code)
	}
	o.gate <- struct{}{}
	body = waitOp(t, c, srv.URL+"/live/operations/2")
	for _, want := range []string{"failed", "rolling back the step", "rolled back pipelines-api to revision 1", "was rolled back", `<tr class="failed">`} {
		if !strings.Contains(body, want) {
			t.Errorf("the failed operation lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "hunter2") {
		t.Error("a password reached the page")
	}
	_, body, _ = get(t, c, srv.URL+"/upgrade")
	if !strings.Contains(body, `href="/operations/2">Upgrade to 2.7.0</a>: failed`) || !strings.Contains(body, `href="/operations/1">Upgrade to 2.8.0</a>: succeeded`) {
		t.Errorf("the console's operations are not listed:\n%s", body)
	}
	if code, _, _ := get(t, c, srv.URL+"/operations/77"); code != http.StatusNotFound {
		t.Errorf("an unknown operation: %d", code)
	}
}

// The configuration page shows the file and its effective form; a check
// of an edited copy lists each problem with its line, or the changes with
// the form that applies them; applying needs the confirmation and the
// digest of the text that was checked.
func TestConfigurationFromTheConsole(t *testing.T) {
	src := healthy()
	srv, c := start(t, src)
	csrf := login(t, c, srv.URL)
	code, body, _ := get(t, c, srv.URL+"/config")
	if code != http.StatusOK || !strings.Contains(body, "version: 2.8.0\n</textarea>") || !strings.Contains(body, "profile: small") {
		t.Errorf("the configuration page: %d\n%s", code, body)
	}
	code, body, _ = post(t, c, srv.URL+"/config/check", url.Values{"csrf": {csrf}, "text": {"spec:\r\n  version: 2.8.0\r\n  profile: huge\r\n"}})
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "line 3, spec.profile: &#34;huge&#34; is not one of small, medium, large") || strings.Contains(body, `id="apply"`) {
		t.Errorf("a check with a problem: %d\n%s", code, body)
	}
	edited := "spec:\n  version: 2.8.0\n  replicas: 3\n"
	code, body, _ = post(t, c, srv.URL+"/config/check", url.Values{"csrf": {csrf}, "text": {strings.ReplaceAll(edited, "\n", "\r\n")}})
	if code != http.StatusOK || !strings.Contains(body, "&#43;  replicas: 3") || !strings.Contains(body, `id="apply"`) || !strings.Contains(body, Digest([]byte(edited))) {
		t.Fatalf("a valid check: %d\n%s", code, body)
	}
	if code, _, _ := post(t, c, srv.URL+"/config/apply", url.Values{"csrf": {csrf}, "text": {edited}, "digest": {Digest([]byte(edited))}}); code != http.StatusConflict {
		t.Errorf("apply without the confirmation: %d", code)
	}
	if code, _, _ := post(t, c, srv.URL+"/config/apply", url.Values{"csrf": {csrf}, "text": {edited + "# more\n"}, "digest": {Digest([]byte(edited))}, "confirm": {"yes"}}); code != http.StatusConflict {
		t.Errorf("apply of a text that was not checked: %d", code)
	}
	if n := len(src.ops().applied); n != 0 {
		t.Fatalf("%d applies without the confirmation or the checked text", n)
	}
	code, body, _ = post(t, c, srv.URL+"/config/apply", url.Values{"csrf": {csrf}, "text": {edited}, "digest": {Digest([]byte(edited))}, "confirm": {"yes"}})
	if code != http.StatusOK || !strings.Contains(body, "Install of the edited configuration") {
		t.Fatalf("apply: %d\n%s", code, body)
	}
	body = waitOp(t, c, srv.URL+"/live/operations/1")
	if !strings.Contains(body, "succeeded") || !strings.Contains(body, "wrote /ops/onprem.yaml") {
		t.Errorf("the install operation:\n%s", body)
	}
	if a := src.ops().applied; len(a) != 1 || a[0] != edited {
		t.Errorf("applied %q", a)
	}
}

// The support page lists the bucket's backups and sends a support bundle
// as a download on a POST with the CSRF token.
func TestSupportAndBackups(t *testing.T) {
	srv, c := start(t, healthy())
	csrf := login(t, c, srv.URL)
	code, body, _ := get(t, c, srv.URL+"/support")
	if code != http.StatusOK || !strings.Contains(body, "s3://backups/prod") || !strings.Contains(body, "prod-20261124-020000.onprem-backup") {
		t.Errorf("the support page: %d\n%s", code, body)
	}
	if code, _, _ := post(t, c, srv.URL+"/support", url.Values{}); code != http.StatusForbidden {
		t.Errorf("a download without the CSRF token: %d", code)
	}
	code, body, h := post(t, c, srv.URL+"/support", url.Values{"csrf": {csrf}})
	if code != http.StatusOK || body != "bundle bytes" || h.Get("Content-Disposition") != `attachment; filename="onprem-support-20261125-120000.tar.gz"` || h.Get("Content-Type") != "application/gzip" {
		t.Errorf("the download: %d %v %q", code, h, body)
	}
}

// Stopping the console (Ctrl-C) interrupts a running operation and waits
// for it to end before Serve returns: the library records the
// interruption in the state, nothing is left half-told.
func TestServeWaitsForAnInterruptedOperation(t *testing.T) {
	src := healthy()
	ctx, stop := context.WithCancel(context.Background())
	urls := make(chan string, 1)
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, ServeOptions{Source: src, Listen: "127.0.0.1:0", Ready: func(u string) { urls <- u }})
	}()
	var loginURL string
	select {
	case loginURL = <-urls:
	case err := <-served:
		t.Fatal(err)
	}
	u, _ := url.Parse(loginURL)
	base := "http://" + u.Host
	_, c := start(t, src) // for its client and cookie jar
	_, body, _ := get(t, c, loginURL)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token")
	}
	csrf := m[1]
	if code, _, _ := post(t, c, base+"/upgrade", url.Values{"csrf": {csrf}, "to": {"2.8.0"}, "confirm": {"yes"}}); code != http.StatusOK {
		t.Fatalf("apply: %d", code)
	}
	stop()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the interrupt")
	}
	// The fake upgrade saw its context end, and Serve returned only after
	// it had returned.
	o := src.ops()
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.upgrades) != 1 || o.ended != 1 {
		t.Errorf("upgrades %v, %d ended when Serve returned", o.upgrades, o.ended)
	}
}

// The configuration through the library: a file with a secret-shaped value
// is shown redacted and marked so; the console then refuses to apply an
// edit (the redacted text would replace the real one).
func TestConfigurationRedacted(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "onprem.yaml")
	body := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n" +
		"  components:\n    pipelines-api:\n      values:\n        env: {API_TOKEN: s3cr3t-v4lue-here}\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	a := Actions{Target: action.Target{ConfigPath: path}}
	c, err := a.Configuration(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !c.Redacted || strings.Contains(c.Text, "s3cr3t") || strings.Contains(c.Effective, "s3cr3t") || !strings.Contains(c.Effective, "domain: ci.example.com") {
		t.Errorf("redacted %v\ntext:\n%s\neffective:\n%s", c.Redacted, c.Text, c.Effective)
	}
	check, err := a.CheckConfiguration(context.Background(), []byte("spec:\n  version: 2.8.0\n  domian: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []int
	for _, p := range check.Problems {
		lines = append(lines, p.Line)
	}
	if check.Valid() || !slices.Contains(lines, 3) {
		t.Errorf("problems %+v (invalid %q)", check.Problems, check.Invalid)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the check left files beside the configuration: %v", entries)
	}
	edited := body + "  profile: medium\n"
	srv, cl := start(t, a)
	csrf := login(t, cl, srv.URL)
	code, page, _ := post(t, cl, srv.URL+"/config/apply", url.Values{"csrf": {csrf}, "text": {edited}, "digest": {Digest([]byte(edited))}, "confirm": {"yes"}})
	if code != http.StatusConflict || !strings.Contains(page, "shaped like secrets") {
		t.Errorf("apply over a file with secrets: %d\n%s", code, page)
	}
	if after, _ := os.ReadFile(path); string(after) != body {
		t.Error("the file was changed")
	}
}
