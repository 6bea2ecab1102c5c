//go:build linux

package console_test

import (
	"context"
	"encoding/json"
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
)

// upgradeConfig is the whole platform at a version, with extra lines of
// spec.
func upgradeConfig(version string, extra ...string) string {
	return "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nmetadata:\n  name: console-upgrade\nspec:\n  version: " + version +
		"\n  domain: ci.example.com\n" + strings.Join(extra, "")
}

// neverReady writes a kustomize Component that keeps pipelines-api's new
// pods from turning Ready on the integration ring, and returns the spec
// line that uses it.
func neverReady(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fault")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	body := "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\npatches:\n  - target: {kind: Deployment, name: pipelines-api}\n" +
		"    patch: |\n      - op: add\n        path: /spec/template/metadata/annotations\n        value: {" + testcluster.AnnotationNeverReady + ": \"true\"}\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return "  overlays: [" + dir + "]\n"
}

// An upgrade driven from a real browser against a platform on a real API
// server: the Upgrade page lists the reachable versions, the plan shows
// each step, and applying (after the confirmation) shows the progress live
// until the end. A step whose component never turns Ready is rolled back,
// and the page shows the rollback as it happens; without the fault the
// upgrade across two steps reaches the end. The Configuration page checks
// an edited copy and shows each problem with its line, or the changes it
// makes, and installs it once they are confirmed; the Support page hands
// out a support bundle. Screenshots are kept.
func TestConsoleUpgradeInABrowser(t *testing.T) {
	chrome := testservers.Chromium(t)
	c := testcluster.Start(t)
	ctx := context.Background()
	cfg := filepath.Join(t.TempDir(), "onprem.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(upgradeConfig("2.6.3"))
	cl := kube.Options{Kubeconfig: c.Kubeconfig}
	if _, err := (&action.Install{Source: action.Source{ConfigPath: cfg, Lookup: envconfig.MapLookuper(map[string]string{})}, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	// The fault, in the file the console reads: 2.7.0's pipelines-api
	// never turns Ready.
	write(upgradeConfig("2.6.3", neverReady(t)))
	target := action.Target{Cluster: cl, ConfigPath: cfg}

	// The timeout is also each rollback's bound (upgrade.RollbackTimeout):
	// with 20 s, the same never-ready step in installer/action's test once
	// failed its rollback of RabbitMQ on CI's loaded machine.
	login, base := serve(t, console.Actions{Target: target, Timeout: 40 * time.Second})

	bctx := browser(t, chrome, 8*time.Minute)
	dir := artifacts(t)
	shot := func(name string) {
		t.Helper()
		b := run(t, bctx, chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot %s", filepath.Join(dir, name))
	}
	// The page is driven through small scripts: a page that refreshes
	// its live part replaces nodes that a query of DevTools would hold.
	js := func(expr string) string {
		t.Helper()
		return run(t, bctx, chromedp.Evaluate[string](expr))
	}
	quote := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}
	textOf := func(css string) string {
		t.Helper()
		return js(`(function(){ const e = document.querySelector(` + quote(css) + `); return e ? e.innerText : ""; })()`)
	}
	// open loads a page and waits until the element css is there.
	waitFor := func(css string) {
		t.Helper()
		for end := time.Now().Add(time.Minute); ; {
			if js(`document.readyState === "complete" && !window.onpremOld && document.querySelector(`+quote(css)+`) ? "yes" : ""`) == "yes" {
				return
			}
			if time.Now().After(end) {
				t.Fatalf("no %s within a minute on %s:\n%s", css, js(`document.location.pathname`), textOf("main"))
			}
			if err := chromedp.Do(bctx, chromedp.Sleep(100*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
	}
	open := func(path, css string) {
		t.Helper()
		if err := chromedp.Do(bctx, chromedp.Navigate(base.String()+path)); err != nil {
			t.Fatalf("opening %s: %v", path, err)
		}
		waitFor(css)
	}
	// submit clicks a form's button and waits for the next page to have
	// the element css.
	submit := func(button, css string) {
		t.Helper()
		js(`window.onpremOld = true; document.getElementById(` + quote(button) + `).click(); ""`)
		waitFor(css)
	}
	setValue := func(id, value string) {
		t.Helper()
		js(`document.getElementById(` + quote(id) + `).value = ` + quote(value) + `; ""`)
	}

	if err := chromedp.Do(bctx, chromedp.Navigate(login)); err != nil {
		t.Fatalf("login: %v", err)
	}
	waitFor(`#components`)

	// plan opens the Upgrade page, picks a version and shows its plan.
	plan := func(to string) string {
		t.Helper()
		open("/upgrade", `#to`)
		setValue("to", to)
		submit("plan", `#apply`)
		return textOf("main")
	}
	// apply confirms what the page shows and applies it, then follows the
	// progress until the operation ends (the page updates by itself).
	apply := func(during ...func()) string {
		t.Helper()
		js(`document.getElementById("confirm").checked = true; ""`)
		submit("apply", `#outcome, p.banner`)
		if path := js(`document.location.pathname`); !strings.HasPrefix(path, "/operations/") {
			t.Fatalf("applying did not start an operation (%s):\n%s", path, textOf("main"))
		}
		for _, f := range during {
			f()
		}
		var seen []string
		deadline := time.Now().Add(5 * time.Minute)
		for {
			outcome := textOf(`#outcome`)
			if len(seen) == 0 || seen[len(seen)-1] != outcome {
				seen = append(seen, outcome)
			}
			if !strings.Contains(outcome, "running") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the operation did not end within 5 minutes: %q", outcome)
			}
			if err := chromedp.Do(bctx, chromedp.Sleep(500*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
		if !strings.Contains(seen[0], "running") {
			t.Errorf("the page never showed the operation running: %q", seen)
		}
		return textOf("main")
	}

	text := plan("2.7.0")
	for _, want := range []string{"2.6.3 → 2.7.0", "pipelines-api", "changed", "pipelines-build-index-v2"} {
		if !strings.Contains(text, want) {
			t.Errorf("the plan to 2.7.0 lacks %q:\n%s", want, text)
		}
	}
	shot("upgrade-plan.png")
	text = apply()
	shot("upgrade-rollback.png")
	for _, want := range []string{"failed", "step 1/1: 2.6.3 → 2.7.0", "rolling back the step's components", "pipelines-api", "rolled back"} {
		if !strings.Contains(text, want) {
			t.Errorf("the failed upgrade's page lacks %q:\n%s", want, text)
		}
	}
	if st := status(t, target); st.Version != "2.6.3" {
		t.Errorf("after the rolled-back upgrade the platform is at %s", st.Version)
	}

	// Without the fault: two steps, to the end.
	write(upgradeConfig("2.6.3"))
	text = plan("2.8.0")
	if !strings.Contains(text, "2.6.3 → 2.7.0 → 2.8.0") {
		t.Errorf("the plan to 2.8.0 is not two steps:\n%s", text)
	}
	// While it runs, a second tab's overview shows who holds the lock.
	text = apply(func() {
		tab, closeTab := chromedp.NewContext(bctx)
		defer closeTab()
		if err := chromedp.Do(tab, chromedp.Navigate(base.String()+"/")); err != nil {
			t.Fatalf("a second tab: %v", err)
		}
		lock := run(t, tab, chromedp.Evaluate[string](`document.getElementById("lock").innerText`))
		if !strings.Contains(lock, "held by") || !strings.Contains(lock, " upgrade)") {
			t.Errorf("a second tab's overview during the upgrade: lock %q", lock)
		}
	})
	shot("upgrade.png")
	for _, want := range []string{"succeeded", "step 1/2: 2.6.3 → 2.7.0", "step 2/2: 2.7.0 → 2.8.0", "is at 2.8.0"} {
		if !strings.Contains(text, want) {
			t.Errorf("the upgrade's page lacks %q:\n%s", want, text)
		}
	}
	if !regexp.MustCompile(`gitops-manager\s+removed`).MatchString(text) {
		t.Errorf("the upgrade's page does not show gitops-manager (dropped by 2.8.0) removed:\n%s", text)
	}
	if st := status(t, target); st.Version != "2.8.0" {
		t.Errorf("after the upgrade the platform is at %s", st.Version)
	}

	// Configuration: an edited copy with a wrong value is refused with its
	// line; the file is not touched.
	before, _ := os.ReadFile(cfg)
	open("/config", `#effective-yaml`)
	setValue("text", upgradeConfig("2.8.0", "  profile: huge\n"))
	submit("check-button", `#problems`)
	problems := textOf(`#problems`)
	shot("config.png")
	if !strings.Contains(problems, "line 8, spec.profile") {
		t.Errorf("the problem is not shown with its line: %q", problems)
	}
	if after, _ := os.ReadFile(cfg); string(after) != string(before) {
		t.Error("a check changed the configuration file")
	}
	// A valid edit: its changes are shown; once confirmed, it is written
	// over the file and installed, with its progress to the end.
	edited := upgradeConfig("2.8.0", "  components:\n    pipelines-api:\n      values: {replicas: 2}\n")
	open("/config", `#effective-yaml`)
	setValue("text", edited)
	submit("check-button", `#check`)
	if heading := textOf(`#check`); heading != "The edited configuration is valid" {
		t.Fatalf("the check of a valid edit:\n%s", textOf("main"))
	}
	if changes := textOf(`#changes`); !strings.Contains(changes, "would change") || strings.Contains(changes, ": nothing") {
		t.Errorf("the changes of two replicas of pipelines-api: %q", changes)
	}
	if after, _ := os.ReadFile(cfg); string(after) != string(before) {
		t.Error("a check changed the configuration file")
	}
	shot("config-changes.png")
	text = apply()
	shot("config-install.png")
	if !strings.Contains(text, "succeeded") || !strings.Contains(text, "wrote "+cfg) {
		t.Errorf("the install of the edited configuration:\n%s", text)
	}
	if after, _ := os.ReadFile(cfg); string(after) != edited {
		t.Errorf("the file after the install:\n%s", after)
	}

	// Support: the browser downloads a support bundle (fetched as the
	// form would post it: a gzip file named as 'onprem support-bundle'
	// names it).
	open("/support", `#download`)
	if text := textOf(`section[aria-labelledby="bucket"]`); !strings.Contains(text, "no bucket") {
		t.Errorf("the backups without a bucket: %q", text)
	}
	type download struct {
		Status      int    `json:"status"`
		Disposition string `json:"disposition"`
		Size        int    `json:"size"`
		Magic       int    `json:"magic"`
	}
	got := run(t, bctx, chromedp.Evaluate[download](`(async () => {
  const form = document.querySelector('form[action="/support"]');
  const r = await fetch('/support', {method: 'POST', body: new URLSearchParams(new FormData(form))});
  const b = new Uint8Array(await r.arrayBuffer());
  return {status: r.status, disposition: r.headers.get('Content-Disposition') || '', size: b.length, magic: b[0] * 256 + b[1]};
})()`, chromedp.EvalAwaitPromise))
	if got.Status != 200 || !strings.HasPrefix(got.Disposition, `attachment; filename="onprem-support-`) || got.Magic != 0x1f8b || got.Size < 1000 {
		t.Errorf("the support bundle download: %+v", got)
	}
}

func status(t *testing.T, target action.Target) *action.StatusResult {
	t.Helper()
	st, err := (&action.Status{Target: target}).Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}
