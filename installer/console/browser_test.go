//go:build linux

package console_test

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/sethvargo/go-envconfig"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/console"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/preflight"
)

// A real browser (Debian's Chromium, headless) against the console of a
// platform installed on a real API server: the login URL opens the
// overview with every component Ready, a component's page shows its pods
// and history, the page refreshes itself; requests without the session or
// without the CSRF token are refused. Screenshots of both pages are kept.
func TestConsoleInABrowser(t *testing.T) {
	chrome := testservers.Chromium(t)
	c := testcluster.Start(t)
	ctx := context.Background()
	cfg := filepath.Join(t.TempDir(), "onprem.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\nmetadata:\n  name: console-demo\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n  modules:\n    pipelines: {enabled: false}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := kube.Options{Kubeconfig: c.Kubeconfig}
	if _, err := (&action.Install{Source: action.Source{ConfigPath: cfg, Lookup: envconfig.MapLookuper(map[string]string{})}, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	target := action.Target{Cluster: cl, ConfigPath: cfg}
	status, err := (&action.Status{Target: target}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}

	login, base := serve(t, console.Actions{Target: target})

	// Without the session: the login page, 401; a POST without the CSRF
	// token: refused before anything.
	resp, err := http.Get(base.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("/ without a session: %d", resp.StatusCode)
	}
	resp, err = http.PostForm(base.String()+"/logout", url.Values{})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
		t.Errorf("POST without a session or CSRF token: %d", resp.StatusCode)
	}

	bctx := browser(t, chrome, 3*time.Minute)

	dir := artifacts(t)
	if err := chromedp.Do(bctx, chromedp.Navigate(login), chromedp.WaitVisible(`#components`)); err != nil {
		t.Fatalf("the overview in the browser: %v", err)
	}
	title := run(t, bctx, chromedp.Title())
	mainText := run(t, bctx, chromedp.Text(`main`))
	overview := run(t, bctx, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, "overview.png"), overview, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot %s", filepath.Join(dir, "overview.png"))
	if title != "Overview of console-demo · onprem console" {
		t.Errorf("title %q", title)
	}
	for _, cs := range status.Components {
		if !strings.Contains(mainText, cs.Name) {
			t.Errorf("the overview does not show %s", cs.Name)
		}
	}
	ready := regexp.MustCompile(`(\d+)/(\d+)`).FindAllStringSubmatch(mainText, -1)
	if len(ready) < len(status.Components) {
		t.Errorf("%d readiness figures for %d components:\n%s", len(ready), len(status.Components), mainText)
	}
	for _, m := range ready {
		if m[1] != m[2] {
			t.Errorf("a component is not Ready in the overview: %s", m[0])
		}
	}
	if !strings.Contains(mainText, "install") || !strings.Contains(mainText, "succeeded") {
		t.Errorf("the overview does not show the install in the recent operations:\n%s", mainText)
	}

	// The page refreshes its live part by itself: an operation that takes
	// the installation's lock meanwhile (here the test, as another onprem
	// would) shows up without a reload, and so does its end.
	if lock := run(t, bctx, chromedp.Text(`#lock`)); lock != "free" {
		t.Errorf("the lock before: %q", lock)
	}
	kc, err := kube.Connect(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	held, err := state.Acquire(ctx, kc.Client, "onprem", state.LockOptions{Holder: "ops@jump-1 pid 4242 (onprem upgrade)"})
	if err != nil {
		t.Fatal(err)
	}
	// A mark on the window that a reload would wipe: the changes below
	// must come from the page's own refresh, not a navigation.
	run(t, bctx, chromedp.Evaluate[string](`window.onpremMark = "kept"`))
	const holder = "held by ops@jump-1 pid 4242 (onprem upgrade)"
	waitLock(t, bctx, "the lock's holder", func(s string) bool { return strings.Contains(s, holder) })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitLock(t, bctx, "the lock released", func(s string) bool { return s == "free" })
	if mark := run(t, bctx, chromedp.Evaluate[string](`window.onpremMark || ""`)); mark != "kept" {
		t.Errorf("the page was reloaded to show the lock (mark %q): its live part should refresh in place", mark)
	}

	// A component: its pods and Helm history; reached with the keyboard
	// as well as a mouse (a link).
	name := status.Components[len(status.Components)-1].Name
	if err := chromedp.Do(bctx, chromedp.Navigate(base.String()+"/components/"+name), chromedp.WaitVisible(`#history`)); err != nil {
		t.Fatalf("component %s in the browser: %v", name, err)
	}
	compText := run(t, bctx, chromedp.Text(`main`))
	component := run(t, bctx, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, "component.png"), component, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Component " + name, "Pods", "Container ", "running", "Helm history", "deployed"} {
		if !strings.Contains(compText, want) {
			t.Errorf("the page of %s lacks %q:\n%s", name, want, compText)
		}
	}

	// Runners and runtimes: none on this platform, said so.
	if err := chromedp.Do(bctx, chromedp.Navigate(base.String()+"/attachments"), chromedp.WaitVisible(`#runtimes`)); err != nil {
		t.Fatalf("runners and runtimes in the browser: %v", err)
	}
	if text := run(t, bctx, chromedp.Text(`main`)); !strings.Contains(text, "No runners") || !strings.Contains(text, "No GitOps runtimes") {
		t.Errorf("the runners and runtimes page:\n%s", text)
	}

	// Preflight, run from the keyboard (focus the button, press Enter):
	// every check of onprem's preflight, each with its result.
	if err := chromedp.Do(bctx,
		chromedp.Navigate(base.String()+"/preflight"),
		chromedp.WaitVisible(`#run`),
		chromedp.Focus(`#run`),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(`#results`),
	); err != nil {
		t.Fatalf("preflight in the browser: %v", err)
	}
	preText := run(t, bctx, chromedp.Text(`main`))
	shot := run(t, bctx, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(dir, "preflight.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range preflight.All() {
		if !strings.Contains(preText, c.ID) {
			t.Errorf("the preflight page lacks check %s", c.ID)
		}
	}
	if !strings.Contains(preText, "pass") {
		t.Errorf("no check passed on the preflight page:\n%s", preText)
	}
}

// waitLock waits until the overview's lock line satisfies ok, reading it
// every quarter second for up to a minute: the page refreshes every five
// seconds, and the live part it fetches is computed from the cluster,
// which on a busy 2-core CI machine can take seconds more. How fast the
// page follows is not what this asserts; that it follows without a reload
// is.
func waitLock(t *testing.T, bctx context.Context, what string, ok func(string) bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		lock, err := chromedp.Run(bctx, chromedp.Text(`#lock`))
		if err != nil {
			t.Fatalf("reading #lock: %v", err)
		}
		if ok(lock) {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the overview did not show %s within a minute: %q", what, lock)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}
