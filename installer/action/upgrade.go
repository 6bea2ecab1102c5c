package action

import (
	"context"

	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/version"
	"onprem.dev/onprem/preflight"
	"onprem.dev/onprem/upgrade"
)

// NotInstalledError: there is no installation record to upgrade or roll
// back.
type NotInstalledError struct{ Namespace string }

func (e *NotInstalledError) Error() string {
	return fmt.Sprintf("no platform is recorded in namespace %s (Secret %s/%s): install it first with `onprem install`, "+
		"or take over a platform installed with plain Helm releases with `onprem adopt`", e.Namespace, e.Namespace, state.SecretName)
}

// UpgradeTarget names the upgrade's configuration and target.
type UpgradeTarget struct {
	Source
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn *Configuration
	// To is the target version; empty: the configuration's spec.version.
	To string
	// Set holds --set overrides, applied to every step.
	Set []string
}

// planned is an upgrade plan with what it was made from.
type planned struct {
	loaded *Loaded
	cl     *kube.Cluster
	store  *state.Store
	st     *state.State
	plan   *upgrade.Plan
	target *release.Release
}

// makePlan loads the configuration and the installation's record and plans
// the path. lock, when not nil, is called with the cluster and namespace
// before the record is read (apply reads it under the lock).
func (u UpgradeTarget) makePlan(ctx context.Context, lock func(*kube.Cluster, string) (context.Context, error)) (context.Context, *planned, error) {
	l, err := u.Source.Load(ctx)
	if err != nil {
		return ctx, nil, err
	}
	ok := false
	defer func() {
		if !ok {
			l.Close()
		}
	}()
	cl, err := connect(ctx, u.Conn, u.Cluster)
	if err != nil {
		return ctx, nil, err
	}
	ns := l.Installation.Spec.Namespace
	if lock != nil {
		if ctx, err = lock(cl, ns); err != nil {
			return ctx, nil, err
		}
	}
	store := state.NewStore(cl.Client, ns)
	st, err := store.Load(ctx)
	if err != nil {
		return ctx, nil, err
	}
	if err := requireInstalled(st, ns); err != nil {
		return ctx, nil, err
	}
	to := u.To
	if to == "" {
		to = l.Installation.Spec.Version
	}
	p, err := upgrade.MakePlan(ctx, upgrade.PlanOptions{
		Installation: l.Installation, Releases: l.Releases, From: st.Version, To: to, Set: u.Set,
		Installer: version.Version, Kubernetes: cl.ServerVersion, Migrated: st.Migrated,
		Content: func(v string) (fs.FS, fs.FS) { return l.Charts(v), l.Manifests(v) },
	})
	if err != nil {
		return ctx, nil, versionErr(err, l.Releases, st.Version)
	}
	target, err := l.Releases.Get(p.To)
	if err != nil {
		return ctx, nil, err
	}
	ok = true
	return ctx, &planned{loaded: l, cl: cl, store: store, st: st, plan: p, target: target}, nil
}

// versionErr makes the graph's refusals input errors that list where the
// installed version can go.
func versionErr(err error, set *release.Set, from string) error {
	var ue *upgrade.UnknownVersionError
	var de *upgrade.DowngradeError
	var ne *upgrade.NoPathError
	switch {
	case render.IsInputError(err):
		return inputErr(err)
	case errors.As(err, &ue) && ue.Installed:
		return err
	case errors.As(err, &ue), errors.As(err, &de), errors.As(err, &ne):
	default:
		return err
	}
	reach, rerr := upgrade.Reachable(set, from)
	if rerr != nil || len(reach) == 0 {
		return inputErr(fmt.Errorf("%w; no newer version is reachable from %s", err, from))
	}
	var vs []string
	for _, r := range reach {
		vs = append(vs, r.Version)
	}
	return inputErr(fmt.Errorf("%w; versions reachable from %s: %s", err, from, strings.Join(vs, ", ")))
}

// UpgradePlan shows what an upgrade would do; it changes nothing.
type UpgradePlan struct {
	UpgradeTarget
	// ServerDryRun rehearses every step's apply against the API server
	// (server-side dry run) without changing anything.
	ServerDryRun bool
	// Concurrency bounds the components rehearsed at once.
	Concurrency int
}

// UpgradePlanResult is the plan.
type UpgradePlanResult struct {
	Installation string `json:"installation"`
	Namespace    string `json:"namespace"`
	*upgrade.Plan
	// DryRun holds, per step, the server-side dry run of its apply.
	DryRun []StepDryRun `json:"serverDryRun,omitempty"`
}

// StepDryRun is one step's rehearsal.
type StepDryRun struct {
	Step       string                  `json:"step"`
	Components []apply.ComponentResult `json:"components"`
	Error      string                  `json:"error,omitempty"`
}

// Run plans.
func (u *UpgradePlan) Run(ctx context.Context) (*UpgradePlanResult, error) {
	_, p, err := u.makePlan(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer p.loaded.Close()
	out := &UpgradePlanResult{Installation: p.loaded.Installation.Metadata.Name, Namespace: p.st.Namespace, Plan: p.plan}
	if len(p.plan.Steps) == 0 {
		return out, nil
	}
	first := p.plan.Steps[0]
	d, err := liveDiff(ctx, p.cl, first.Result, nil)
	if err != nil {
		return nil, fmt.Errorf("diffing step %s → %s against the cluster: %w", first.From, first.To, err)
	}
	first.Diff = d
	if u.ServerDryRun {
		var failed error
		for _, sp := range p.plan.Steps {
			rep, err := apply.Apply(ctx, apply.Options{Getter: p.cl.Getter, Client: p.cl.Client, Result: sp.Result,
				Charts: sp.Charts, Concurrency: u.Concurrency, DryRun: true})
			dr := StepDryRun{Step: sp.From + " → " + sp.To}
			if rep != nil {
				dr.Components = rep.Components
			}
			if err != nil {
				dr.Error = err.Error()
				failed = errors.Join(failed, fmt.Errorf("step %s: %w", dr.Step, err))
			}
			out.DryRun = append(out.DryRun, dr)
		}
		if failed != nil {
			return out, fmt.Errorf("the server-side dry run refused: %w", failed)
		}
	}
	return out, nil
}

// UpgradeApply upgrades the platform along the plan's path.
type UpgradeApply struct {
	UpgradeTarget
	Concurrency int
	// Timeout bounds each component's apply and wait.
	Timeout   time.Duration
	LockWait  time.Duration
	LockLease time.Duration
	// SkipChecks lists preflight check IDs not to run.
	SkipChecks []string
	// BackupSize is the size of the backup claim when it is created
	// (default upgrade.DefaultBackupSize).
	BackupSize string
	Reporter   apply.Reporter
	// Progress receives one line per step and task (may be nil).
	Progress  func(string)
	Preflight func(*preflight.Report)
	// SkipBackup does not write the backup spec.backup asks for before
	// each step.
	SkipBackup bool
	// BackupProgress receives the progress of those backups (may be nil);
	// Exec runs their dump tools (default: in the pods).
	BackupProgress func(backup.Progress)
	Exec           podexec.Executor
}

// UpgradeResult is what an upgrade did.
type UpgradeResult struct {
	Installation string            `json:"installation"`
	Namespace    string            `json:"namespace"`
	From         string            `json:"from"`
	To           string            `json:"to"`
	Version      string            `json:"version"` // where the platform is now
	Preflight    *preflight.Report `json:"preflight,omitempty"`
	*upgrade.Result
	Elapsed time.Duration `json:"elapsed"`
}

type lineWriter func(string)

func (f lineWriter) Write(p []byte) (int, error) {
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		f(l)
	}
	return len(p), nil
}

// Run upgrades: it takes the lock, runs preflight against the target,
// then every step (upgrade.Run). On a failure the step's components are
// rolled back and the error is an *upgrade.FailedError.
func (u *UpgradeApply) Run(ctx context.Context) (*UpgradeResult, error) {
	start := time.Now()
	var unlock func()
	defer func() {
		if unlock != nil {
			unlock()
		}
	}()
	lock := func(cl *kube.Cluster, ns string) (context.Context, error) {
		c, un, err := lockInstallation(ctx, cl, ns, "upgrade", u.LockWait, u.LockLease)
		if err != nil {
			return ctx, err
		}
		unlock = un
		return c, nil
	}
	ctx, p, err := u.makePlan(ctx, lock)
	if err != nil {
		return nil, err
	}
	defer p.loaded.Close()
	in := p.loaded.Installation
	out := &UpgradeResult{Installation: in.Metadata.Name, Namespace: p.st.Namespace, From: p.plan.From, To: p.plan.To, Version: p.st.Version}
	if len(p.plan.Steps) == 0 {
		out.Result = &upgrade.Result{From: p.plan.From, To: p.plan.To}
		return out, nil
	}
	last := p.plan.Steps[len(p.plan.Steps)-1]
	pre, err := runPreflight(ctx, &preflight.Env{Installation: in, Release: p.target, Releases: p.loaded.Releases, Rendered: last.Result, Cluster: p.cl},
		preflight.Options{Skip: u.SkipChecks})
	out.Preflight = pre
	if pre != nil && u.Preflight != nil {
		u.Preflight(pre)
	}
	if err != nil {
		return out, err
	}
	host, _ := os.Hostname()
	if err := p.store.Begin(ctx, p.st, state.Operation{
		Kind: state.KindUpgrade, Version: p.plan.To, FromVersion: p.st.Version, Started: start,
		Installer: version.Version, Host: host, Components: componentNames(last.Result), SkippedChecks: pre.Skipped,
		Bundles: p.loaded.BundleUses(),
	}); err != nil {
		return nil, err
	}
	var progress lineWriter = func(string) {}
	if u.Progress != nil {
		progress = u.Progress
	}
	archive, err := u.archive(ctx, p)
	if err != nil {
		if ferr := p.store.Finish(context.WithoutCancel(ctx), p.st, state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return out, err
	}
	res, rerr := upgrade.Run(ctx, upgrade.RunOptions{
		Archive: archive,
		Plan:    p.plan, Client: p.cl.Client, Getter: p.cl.Getter, Store: p.store, State: p.st,
		Concurrency: u.Concurrency, Timeout: u.Timeout, Reporter: u.Reporter, Progress: progress,
		StorageClass: in.Spec.Storage.ClassName, BackupSize: u.BackupSize,
		Secrets: func(ctx context.Context, res *render.Result) error {
			_, err := secrets.Ensure(ctx, p.cl.Client, res.Namespace, res.Secrets, secrets.GenerateOptions{Domain: in.Spec.Domain})
			return err
		},
	})
	out.Result, out.Elapsed, out.Version = res, time.Since(start), p.st.Version
	if rerr != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			rerr = fmt.Errorf("%w: %w", rerr, cause)
		}
		if ferr := p.store.Finish(context.WithoutCancel(ctx), p.st, state.OutcomeFailed, rerr.Error()); ferr != nil {
			rerr = errors.Join(rerr, ferr)
		}
		return out, rerr
	}
	if digest, err := in.Digest(); err == nil && in.Spec.Version == p.plan.To {
		p.st.ConfigDigest = digest
	}
	// The configuration kept for backups names the version now installed
	// (--to may differ from the file's spec.version).
	upgraded := *in
	upgraded.Spec.Version = p.plan.To
	if err := backup.StoreConfig(ctx, p.cl.Client, p.st.Namespace, &upgraded, secretNames(last.Result)); err != nil {
		if ferr := p.store.Finish(context.WithoutCancel(ctx), p.st, state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return out, err
	}
	msg := fmt.Sprintf("upgraded %s → %s in %d step(s)", p.plan.From, p.plan.To, len(p.plan.Steps))
	if err := p.store.Finish(ctx, p.st, state.OutcomeSucceeded, msg); err != nil {
		return out, err
	}
	return out, nil
}

// archive returns the backup each step writes first when spec.backup says
// so (to its bucket, encrypted to its recipients), or nil.
func (u *UpgradeApply) archive(ctx context.Context, p *planned) (func(context.Context, *upgrade.StepPlan) (*state.BackupRecord, error), error) {
	b := p.loaded.Installation.Spec.Backup
	if !b.BeforeUpgrades() || u.SkipBackup {
		return nil, nil
	}
	store, err := configuredStore(ctx, p.cl, p.st.Namespace, b)
	if err != nil {
		return nil, err
	}
	recipients, err := backupfile.Keys{Recipients: b.Recipients}.EncryptTo()
	if err != nil {
		return nil, inputErr(fmt.Errorf("spec.backup.recipients: %w", err))
	}
	dyn, err := dynamic.NewForConfig(p.cl.Config)
	if err != nil {
		return nil, err
	}
	ex := u.Exec
	if ex == nil {
		ex = podexec.Kube{Config: p.cl.Config, Client: p.cl.Client}
	}
	return func(ctx context.Context, sp *upgrade.StepPlan) (*state.BackupRecord, error) {
		res, err := backup.Create(ctx, backup.CreateOptions{
			Client: p.cl.Client, Dynamic: dyn, Exec: ex, Namespace: p.st.Namespace, State: p.st,
			Recipients: recipients, Store: store, Trigger: backupfile.TriggerUpgrade, IncludeRedis: b.IncludeRedis,
			BetweenSteps: true, Progress: u.BackupProgress,
		})
		if err != nil {
			return nil, err
		}
		return &state.BackupRecord{Name: res.Name, Where: res.Where, Trigger: backupfile.TriggerUpgrade, Size: res.Size,
			Databases: len(res.Manifest.Databases()), Version: res.Manifest.Version}, nil
	}, nil
}

// Rollback undoes the last upgrade step on request: every component the
// step changed goes back to its revision from before it (components the
// step removed come back; components it added stay), and the platform's
// recorded version becomes the step's starting version. Migrated data is
// not reverted: the step's backups say where the dumps from before it are.
type Rollback struct {
	Target
	Timeout   time.Duration
	LockWait  time.Duration
	LockLease time.Duration
	Progress  func(string)
}

// RollbackResult is what a rollback did.
type RollbackResult struct {
	Namespace  string         `json:"namespace"`
	From       string         `json:"from"`
	To         string         `json:"to"`
	RolledBack []string       `json:"rolledBack"`
	Kept       []string       `json:"kept,omitempty"`
	Backups    []state.Backup `json:"backups,omitempty"`
}

// ErrNothingToRollBack: no upgrade step is recorded that could be undone.
var ErrNothingToRollBack = errors.New("no upgrade step to roll back: the history has no completed or interrupted upgrade step since the last rollback")

// Run rolls back.
func (r *Rollback) Run(ctx context.Context) (*RollbackResult, error) {
	if r.Timeout <= 0 {
		r.Timeout = apply.DefaultTimeout
	}
	ns, err := r.Target.namespace(ctx)
	if err != nil {
		return nil, err
	}
	conf := configuration(r.Conn, r.Cluster)
	cl, err := conf.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	ctx, h, err := conf.lockAndLoad(ctx, ns, "rollback", r.LockWait, r.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	store, st := h.store, h.st
	if !st.Stored() {
		return nil, errNotInstalled(ns)
	}
	step := lastStep(st)
	if step == nil {
		return nil, inputErr(ErrNothingToRollBack)
	}
	from, to := step.To, step.From
	if st.Version != step.To {
		from = st.Version
	}
	host, _ := os.Hostname()
	if err := store.Begin(ctx, st, state.Operation{Kind: state.KindRollback, Version: to, FromVersion: from,
		Installer: version.Version, Host: host}); err != nil {
		return nil, err
	}
	// Begin copied the history: find the step again in the saved record.
	step = lastStep(st)
	var progress lineWriter = func(string) {}
	if r.Progress != nil {
		progress = r.Progress
	}
	fmt.Fprintf(progress, "rolling back step %s → %s\n", step.From, step.To)
	releases := apply.NewHelmReleases(cl.Getter, ns, nil)
	rolled, kept, rerr := upgrade.RollBack(ctx, releases, st, step.Before, r.Timeout, progress)
	out := &RollbackResult{Namespace: ns, From: from, To: to, RolledBack: rolled, Kept: kept, Backups: step.Backups}
	op := st.Current()
	op.Steps = []state.Step{{From: step.To, To: step.From, Started: op.Started, Outcome: state.OutcomeRunning, RolledBack: rolled}}
	if rerr != nil {
		op.Steps[0].Outcome = state.OutcomeFailed
		if ferr := store.Finish(context.WithoutCancel(ctx), st, state.OutcomeFailed, rerr.Error()); ferr != nil {
			rerr = errors.Join(rerr, ferr)
		}
		return out, fmt.Errorf("rolling back step %s → %s: %w (run `onprem rollback` again to retry)", step.From, step.To, rerr)
	}
	step.Outcome, step.RolledBack = state.OutcomeRolledBack, rolled
	op.Steps[0].Outcome, op.Steps[0].Finished = state.OutcomeSucceeded, time.Now().UTC()
	msg := fmt.Sprintf("rolled back step %s → %s: %d component(s) returned to their revisions", step.From, step.To, len(rolled))
	if err := store.Finish(ctx, st, state.OutcomeSucceeded, msg); err != nil {
		return out, err
	}
	return out, nil
}

// lastStep returns the newest upgrade step that can be undone: one that
// succeeded, or was interrupted or failed without being rolled back.
func lastStep(st *state.State) *state.Step {
	for i := len(st.History) - 1; i >= 0; i-- {
		op := &st.History[i]
		switch op.Kind {
		case state.KindUpgrade:
		case state.KindInstall, state.KindAdopt, state.KindUninstall, state.KindRestore:
			// A restore installed the platform anew: the releases
			// before it are not on this cluster.
			return nil
		default:
			continue
		}
		for j := len(op.Steps) - 1; j >= 0; j-- {
			s := &op.Steps[j]
			if s.Outcome != state.OutcomeRolledBack {
				return s
			}
		}
	}
	return nil
}

// UpgradeVersions lists the versions an upgrade can reach from the
// installed one: the embedded releases and those of UpgradeTarget's
// bundles. It changes nothing.
type UpgradeVersions struct {
	UpgradeTarget
}

// UpgradeVersionsResult is the installed version and where it can go.
type UpgradeVersionsResult struct {
	Installation string `json:"installation"`
	Namespace    string `json:"namespace"`
	Installed    string `json:"installed"`
	// Configured is the configuration's spec.version.
	Configured string `json:"configured"`
	// Reachable are the newer versions some upgrade path reaches, oldest
	// first (empty: the platform is at the newest it can be).
	Reachable []VersionInfo `json:"reachable"`
}

// Run lists them.
func (u *UpgradeVersions) Run(ctx context.Context) (*UpgradeVersionsResult, error) {
	l, err := u.Source.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	ns := l.Installation.Spec.Namespace
	_, _, st, err := configuration(u.Conn, u.Cluster).LoadInstalled(ctx, ns)
	if err != nil {
		return nil, err
	}
	reach, err := upgrade.Reachable(l.Releases, st.Version)
	if err != nil {
		return nil, err
	}
	out := &UpgradeVersionsResult{Installation: l.Installation.Metadata.Name, Namespace: ns, Installed: st.Version,
		Configured: l.Installation.Spec.Version, Reachable: []VersionInfo{}}
	for _, r := range reach {
		out.Reachable = append(out.Reachable, versionInfo(r))
	}
	return out, nil
}
