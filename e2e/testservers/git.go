//go:build linux

package testservers

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// GitServer is Git's own smart-HTTP server (git http-backend, run through
// net/http/cgi) on loopback, serving bare repositories from a temporary
// folder, behind HTTP basic authentication: any username, the token as the
// password, as GitHub and GitLab take tokens.
type GitServer struct {
	// URL is the base URL, http://127.0.0.1:PORT; repository NAME is at
	// URL/NAME.git.
	URL string
	// Root holds the bare repositories, NAME.git.
	Root string

	token   string
	git     string
	env     []string
	backend *cgi.Handler
	ok      atomic.Int64
	refused atomic.Int64
}

// GitRequests counts the requests a GitServer answered.
type GitRequests struct {
	// Authenticated requests were passed to git http-backend.
	Authenticated int
	// Refused requests got 401: a wrong or missing token. Git's own
	// client asks without credentials first, so it makes one per
	// connection even with the right token; go-git does not.
	Refused int
}

// maxGitBody bounds a request body of unknown length that the server
// reads into memory (CGI needs the length).
const maxGitBody = 256 << 20

var repoName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)*$`)

// StartGit starts a Git HTTP server on a free loopback port whose
// requests must carry HTTP basic auth with token as the password (any
// username); others get 401 with `WWW-Authenticate: Basic realm="git"`.
// An empty token serves without authentication. Repositories are created
// with NewRepo. It is stopped in t.Cleanup. git is installed when missing
// (Debian's package).
func StartGit(t testing.TB, token string) *GitServer {
	t.Helper()
	bin := ensurePackage(t, "git", "/usr/bin/git", "git")
	dir := tempDir(t, "onprem-git-")
	root := filepath.Join(dir, "repos")
	home := filepath.Join(dir, "home")
	for _, d := range []string{root, home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatalf("testservers: git: %v", err)
		}
	}
	logf, err := os.OpenFile(filepath.Join(dir, "http-backend.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatalf("testservers: git: %v", err)
	}
	// The environment of every git run: the host's and the user's Git
	// configuration left out.
	env := []string{"HOME=" + home, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "LC_ALL=C"}
	s := &GitServer{
		Root: root, token: token, git: bin, env: env,
		backend: &cgi.Handler{
			Path: bin, Args: []string{"http-backend"}, Dir: root,
			Env:    append([]string{"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}, env...),
			Stderr: logf, Logger: log.New(logf, "cgi: ", log.LstdFlags),
		},
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		logf.Close()
		t.Fatalf("testservers: git: %v", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("testservers: git: %v", err)
		}
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		logf.Close()
	})
	s.URL = "http://" + l.Addr().String()
	return s
}

// ServeHTTP checks the token, then hands the request to git http-backend.
func (s *GitServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.token != "" {
		_, password, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(password), []byte(s.token)) != 1 {
			s.refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
	}
	s.ok.Add(1)
	r.Header.Del("Authorization") // the token stays out of the CGI's environment
	if r.ContentLength < 0 {
		// Git's client sends large pushes chunked; CGI needs a length.
		body, err := io.ReadAll(io.LimitReader(r.Body, maxGitBody+1))
		if err != nil || len(body) > maxGitBody {
			http.Error(w, "request body unreadable or too large", http.StatusRequestEntityTooLarge)
			return
		}
		r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(body)), int64(len(body)), nil
	}
	s.backend.ServeHTTP(w, r)
}

// Requests counts the requests answered so far.
func (s *GitServer) Requests() GitRequests {
	return GitRequests{Authenticated: int(s.ok.Load()), Refused: int(s.refused.Load())}
}

// NewRepo creates the empty bare repository NAME.git (default branch
// main, pushes over HTTP allowed) and returns its clone URL. NAME may have
// folders (org/config).
func (s *GitServer) NewRepo(t testing.TB, name string) string {
	t.Helper()
	name = strings.TrimSuffix(name, ".git")
	if !repoName.MatchString(name) || strings.Contains(name, "..") {
		t.Fatalf("testservers: git: repository name %q: use letters, digits, ., _, - and / (e.g. org/config)", name)
	}
	dir := s.Dir(name)
	if _, err := os.Stat(dir); err == nil {
		t.Fatalf("testservers: git: repository %s already exists", name)
	}
	s.run(t, "init", "--quiet", "--bare", "--initial-branch=main", dir)
	s.run(t, "--git-dir", dir, "config", "http.receivepack", "true")
	return s.URL + "/" + name + ".git"
}

// Dir is the folder of repository NAME (a bare repository).
func (s *GitServer) Dir(name string) string {
	return filepath.Join(s.Root, filepath.FromSlash(strings.TrimSuffix(name, ".git"))+".git")
}

// Show returns file at rev (a branch, a commit) of repository NAME, and
// false when rev or the file does not exist.
func (s *GitServer) Show(t testing.TB, name, rev, file string) (string, bool) {
	t.Helper()
	obj := rev + ":" + file
	if _, err := s.output("--git-dir", s.Dir(name), "cat-file", "-e", obj); err != nil {
		return "", false
	}
	return s.run(t, "--git-dir", s.Dir(name), "cat-file", "blob", obj), true
}

// Rev is the commit that rev (e.g. a branch) of repository NAME names, ""
// when it names none.
func (s *GitServer) Rev(t testing.TB, name, rev string) string {
	t.Helper()
	out, err := s.output("--git-dir", s.Dir(name), "rev-parse", "--verify", "--quiet", rev+"^{commit}")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(out)
}

// Commits counts the commits of branch in repository NAME (0 when the
// branch does not exist).
func (s *GitServer) Commits(t testing.TB, name, branch string) int {
	t.Helper()
	if s.Rev(t, name, "refs/heads/"+branch) == "" {
		return 0
	}
	var n int
	if _, err := fmt.Sscan(s.run(t, "--git-dir", s.Dir(name), "rev-list", "--count", "refs/heads/"+branch), &n); err != nil {
		t.Fatalf("testservers: git: counting commits: %v", err)
	}
	return n
}

// Files lists the files of rev in repository NAME.
func (s *GitServer) Files(t testing.TB, name, rev string) []string {
	t.Helper()
	out := strings.Fields(s.run(t, "--git-dir", s.Dir(name), "ls-tree", "-r", "--name-only", rev))
	sort.Strings(out)
	return out
}

// Commit writes files (path: content) onto branch of repository NAME,
// creating the branch (from nothing) when it does not exist, as one commit
// by "test <test@example.com>", straight into the repository (not over
// HTTP). It returns the commit.
func (s *GitServer) Commit(t testing.TB, name, branch string, files map[string]string, message string) string {
	t.Helper()
	dir := s.Dir(name)
	index := filepath.Join(t.TempDir(), "index")
	git := func(stdin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(s.git, append([]string{"--git-dir", dir}, args...)...)
		cmd.Env = append(os.Environ(), s.env...)
		cmd.Env = append(cmd.Env, "GIT_INDEX_FILE="+index,
			"GIT_AUTHOR_NAME=test", "GIT_AUTHOR_EMAIL=test@example.com",
			"GIT_COMMITTER_NAME=test", "GIT_COMMITTER_EMAIL=test@example.com")
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("testservers: git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	ref := "refs/heads/" + branch
	parent := s.Rev(t, name, ref)
	if parent != "" {
		git("", "read-tree", ref)
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		blob := git(files[p], "hash-object", "-w", "--stdin")
		git("", "update-index", "--add", "--cacheinfo", "100644,"+blob+","+p)
	}
	tree := git("", "write-tree")
	args := []string{"commit-tree", tree, "-m", message}
	if parent != "" {
		args = append(args, "-p", parent)
	}
	commit := git("", args...)
	git("", "update-ref", ref, commit, parent)
	return commit
}

// SetDefaultBranch points HEAD of repository NAME at branch.
func (s *GitServer) SetDefaultBranch(t testing.TB, name, branch string) {
	t.Helper()
	s.run(t, "--git-dir", s.Dir(name), "symbolic-ref", "HEAD", "refs/heads/"+branch)
}

// Clone clones repository NAME (straight from its folder, not over HTTP)
// into a temporary folder and returns it.
func (s *GitServer) Clone(t testing.TB, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(s.Dir(name)))
	s.run(t, "clone", "--quiet", s.Dir(name), dst)
	return dst
}

func (s *GitServer) output(args ...string) (string, error) {
	cmd := exec.Command(s.git, args...)
	cmd.Env = append(os.Environ(), s.env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

func (s *GitServer) run(t testing.TB, args ...string) string {
	t.Helper()
	out, err := s.output(args...)
	if err != nil {
		t.Fatalf("testservers: %v", err)
	}
	return out
}
