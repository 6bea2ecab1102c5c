package configrepo

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
)

// EmptyRepositoryBranch is the branch created in an empty repository when
// no branch is given.
const EmptyRepositoryBranch = "main"

// maxAttempts is how many times an update is tried when other writers push
// to the branch at the same time.
const maxAttempts = 5

// author signs onprem's commits.
func author() *object.Signature {
	return &object.Signature{Name: "onprem", Email: "onprem@onprem.dev", When: time.Now()}
}

func branchRef(b string) plumbing.ReferenceName { return plumbing.NewBranchReferenceName(b) }

// refs lists the remote's references (git ls-remote), with HEAD as a
// symbolic reference when the server tells it. An empty repository has
// none.
func (c *conn) refs(ctx context.Context) (storer.ReferenceStorer, error) {
	ep, err := c.endpoint()
	if err != nil {
		return nil, err
	}
	s, err := githttp.DefaultClient.NewUploadPackSession(ep, c.authMethod())
	if err != nil {
		return nil, c.fail(ctx, "listing its branches", err, false)
	}
	defer s.Close()
	ar, err := s.AdvertisedReferencesContext(ctx)
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return memory.NewStorage(), nil
	}
	if err != nil {
		return nil, c.fail(ctx, "listing its branches", err, false)
	}
	all, err := ar.AllReferences()
	if err != nil {
		return nil, c.fail(ctx, "listing its branches", err, false)
	}
	return all, nil
}

// canPush asks the server for the advertisement of a push (nothing is
// pushed): hosts refuse it to tokens that may only read.
func (c *conn) canPush(ctx context.Context) error {
	ep, err := c.endpoint()
	if err != nil {
		return err
	}
	s, err := githttp.DefaultClient.NewReceivePackSession(ep, c.authMethod())
	if err != nil {
		return c.fail(ctx, "asking to push", err, true)
	}
	defer s.Close()
	if _, err := s.AdvertisedReferencesContext(ctx); err != nil {
		return c.fail(ctx, "asking to push", err, true)
	}
	return nil
}

// plan is where the configuration is read from and pushed to.
type plan struct {
	branch string                 // the configuration's branch
	exists bool                   // the branch exists on the remote
	from   plumbing.ReferenceName // what to clone: the branch, else the default branch, else "" (start from nothing)
}

// resolve picks the branch: the one given, else the remote's default
// (HEAD), else EmptyRepositoryBranch in an empty repository. A branch that
// does not exist yet is started from the default branch.
func (c *conn) resolve(ctx context.Context) (*plan, error) {
	refs, err := c.refs(ctx)
	if err != nil {
		return nil, err
	}
	var head plumbing.ReferenceName
	if h, err := refs.Reference(plumbing.HEAD); err == nil && h.Type() == plumbing.SymbolicReference {
		if _, err := refs.Reference(h.Target()); err == nil {
			head = h.Target()
		}
	}
	p := &plan{branch: c.branch}
	if p.branch == "" {
		switch names := branches(refs); {
		case head != "":
			p.branch = head.Short()
		case len(names) == 0:
			p.branch = EmptyRepositoryBranch
		default:
			return nil, fmt.Errorf("git repository %s has no default branch (HEAD): give the branch to use, one of: %s", c.url, strings.Join(names, ", "))
		}
	}
	if _, err := refs.Reference(branchRef(p.branch)); err == nil {
		p.exists, p.from = true, branchRef(p.branch)
	} else {
		p.from = head
	}
	return p, nil
}

func branches(refs storer.ReferenceStorer) []string {
	var out []string
	if it, err := refs.IterReferences(); err == nil {
		_ = it.ForEach(func(r *plumbing.Reference) error {
			if r.Name().IsBranch() {
				out = append(out, r.Name().Short())
			}
			return nil
		})
	}
	sort.Strings(out)
	return out
}

// checkout is a working copy of the configuration's branch in memory.
type checkout struct {
	*plan
	repo  *git.Repository
	wt    *git.Worktree
	local plumbing.ReferenceName // the local branch HEAD is on
	base  plumbing.Hash          // the branch's commit when read (zero: not created yet)
}

// checkout clones p.from into memory, or starts an empty repository.
func (c *conn) checkout(ctx context.Context, p *plan) (*checkout, error) {
	var repo *git.Repository
	var err error
	if p.from == "" {
		repo, err = git.InitWithOptions(memory.NewStorage(), memfs.New(), git.InitOptions{DefaultBranch: branchRef(p.branch)})
		if err == nil {
			_, err = repo.CreateRemote(&config.RemoteConfig{Name: git.DefaultRemoteName, URLs: []string{c.url}})
		}
		if err != nil {
			return nil, fmt.Errorf("git repository %s: starting its first commit in memory: %w", c.url, err)
		}
	} else {
		repo, err = git.CloneContext(ctx, memory.NewStorage(), memfs.New(), &git.CloneOptions{
			URL: c.url, Auth: c.authMethod(), ReferenceName: p.from, SingleBranch: true, Tags: git.NoTags,
			CABundle: c.ca, InsecureSkipTLS: c.skipTLS,
		})
		if err != nil {
			return nil, c.fail(ctx, "cloning branch "+p.from.Short(), err, false)
		}
	}
	co := &checkout{plan: p, repo: repo}
	if co.wt, err = repo.Worktree(); err != nil {
		return nil, fmt.Errorf("git repository %s: %w", c.url, err)
	}
	head, err := repo.Reference(plumbing.HEAD, false)
	if err != nil {
		return nil, fmt.Errorf("git repository %s: reading HEAD of the clone: %w", c.url, err)
	}
	co.local = head.Target()
	if p.exists {
		h, err := repo.ResolveRevision(plumbing.Revision(plumbing.HEAD))
		if err != nil {
			return nil, fmt.Errorf("git repository %s: reading branch %s: %w", c.url, p.branch, err)
		}
		co.base = *h
	}
	return co, nil
}

// commit commits paths (files of the worktree) with message.
func (co *checkout) commit(message string, paths []string) (plumbing.Hash, error) {
	for _, p := range paths {
		if err := co.wt.AddWithOptions(&git.AddOptions{Path: p, SkipStatus: true}); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("adding %s: %w", p, err)
		}
	}
	sig := author()
	h, err := co.wt.Commit(message, &git.CommitOptions{Author: sig, Committer: sig})
	if err != nil {
		return plumbing.ZeroHash, fmt.Errorf("committing: %w", err)
	}
	return h, nil
}

// push pushes the local branch to the configuration's branch (a
// fast-forward: the server refuses it when the branch moved).
func (c *conn) push(ctx context.Context, co *checkout) error {
	spec := config.RefSpec(co.local.String() + ":" + branchRef(co.branch).String())
	err := co.repo.PushContext(ctx, &git.PushOptions{
		RemoteName: git.DefaultRemoteName, RefSpecs: []config.RefSpec{spec}, Auth: c.authMethod(),
		CABundle: c.ca, InsecureSkipTLS: c.skipTLS,
	})
	if errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	return c.fail(ctx, "pushing to branch "+co.branch, err, true)
}

// lostRace tells whether the branch moved on the remote since co read it.
func (c *conn) lostRace(ctx context.Context, co *checkout) bool {
	refs, err := c.refs(ctx)
	if err != nil {
		return false
	}
	now := plumbing.ZeroHash
	if r, err := refs.Reference(branchRef(co.branch)); err == nil {
		now = r.Hash()
	}
	return now != co.base
}

// change edits the layout, records what it found in res, and returns the
// files it wrote and the commit's message (no files: nothing to commit).
type change func(l layout, res *Result) (paths []string, message string, err error)

// updateLayout is update with the layout created first where it is
// missing, res.Initialised saying whether it was: ch gets the files that
// creation wrote, and returns all the files to commit, and the message.
func (c *conn) updateLayout(ctx context.Context, ch func(l layout, res *Result, created []string) (paths []string, message string, err error)) (*Result, error) {
	return c.update(ctx, func(l layout, res *Result) ([]string, string, error) {
		created, err := l.ensure()
		if err != nil {
			return nil, "", err
		}
		res.Initialised = len(created) > 0
		return ch(l, res, created)
	})
}

// update reads the branch, applies ch, then commits and pushes what
// changed. When another writer pushed first, it reads the branch again and
// retries.
func (c *conn) update(ctx context.Context, ch change) (*Result, error) {
	var lost error
	for attempt := 1; attempt <= maxAttempts; attempt++ {
		if attempt > 1 {
			wait := time.Duration(attempt*100+rand.IntN(200)) * time.Millisecond
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("git repository %s: %w (after: %w)", c.url, ctx.Err(), lost)
			case <-time.After(wait):
			}
		}
		p, err := c.resolve(ctx)
		if err != nil {
			return nil, err
		}
		co, err := c.checkout(ctx, p)
		if err != nil {
			return nil, err
		}
		res := &Result{}
		if !co.base.IsZero() {
			res.Commit = co.base.String()
		}
		paths, message, err := ch(layout{fs: co.wt.Filesystem, dir: c.dir}, res)
		if err != nil {
			return nil, fmt.Errorf("git repository %s, branch %s: %w", c.url, co.branch, err)
		}
		if len(paths) == 0 && co.exists {
			return res, nil
		}
		head := co.base
		if len(paths) > 0 {
			if head, err = co.commit(message, paths); err != nil {
				return nil, fmt.Errorf("git repository %s, branch %s: %w", c.url, co.branch, err)
			}
		} else if h, err := co.repo.ResolveRevision(plumbing.Revision(plumbing.HEAD)); err == nil {
			head = *h // a new branch, started from the default one as it is
		}
		err = c.push(ctx, co)
		if err == nil {
			res.Commit, res.Pushed = head.String(), true
			return res, nil
		}
		var ae *AuthError
		var ue *UnreachableError
		if errors.As(err, &ae) || errors.As(err, &ue) || ctx.Err() != nil || !c.lostRace(ctx, co) {
			return nil, err
		}
		lost = err
	}
	return nil, fmt.Errorf("git repository %s: other writers kept changing the branch; gave up after %d attempts: run the command again: %w", c.url, maxAttempts, lost)
}
