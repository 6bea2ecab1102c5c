//go:build linux

package testservers

import (
	"crypto/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// gitCLI runs Git's own client in dir, without the host's configuration
// and without prompting.
func gitCLI(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "LC_ALL=C",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func withCredentials(url, user, password string) string {
	return strings.Replace(url, "http://", "http://"+user+":"+password+"@", 1)
}

func TestGitServerClonesAndPushesWithTheToken(t *testing.T) {
	t.Parallel()
	const token = "tok-0123456789"
	srv := StartGit(t, token)
	url := srv.NewRepo(t, "org/config")
	if want := srv.URL + "/org/config.git"; url != want {
		t.Fatalf("NewRepo = %s, want %s", url, want)
	}
	work := filepath.Join(t.TempDir(), "work")
	if out, err := gitCLI(t, "", "clone", withCredentials(url, "anyone", token), work); err != nil {
		t.Fatalf("clone of the empty repository: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(work, "a.txt"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Larger than http.postBuffer (1 MiB): Git sends it chunked.
	big := make([]byte, 3<<20)
	_, _ = rand.Read(big)
	if err := os.WriteFile(filepath.Join(work, "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"add", "."}, {"commit", "-q", "-m", "first"}, {"push", "-q", "origin", "HEAD:main"}} {
		if out, err := gitCLI(t, work, args...); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if got, ok := srv.Show(t, "org/config", "main", "a.txt"); !ok || got != "hello\n" {
		t.Errorf("Show main:a.txt = %q %v", got, ok)
	}
	if got, ok := srv.Show(t, "org/config", "main", "big.bin"); !ok || got != string(big) {
		t.Errorf("the chunked push did not arrive whole (%d bytes, %v)", len(got), ok)
	}
	if n := srv.Commits(t, "org/config", "main"); n != 1 {
		t.Errorf("Commits = %d, want 1", n)
	}
	if head, _ := gitCLI(t, work, "rev-parse", "HEAD"); strings.TrimSpace(head) != srv.Rev(t, "org/config", "main") {
		t.Errorf("Rev main = %s, pushed %s", srv.Rev(t, "org/config", "main"), head)
	}
	if got := srv.Requests(); got.Authenticated == 0 {
		t.Errorf("Requests = %+v: none authenticated", got)
	}

	// Refused: a wrong token, no token.
	before := srv.Requests().Refused
	for _, u := range []string{withCredentials(url, "anyone", "wrong"), url} {
		out, err := gitCLI(t, "", "ls-remote", u)
		if err == nil || !strings.Contains(out, "Authentication failed") && !strings.Contains(out, "could not read Username") {
			t.Errorf("ls-remote %s: %v\n%s", u, err, out)
		}
		if strings.Contains(out, token) {
			t.Error("the token is in git's output")
		}
	}
	if after := srv.Requests().Refused; after <= before {
		t.Errorf("refused requests: %d before, %d after", before, after)
	}
	resp, err := http.Get(url + "/info/refs?service=git-upload-pack")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != `Basic realm="git"` {
		t.Errorf("no credentials: %s, WWW-Authenticate %q", resp.Status, resp.Header.Get("WWW-Authenticate"))
	}
}

func TestGitServerHelpers(t *testing.T) {
	t.Parallel()
	srv := StartGit(t, "")
	url := srv.NewRepo(t, "apps.git")
	if url != srv.URL+"/apps.git" {
		t.Errorf("NewRepo = %s", url)
	}
	if n := srv.Commits(t, "apps", "main"); n != 0 {
		t.Errorf("an empty repository has %d commits", n)
	}
	if _, ok := srv.Show(t, "apps", "main", "x"); ok {
		t.Error("Show found a file in an empty repository")
	}
	first := srv.Commit(t, "apps", "main", map[string]string{"a/b.txt": "b\n", "c.txt": "c\n"}, "first")
	second := srv.Commit(t, "apps", "main", map[string]string{"c.txt": "c2\n"}, "second")
	if srv.Rev(t, "apps", "main") != second || srv.Rev(t, "apps", "main~1") != first {
		t.Errorf("Rev: main %s main~1 %s; committed %s then %s", srv.Rev(t, "apps", "main"), srv.Rev(t, "apps", "main~1"), first, second)
	}
	if got := srv.Files(t, "apps", "main"); !reflect.DeepEqual(got, []string{"a/b.txt", "c.txt"}) {
		t.Errorf("Files = %v", got)
	}
	if got, _ := srv.Show(t, "apps", "main", "c.txt"); got != "c2\n" {
		t.Errorf("Show c.txt = %q", got)
	}
	if _, ok := srv.Show(t, "apps", "main", "missing"); ok {
		t.Error("Show found a missing file")
	}
	srv.Commit(t, "apps", "release", map[string]string{"r.txt": "r\n"}, "release")
	srv.SetDefaultBranch(t, "apps", "release")
	// Without a token, anyone may clone; HEAD is the new default.
	work := filepath.Join(t.TempDir(), "w")
	if out, err := gitCLI(t, "", "clone", "-q", url, work); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	if b, _ := gitCLI(t, work, "branch", "--show-current"); strings.TrimSpace(b) != "release" {
		t.Errorf("cloned branch %q, want release", b)
	}
	if got := srv.Clone(t, "apps"); srv.Rev(t, "apps", "release") == "" || !exists(filepath.Join(got, "r.txt")) {
		t.Errorf("Clone: %s lacks r.txt", got)
	}
	if got := srv.Requests(); got.Refused != 0 || got.Authenticated == 0 {
		t.Errorf("Requests = %+v", got)
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
