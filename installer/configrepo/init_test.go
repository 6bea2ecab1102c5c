package configrepo

import (
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"onprem.dev/onprem/e2e/testservers"
)

const wantDesignation = "apiVersion: onprem.dev/v1alpha1\nkind: ConfigurationRuntime\nruntime: %s\n"

func designationOf(name string) string { return strings.Replace(wantDesignation, "%s", name, 1) }

func TestInitEmptyRepository(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	r := Remote{URL: srv.NewRepo(t, "config"), Token: token}
	if who, err := ConfigRuntime(testCtx(t), r); err != nil || who != "" {
		t.Errorf("ConfigRuntime of an empty repository: %q %v", who, err)
	}

	res, err := Init(testCtx(t), r, "codefresh", true)
	if err != nil {
		t.Fatal(err)
	}
	head := srv.Rev(t, "config", "main")
	if want := (Result{Commit: head, Pushed: true, ConfigRuntime: "codefresh", Initialised: true}); *res != want || head == "" {
		t.Errorf("Init = %+v, want %+v", *res, want)
	}
	if got := srv.Files(t, "config", "main"); !reflect.DeepEqual(got, []string{"resources/README.md", "resources/configuration/runtime.yaml"}) {
		t.Errorf("files: %v", got)
	}
	if got, _ := srv.Show(t, "config", "main", "resources/configuration/runtime.yaml"); got != designationOf("codefresh") {
		t.Errorf("runtime.yaml:\n%s", got)
	}
	if got, _ := srv.Show(t, "config", "main", "resources/README.md"); !strings.Contains(got, "onprem") || !strings.Contains(got, "manages") {
		t.Errorf("README.md:\n%s", got)
	}
	if got := gitLog(t, srv, "config", "main", "%an <%ae>|%cn <%ce>|%s"); !strings.HasPrefix(got, "onprem <onprem@onprem.dev>|onprem <onprem@onprem.dev>|onprem: create the configuration layout in resources") {
		t.Errorf("commit: %s", got)
	}
	if who, err := ConfigRuntime(testCtx(t), r); err != nil || who != "codefresh" {
		t.Errorf("ConfigRuntime = %q %v", who, err)
	}

	// Again, even asking for another runtime: nothing to do.
	res, err = Init(testCtx(t), r, "edge", true)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Result{Commit: head, ConfigRuntime: "codefresh"}); *res != want {
		t.Errorf("second Init = %+v, want %+v", *res, want)
	}
	if n := srv.Commits(t, "config", "main"); n != 1 {
		t.Errorf("%d commits after the second Init, want 1", n)
	}
	if got := srv.Requests(); got.Refused != 0 {
		t.Errorf("requests: %+v", got)
	}
}

func TestInitWithoutDesignation(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	r := Remote{URL: srv.NewRepo(t, "config"), Token: token}
	res, err := Init(testCtx(t), r, "", false)
	if err != nil || !res.Pushed || !res.Initialised || res.ConfigRuntime != "" {
		t.Fatalf("Init: %+v %v", res, err)
	}
	if _, ok := srv.Show(t, "config", "main", "resources/configuration/runtime.yaml"); ok {
		t.Error("a designation was written")
	}
	res, err = Init(testCtx(t), r, "edge", true)
	if err != nil || !res.Pushed || res.Initialised || res.ConfigRuntime != "edge" {
		t.Fatalf("Init designating: %+v %v", res, err)
	}
	if got := gitLog(t, srv, "config", "main", "%s"); got != "onprem: designate runtime edge as the configuration runtime" {
		t.Errorf("commit message %q", got)
	}
}

func TestInitWithPathAndBranch(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	r := Remote{URL: srv.NewRepo(t, "config"), Token: token, Branch: "gitops", Path: "platform/prod"}
	res, err := Init(testCtx(t), r, "codefresh", true)
	if err != nil || !res.Pushed || res.ConfigRuntime != "codefresh" {
		t.Fatalf("Init: %+v %v", res, err)
	}
	if got := srv.Files(t, "config", "gitops"); !reflect.DeepEqual(got, []string{"platform/prod/resources/README.md", "platform/prod/resources/configuration/runtime.yaml"}) {
		t.Errorf("files of gitops: %v", got)
	}
	if srv.Rev(t, "config", "main") != "" {
		t.Error("main was created")
	}
	if res.Commit != srv.Rev(t, "config", "gitops") {
		t.Errorf("Commit %s, gitops is at %s", res.Commit, srv.Rev(t, "config", "gitops"))
	}
	again, err := Init(testCtx(t), r, "codefresh", true)
	if err != nil || again.Pushed || again.Commit != res.Commit {
		t.Errorf("second Init: %+v %v", again, err)
	}
	// The path and the branch tell where the designation is read.
	for _, tc := range []struct {
		r    Remote
		want string
	}{
		{r, "codefresh"},
		{Remote{URL: r.URL, Token: token, Branch: "gitops"}, ""},
		{Remote{URL: r.URL, Token: token, Branch: "main", Path: "platform/prod"}, ""}, // main does not exist
	} {
		if who, err := ConfigRuntime(testCtx(t), tc.r); err != nil || who != tc.want {
			t.Errorf("ConfigRuntime(branch %q, path %q) = %q %v, want %q", tc.r.Branch, tc.r.Path, who, err, tc.want)
		}
	}
	// HEAD names main, which does not exist: the branch must be given.
	if _, err := ConfigRuntime(testCtx(t), Remote{URL: r.URL, Token: token, Path: "platform/prod"}); err == nil || !strings.Contains(err.Error(), "no default branch (HEAD): give the branch to use, one of: gitops") {
		t.Errorf("ConfigRuntime without a branch: %v", err)
	}
}

func TestInitKeepsUnrelatedFiles(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	u := srv.NewRepo(t, "config")
	base := srv.Commit(t, "config", "main", map[string]string{
		"README.md":            "# our config\n",
		"apps/web.yaml":        "kind: Deployment\n",
		"platform/notes.txt":   "keep me\n",
		"platform/resources/x": "operator's own file\n",
		"platform/resources/y": "",
	}, "the team's files")
	r := Remote{URL: u, Token: token, Path: "platform"}
	res, err := Init(testCtx(t), r, "codefresh", true)
	if err != nil || !res.Pushed || !res.Initialised {
		t.Fatalf("Init: %+v %v", res, err)
	}
	want := []string{"README.md", "apps/web.yaml", "platform/notes.txt", "platform/resources/README.md", "platform/resources/configuration/runtime.yaml", "platform/resources/x", "platform/resources/y"}
	if got := srv.Files(t, "config", "main"); !reflect.DeepEqual(got, want) {
		t.Errorf("files: %v\nwant %v", got, want)
	}
	if got, _ := srv.Show(t, "config", "main", "apps/web.yaml"); got != "kind: Deployment\n" {
		t.Errorf("apps/web.yaml changed: %q", got)
	}
	if parent := gitLog(t, srv, "config", "main", "%P"); parent != base {
		t.Errorf("the commit's parent is %s, want the team's %s", parent, base)
	}
	// An operator's own README is kept as it is.
	srv.Commit(t, "config", "main", map[string]string{"platform/resources/README.md": "ours\n"}, "our README")
	res, err = Init(testCtx(t), r, "codefresh", true)
	if err != nil || res.Pushed {
		t.Errorf("Init after the README changed: %+v %v", res, err)
	}
}

func TestInitBranchesOfANonEmptyRepository(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	u := srv.NewRepo(t, "config")
	srv.Commit(t, "config", "trunk", map[string]string{"app.yaml": "a\n"}, "trunk")
	srv.SetDefaultBranch(t, "config", "trunk")

	// No branch: the remote's default.
	res, err := Init(testCtx(t), Remote{URL: u, Token: token}, "codefresh", true)
	if err != nil || !res.Pushed || res.Commit != srv.Rev(t, "config", "trunk") {
		t.Fatalf("Init on the default branch: %+v %v", res, err)
	}
	// A branch that does not exist yet starts from the default one.
	res, err = Init(testCtx(t), Remote{URL: u, Token: token, Branch: "onprem"}, "edge", true)
	if err != nil || !res.Pushed || res.ConfigRuntime != "codefresh" || res.Initialised {
		t.Fatalf("Init on a new branch: %+v %v", res, err)
	}
	if srv.Rev(t, "config", "onprem") != srv.Rev(t, "config", "trunk") {
		t.Error("the new branch is not the default branch's commit")
	}
	// A HEAD that names no branch: the branch must be given.
	srv.SetDefaultBranch(t, "config", "gone")
	_, err = Init(testCtx(t), Remote{URL: u, Token: token}, "codefresh", true)
	if err == nil || !strings.Contains(err.Error(), "no default branch") || !strings.Contains(err.Error(), "onprem, trunk") {
		t.Errorf("no HEAD: %v", err)
	}
}

func TestDesignate(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	r := Remote{URL: srv.NewRepo(t, "config"), Token: token, Path: "platform"}
	if _, err := Init(testCtx(t), r, "codefresh", true); err != nil {
		t.Fatal(err)
	}
	res, err := Designate(testCtx(t), r, "edge")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Result{Commit: srv.Rev(t, "config", "main"), Pushed: true, ConfigRuntime: "edge"}); *res != want {
		t.Errorf("Designate = %+v, want %+v", *res, want)
	}
	if got, _ := srv.Show(t, "config", "main", "platform/resources/configuration/runtime.yaml"); got != designationOf("edge") {
		t.Errorf("runtime.yaml:\n%s", got)
	}
	if got := gitLog(t, srv, "config", "main", "%s"); got != "onprem: designate runtime edge as the configuration runtime (was codefresh)" {
		t.Errorf("commit message %q", got)
	}
	if who, err := ConfigRuntime(testCtx(t), r); err != nil || who != "edge" {
		t.Errorf("ConfigRuntime = %q %v", who, err)
	}
	again, err := Designate(testCtx(t), r, "edge")
	if err != nil || again.Pushed || again.Commit != res.Commit || again.ConfigRuntime != "edge" {
		t.Errorf("designating again: %+v %v", again, err)
	}
	// Init leaves a designation alone.
	if res, err := Init(testCtx(t), r, "codefresh", true); err != nil || res.Pushed || res.ConfigRuntime != "edge" {
		t.Errorf("Init after Designate: %+v %v", res, err)
	}
	if n := srv.Commits(t, "config", "main"); n != 2 {
		t.Errorf("%d commits, want 2", n)
	}
}

func TestDesignateOnAnEmptyRepository(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	r := Remote{URL: srv.NewRepo(t, "config"), Token: token}
	res, err := Designate(testCtx(t), r, "edge")
	if err != nil || !res.Pushed || !res.Initialised || res.ConfigRuntime != "edge" {
		t.Fatalf("Designate: %+v %v", res, err)
	}
	if got := srv.Files(t, "config", "main"); len(got) != 2 {
		t.Errorf("files: %v", got)
	}
}

func TestInvalidDesignation(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	r := Remote{URL: srv.NewRepo(t, "config"), Token: token}
	for _, content := range []string{
		"not: [yaml",
		"apiVersion: v1\nkind: ConfigMap\nruntime: a\n",
		"apiVersion: onprem.dev/v1alpha1\nkind: ConfigurationRuntime\nruntime: Not_A_Name\n",
	} {
		srv.Commit(t, "config", "main", map[string]string{"resources/configuration/runtime.yaml": content}, "broken")
		_, err := ConfigRuntime(testCtx(t), r)
		if err == nil || !strings.Contains(err.Error(), "resources/configuration/runtime.yaml") || !strings.Contains(err.Error(), "designate-config") {
			t.Errorf("ConfigRuntime of %q: %v", content, err)
		}
		if _, err := Init(testCtx(t), r, "edge", true); err == nil || !strings.Contains(err.Error(), "runtime.yaml") {
			t.Errorf("Init over %q: %v", content, err)
		}
	}
	// Designating is the fix.
	res, err := Designate(testCtx(t), r, "edge")
	if err != nil || !res.Pushed {
		t.Fatalf("Designate over a broken designation: %+v %v", res, err)
	}
	if who, err := ConfigRuntime(testCtx(t), r); err != nil || who != "edge" {
		t.Errorf("ConfigRuntime = %q %v", who, err)
	}
}

func TestRuntimeNameIsChecked(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	r := Remote{URL: srv.NewRepo(t, "config"), Token: token}
	for _, name := range []string{"", "Edge", "a_b", "x\nkind: Other"} {
		if _, err := Designate(testCtx(t), r, name); err == nil || !strings.Contains(err.Error(), "runtime") {
			t.Errorf("Designate(%q): %v", name, err)
		}
		if _, err := Init(testCtx(t), r, name, true); err == nil {
			t.Errorf("Init(%q): accepted", name)
		}
	}
	if srv.Commits(t, "config", "main") != 0 {
		t.Error("a bad name committed")
	}
}

func TestWriteErrorsNameTheRepository(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	srv.NewRepo(t, "config")
	// A token that may read but not push: refused at the push.
	p := proxy(t, srv, func(w http.ResponseWriter, r *http.Request) bool {
		if isReceivePack(r) {
			http.Error(w, "denied", http.StatusForbidden)
			return true
		}
		return false
	})
	u := p.URL + "/config.git"
	_, err := Init(testCtx(t), Remote{URL: u, Token: token}, "edge", true)
	var ae *AuthError
	if !errors.As(err, &ae) || !ae.Push || !strings.Contains(err.Error(), u) {
		t.Errorf("Init with a read-only token: %v", err)
	}
	noSecret(t, err)
	_, err = Designate(testCtx(t), Remote{URL: srv.URL + "/config.git", Token: "wrong-token"}, "edge")
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusUnauthorized {
		t.Errorf("Designate with a wrong token: %v", err)
	}
	noSecret(t, err, "wrong-token")
	_, err = ConfigRuntime(testCtx(t), Remote{URL: srv.URL + "/config.git", Token: "wrong-token"})
	if !errors.As(err, &ae) {
		t.Errorf("ConfigRuntime with a wrong token: %v", err)
	}
	noSecret(t, err, "wrong-token")
}

// Another writer pushes to the branch after Init read it: Init's push is
// refused (by the server, or by go-git seeing the remote moved), it reads
// the branch again and pushes on top.
func TestLostRaceIsRetried(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"advertisement", "pack"} {
		t.Run(when, func(t *testing.T) {
			t.Parallel()
			srv := testservers.StartGit(t, token)
			srv.NewRepo(t, "config")
			srv.Commit(t, "config", "main", map[string]string{"a.txt": "1\n"}, "first")
			var raced atomic.Bool
			p := proxy(t, srv, func(w http.ResponseWriter, r *http.Request) bool {
				hit := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack")
				if when == "advertisement" {
					hit = r.Method == http.MethodGet && r.URL.Query().Get("service") == "git-receive-pack"
				}
				if hit && raced.CompareAndSwap(false, true) {
					srv.Commit(t, "config", "main", map[string]string{"b.txt": "other writer\n"}, "other writer")
				}
				return false
			})
			res, err := Init(testCtx(t), Remote{URL: p.URL + "/config.git", Token: token}, "edge", true)
			if err != nil || !res.Pushed || !raced.Load() {
				t.Fatalf("Init: %+v %v (raced %v)", res, err, raced.Load())
			}
			if got := srv.Files(t, "config", "main"); !reflect.DeepEqual(got, []string{"a.txt", "b.txt", "resources/README.md", "resources/configuration/runtime.yaml"}) {
				t.Errorf("files: %v", got)
			}
			if n := srv.Commits(t, "config", "main"); n != 3 {
				t.Errorf("%d commits, want 3", n)
			}
		})
	}
}

// Runtimes installed at the same time on an empty repository: one is
// designated, all agree on which, and each change is pushed once.
func TestConcurrentInits(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	r := Remote{URL: srv.NewRepo(t, "config"), Token: token}
	names := []string{"a", "b", "c"}
	results := make([]*Result, len(names))
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Go(func() { results[i], errs[i] = Init(testCtx(t), r, n, true) })
	}
	wg.Wait()
	who, err := ConfigRuntime(testCtx(t), r)
	if err != nil || who == "" {
		t.Fatalf("ConfigRuntime = %q %v", who, err)
	}
	pushed := 0
	for i := range names {
		if errs[i] != nil {
			t.Errorf("Init %s: %v", names[i], errs[i])
			continue
		}
		if results[i].ConfigRuntime != who {
			t.Errorf("Init %s says %q is designated; the repository says %q", names[i], results[i].ConfigRuntime, who)
		}
		if results[i].Pushed {
			pushed++
		}
	}
	if pushed != 1 || srv.Commits(t, "config", "main") != 1 {
		t.Errorf("%d pushes, %d commits; want 1 and 1", pushed, srv.Commits(t, "config", "main"))
	}
}

func TestPathThatIsAFile(t *testing.T) {
	t.Parallel()
	srv := testservers.StartGit(t, token)
	u := srv.NewRepo(t, "config")
	srv.Commit(t, "config", "main", map[string]string{"platform": "a file\n", "other/resources": "a file\n"}, "files")
	for _, p := range []string{"platform", "other"} {
		_, err := Init(testCtx(t), Remote{URL: u, Token: token, Path: p}, "edge", true)
		if err == nil || !strings.Contains(err.Error(), "is a file") || !strings.Contains(err.Error(), u) {
			t.Errorf("Init at %s: %v", p, err)
		}
	}
	if n := srv.Commits(t, "config", "main"); n != 1 {
		t.Errorf("%d commits, want 1", n)
	}
}
