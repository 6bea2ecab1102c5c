// Package configrepo manages the configuration Git repository that the
// platform's GitOps runtimes share: its layout (PATH/resources/) and the
// designation of the configuration runtime
// (PATH/resources/configuration/runtime.yaml).
//
// It works on a clone in memory (go-git, no git binary, nothing on disk),
// commits as "onprem <onprem@onprem.dev>" and pushes only what changed; a
// push that loses a race with another writer reads the branch again and is
// retried. The token authenticates over HTTPS (HTTP basic auth, username
// DefaultUsername unless the URL names one) and never appears in an error.
package configrepo

import (
	"context"
	"fmt"
	"strings"
)

// Remote is the configuration repository.
type Remote struct {
	// URL is the https:// clone URL (http:// on loopback only).
	// Credentials embedded in it are taken out: its username is sent with
	// the token, its password is used when Token is empty.
	URL string
	// Branch is the branch; "" is the remote's default branch (HEAD), or
	// EmptyRepositoryBranch in an empty repository. A branch that does
	// not exist is created from the default branch.
	Branch string
	// Path is the folder inside the repository ("" = its root): a clean
	// relative path.
	Path string
	// Token is the Git token (the HTTP basic-auth password). Never printed.
	Token string
	// CAFile is a PEM file of CA certificates the server's certificate is
	// checked against, besides the system's.
	CAFile string
	// InsecureSkipTLSVerify skips checking the server's certificate.
	InsecureSkipTLSVerify bool
}

// Result is what Init or Designate did.
type Result struct {
	// Commit is the branch's commit after the call ("" when the branch
	// does not exist).
	Commit string
	// Pushed is set when the call pushed Commit.
	Pushed bool
	// ConfigRuntime is the designated configuration runtime after the call
	// ("" when none).
	ConfigRuntime string
	// Initialised is set when the call created the layout.
	Initialised bool
}

// Check connects to the repository (git ls-remote, then the advertisement
// of a push, which pushes nothing). It returns an *AuthError when the
// server refuses the token for reading or for pushing (HTTP 401/403), an
// *UnreachableError when it cannot be reached, and nil otherwise; an empty
// repository is fine.
func Check(ctx context.Context, r Remote) error {
	c, err := connect(r)
	if err != nil {
		return err
	}
	if _, err := c.refs(ctx); err != nil {
		return c.scrub(err)
	}
	return c.scrub(c.canPush(ctx))
}

// Init creates the layout where it is missing and, when designate is set
// and no runtime is designated yet, designates runtime as the
// configuration runtime; then commits and pushes, only when something
// changed. Running it again pushes nothing.
func Init(ctx context.Context, r Remote, runtime string, designate bool) (*Result, error) {
	c, err := connect(r)
	if err != nil {
		return nil, err
	}
	if designate || runtime != "" {
		if err := checkRuntime(runtime); err != nil {
			return nil, err
		}
	}
	res, err := c.updateLayout(ctx, func(l layout, res *Result, paths []string) ([]string, string, error) {
		msg := []string{}
		if res.Initialised {
			msg = append(msg, "onprem: create the configuration layout in "+l.path(ResourcesDir))
		}
		var err error
		if res.ConfigRuntime, err = l.designated(); err != nil {
			return nil, "", err
		}
		if designate && res.ConfigRuntime == "" {
			p, err := l.designate(runtime)
			if err != nil {
				return nil, "", err
			}
			paths = append(paths, p)
			res.ConfigRuntime = runtime
			msg = append(msg, "onprem: designate runtime "+runtime+" as the configuration runtime")
		}
		return paths, strings.Join(msg, "\n\n") + "\n", nil
	})
	return res, c.scrub(err)
}

// Designate makes runtime the configuration runtime (creating the layout
// where it is missing), with a commit; nothing when it already is.
func Designate(ctx context.Context, r Remote, runtime string) (*Result, error) {
	c, err := connect(r)
	if err != nil {
		return nil, err
	}
	if err := checkRuntime(runtime); err != nil {
		return nil, err
	}
	res, err := c.updateLayout(ctx, func(l layout, res *Result, paths []string) ([]string, string, error) {
		// An unreadable designation is overwritten: designating is its fix.
		previous, _ := l.designated()
		res.ConfigRuntime = runtime
		if previous == runtime {
			return paths, "onprem: create the configuration layout in " + l.path(ResourcesDir) + "\n", nil
		}
		p, err := l.designate(runtime)
		if err != nil {
			return nil, "", err
		}
		msg := "onprem: designate runtime " + runtime + " as the configuration runtime"
		if previous != "" {
			msg += fmt.Sprintf(" (was %s)", previous)
		}
		return append(paths, p), msg + "\n", nil
	})
	return res, c.scrub(err)
}

// ConfigRuntime is the designated configuration runtime: "" when none is,
// when the repository is empty or the branch does not exist.
func ConfigRuntime(ctx context.Context, r Remote) (string, error) {
	c, err := connect(r)
	if err != nil {
		return "", err
	}
	p, err := c.resolve(ctx)
	if err != nil {
		return "", c.scrub(err)
	}
	if !p.exists {
		return "", nil
	}
	co, err := c.checkout(ctx, p)
	if err != nil {
		return "", c.scrub(err)
	}
	name, err := layout{fs: co.wt.Filesystem, dir: c.dir}.designated()
	if err != nil {
		return "", c.scrub(fmt.Errorf("git repository %s, branch %s: %w", c.url, p.branch, err))
	}
	return name, nil
}
