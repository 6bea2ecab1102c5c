package upgrade

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/diff"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
)

// Releases is what an upgrade needs of the components' Helm releases
// (apply.HelmReleases has all of it).
type Releases interface {
	Last(ctx context.Context, name string) (*apply.ReleaseInfo, error)
	Rollback(ctx context.Context, name string, revision int, timeout time.Duration) (int, error)
	Retire(ctx context.Context, name string, timeout time.Duration) error
}

// Step phases, as recorded in the state.
const (
	PhaseBackup   = "backup"
	PhaseMigrate  = "migrate"
	PhaseApply    = "apply"
	PhaseRemove   = "remove"
	PhaseRollback = "rollback"
	PhaseDone     = "done"
)

// RunOptions is what Run needs. The caller holds the installation's lock
// and has begun an upgrade operation in State (Store.Begin).
type RunOptions struct {
	Plan   *Plan
	Client kubernetes.Interface
	Getter genericclioptions.RESTClientGetter
	// Releases defaults to the Helm SDK's (apply.NewHelmReleases).
	Releases    Releases
	Store       *state.Store
	State       *state.State
	Concurrency int
	// Timeout bounds each component's apply and wait, and each rollback.
	Timeout time.Duration
	// Secrets makes sure the secrets a step's rendering needs exist
	// (generated once, never changed).
	Secrets func(ctx context.Context, res *render.Result) error
	// StorageClass and BackupSize shape the backup claim when it is made.
	StorageClass, BackupSize string
	// Reporter receives the components' progress; Progress the steps'
	// (one line each). Both may be nil.
	Reporter apply.Reporter
	Progress io.Writer
	// Archive, when set, writes a backup of the whole platform before each
	// step changes anything (spec.backup: to the bucket); a step whose
	// backup fails is not started.
	Archive func(ctx context.Context, sp *StepPlan) (*state.BackupRecord, error)
}

// Result is what an upgrade did.
type Result struct {
	From  string       `json:"from"`
	To    string       `json:"to"`
	Steps []StepResult `json:"steps"`
}

// StepResult is what one step did.
type StepResult struct {
	state.Step
	Components []apply.ComponentResult `json:"components,omitempty"`
}

// FailedError says that a step failed and what was done about it.
type FailedError struct {
	Step string
	// Cause is what failed: a migration Job, a component, a removal.
	Cause error
	// RolledBack lists the components returned to their revision from
	// before the step; Kept lists the new components left in place
	// (a rollback never uninstalls).
	RolledBack, Kept []string
	// RollbackErr is set when the rollback itself failed.
	RollbackErr error
	// Version is the version the platform is at now.
	Version string
}

func (e *FailedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "upgrade step %s failed: %v", e.Step, e.Cause)
	switch {
	case e.RollbackErr != nil:
		fmt.Fprintf(&b, "; rolling back FAILED: %v (run `onprem rollback` to retry)", e.RollbackErr)
	case len(e.RolledBack) > 0:
		fmt.Fprintf(&b, "; rolled back %s to their revisions from before the step", strings.Join(e.RolledBack, ", "))
	default:
		b.WriteString("; no component had been changed, nothing to roll back")
	}
	if len(e.Kept) > 0 {
		fmt.Fprintf(&b, "; new components left installed: %s", strings.Join(e.Kept, ", "))
	}
	fmt.Fprintf(&b, "; the platform is at %s", e.Version)
	return b.String()
}

func (e *FailedError) Unwrap() error { return e.Cause }

// Run applies the plan's steps in order: for each, it backs up what the
// step's migrations touch, runs the migrations, upgrades the components in
// dependency order with waits, removes the components the release dropped,
// and records the step. When a migration or a component fails, every
// component the step changed is rolled back to its revision from before
// the step, the failure is recorded, and a *FailedError says what failed.
// Nothing is ever uninstalled to recover.
//
// The state is saved after every phase, so an upgrade that was killed is
// resumed by running it again: completed migrations are not run again, and
// the interrupted step keeps the revisions it would roll back to.
func Run(ctx context.Context, o RunOptions) (*Result, error) {
	if o.Plan == nil || o.State == nil || o.Store == nil {
		return nil, errors.New("upgrade: a plan and the state are required")
	}
	if o.Timeout <= 0 {
		o.Timeout = apply.DefaultTimeout
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	op := o.State.Current()
	if op == nil {
		return nil, errors.New("upgrade: no running operation in the state (Store.Begin first)")
	}
	if o.Releases == nil {
		o.Releases = apply.NewHelmReleases(o.Getter, o.State.Namespace, nil)
	}
	res := &Result{From: o.Plan.From, To: o.Plan.To}
	for i, sp := range o.Plan.Steps {
		fmt.Fprintf(o.Progress, "step %d/%d: %s → %s\n", i+1, len(o.Plan.Steps), sp.From, sp.To)
		sr, err := runStep(ctx, o, sp)
		res.Steps = append(res.Steps, sr)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// save writes the state with the step record as the running operation's
// last step.
func save(ctx context.Context, o RunOptions, rec *state.Step) error {
	op := o.State.Current()
	if op == nil {
		return errors.New("upgrade: the running operation vanished from the state")
	}
	if n := len(op.Steps); n > 0 && op.Steps[n-1].From == rec.From && op.Steps[n-1].To == rec.To && op.Steps[n-1].Started.Equal(rec.Started) {
		op.Steps[n-1] = *rec
	} else {
		op.Steps = append(op.Steps, *rec)
	}
	return o.Store.Save(context.WithoutCancel(ctx), o.State)
}

// interrupted returns the step an earlier, interrupted upgrade left
// running for the same edge, or nil.
func interrupted(st *state.State, from, to string) *state.Step {
	for i := len(st.History) - 1; i >= 0; i-- {
		op := &st.History[i]
		if op.Outcome == state.OutcomeRunning || op.Kind != state.KindUpgrade {
			continue
		}
		if n := len(op.Steps); n > 0 {
			s := &op.Steps[n-1]
			if s.From == from && s.To == to && s.Outcome == state.OutcomeRunning {
				return s
			}
		}
		return nil
	}
	return nil
}

// before records the revision of every component the step may change.
func before(ctx context.Context, o RunOptions, sp *StepPlan) (map[string]int, error) {
	out := map[string]int{}
	for _, c := range sp.Components {
		last, err := o.Releases.Last(ctx, c.Name)
		if err != nil {
			return nil, fmt.Errorf("reading release %s: %w", c.Name, err)
		}
		switch {
		case last == nil:
			out[c.Name] = 0
		case last.Deployed:
			out[c.Name] = last.Revision
		default:
			// A failed or pending release: the state holds the last
			// revision that was good.
			out[c.Name] = o.State.Components[c.Name].Revision
		}
	}
	return out, nil
}

func runStep(ctx context.Context, o RunOptions, sp *StepPlan) (StepResult, error) {
	now := time.Now().UTC()
	rec := &state.Step{From: sp.From, To: sp.To, Started: now, Outcome: state.OutcomeRunning, Phase: PhaseBackup}
	if old := interrupted(o.State, sp.From, sp.To); old != nil {
		// Resume: roll back to what was there before the first attempt,
		// not to what the interrupted one left half done.
		rec.Before, rec.Archive = old.Before, old.Archive
		old.Outcome, old.Message = state.OutcomeFailed, "interrupted; resumed by operation "+o.State.Current().ID
		fmt.Fprintf(o.Progress, "  resuming the step an earlier upgrade left unfinished (phase %s)\n", old.Phase)
	} else {
		b, err := before(ctx, o, sp)
		if err != nil {
			return StepResult{Step: *rec}, err
		}
		rec.Before = b
	}
	if err := save(ctx, o, rec); err != nil {
		return StepResult{Step: *rec}, err
	}
	sr := StepResult{}
	finish := func(err error) (StepResult, error) {
		rec.Finished = time.Now().UTC()
		if err == nil {
			rec.Outcome, rec.Phase = state.OutcomeSucceeded, PhaseDone
			o.State.Version = sp.To
		} else if rec.Outcome == state.OutcomeRunning {
			rec.Outcome = state.OutcomeFailed
		}
		if err != nil {
			rec.Message = err.Error()
		}
		if serr := save(ctx, o, rec); serr != nil {
			err = errors.Join(err, serr)
		}
		sr.Step = *rec
		return sr, err
	}

	// The whole platform's backup, before anything changes (kept from an
	// interrupted attempt, which changed nothing before it was written).
	if o.Archive != nil && rec.Archive == nil {
		fmt.Fprintf(o.Progress, "  backing up the platform before the step\n")
		b, err := o.Archive(ctx, sp)
		if err != nil {
			return finish(fmt.Errorf("backing up the platform before step %s → %s (nothing was changed): %w", sp.From, sp.To, err))
		}
		rec.Archive = b
		fmt.Fprintf(o.Progress, "  backup %s written to %s\n", b.Name, b.Where)
		if err := save(ctx, o, rec); err != nil {
			return finish(err)
		}
	}

	// Backups and migrations, in the release's order.
	if err := runTasks(ctx, o, sp, rec); err != nil {
		return finish(o.rollback(ctx, sp, rec, err))
	}

	rec.Phase = PhaseApply
	if err := save(ctx, o, rec); err != nil {
		return finish(err)
	}
	if o.Secrets != nil {
		if err := o.Secrets(ctx, sp.Result); err != nil {
			return finish(fmt.Errorf("generating secrets: %w", err))
		}
	}
	fmt.Fprintf(o.Progress, "  upgrading components\n")
	rep, aerr := apply.Apply(ctx, apply.Options{
		Getter: o.Getter, Client: o.Client, Result: sp.Result, Concurrency: o.Concurrency,
		Timeout: o.Timeout, Reporter: o.Reporter, Charts: sp.Charts, Releases: releaser(o),
		// A failed component fails the step: the others need not
		// finish their waits before it rolls back.
		StopOnFailure: true,
	})
	if rep != nil {
		sr.Components = rep.Components
		for _, c := range rep.Components {
			if c.Action == apply.Installed || c.Action == apply.Upgraded {
				rec.Applied = append(rec.Applied, c.Name)
			}
		}
		Record(o.State, sp.Result, rep)
	}
	if aerr != nil {
		return finish(o.rollback(ctx, sp, rec, aerr))
	}

	rec.Phase = PhaseRemove
	if err := save(ctx, o, rec); err != nil {
		return finish(err)
	}
	for _, c := range sp.Components {
		if c.Change != ComponentRemoved {
			continue
		}
		fmt.Fprintf(o.Progress, "  removing %s (release %s dropped it; its history is kept for a rollback)\n", c.Name, sp.To)
		if err := o.Releases.Retire(ctx, c.Name, o.Timeout); err != nil {
			// Every component of the new release is ready: the step
			// is not rolled back for this, and a re-run retries.
			return finish(fmt.Errorf("removing %s, which release %s dropped: %w (every component of %s is ready; run the upgrade again to retry the removal)", c.Name, sp.To, err, sp.To))
		}
		delete(o.State.Components, c.Name)
		rec.Removed = append(rec.Removed, c.Name)
		if o.Reporter != nil {
			o.Reporter.Report(apply.Event{Component: c.Name, Phase: apply.PhaseRemoved})
		}
	}
	return finish(nil)
}

// releaser gives apply the releases the upgrade uses when they can apply
// (tests hand in their own); the Helm SDK's are made per step by apply,
// with the step's charts.
func releaser(o RunOptions) apply.Releaser {
	if _, helm := o.Releases.(*apply.HelmReleases); helm {
		return nil
	}
	if r, ok := o.Releases.(apply.Releaser); ok {
		return r
	}
	return nil
}

// runTasks runs the step's backups and migrations in order, skipping the
// migrations that already completed and the backups taken only for them.
func runTasks(ctx context.Context, o RunOptions, sp *StepPlan, rec *state.Step) error {
	ns := o.State.Namespace
	op := o.State.Current()
	tasks := sp.Result.Tasks
	// A backup belongs to the next migration after it.
	skip := make([]bool, len(tasks))
	for i := len(tasks) - 1; i >= 0; i-- {
		t := tasks[i]
		if t.Kind == render.TaskMigration {
			skip[i] = o.State.Migrated(t.Migration)
			continue
		}
		if i+1 < len(tasks) {
			skip[i] = skip[i+1]
		}
	}
	claimReady := false
	for i, t := range tasks {
		if skip[i] {
			if t.Kind == render.TaskMigration {
				fmt.Fprintf(o.Progress, "  migration %s already completed, not run again\n", t.Migration)
			}
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		switch t.Kind {
		case render.TaskBackup:
			if !claimReady {
				if err := ensureBackupClaim(ctx, o.Client, ns, o.StorageClass, o.BackupSize); err != nil {
					return err
				}
				claimReady = true
			}
			rec.Phase = PhaseBackup
			file := path.Join(render.BackupMount, sp.To, op.ID, t.Service+"-"+t.Engine+render.BackupExtension[t.Engine])
			job, err := backupJob(t, file)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.Progress, "  backing up the %s database of %s to %s:%s\n", t.Engine, t.Service, render.BackupClaim, file)
			b := state.Backup{Engine: t.Engine, Service: t.Service, Claim: render.BackupClaim, Path: file, Job: t.Name}
			if err := RunJob(ctx, o.Client, ns, job, t.Timeout); err != nil {
				return fmt.Errorf("backing up the %s database of %s: %w", t.Engine, t.Service, err)
			}
			b.Finished = time.Now().UTC()
			rec.Backups = append(rec.Backups, b)
		case render.TaskMigration:
			rec.Phase = PhaseMigrate
			if err := save(ctx, o, rec); err != nil {
				return err
			}
			fmt.Fprintf(o.Progress, "  running migration %s (%s, up to %s)\n", t.Migration, t.Component, t.Timeout)
			if err := RunJob(ctx, o.Client, ns, t.Job, t.Timeout); err != nil {
				return fmt.Errorf("migration %s: %w", t.Migration, err)
			}
			rec.Migrations = append(rec.Migrations, t.Migration)
			o.State.Migrations = append(o.State.Migrations, state.Migration{Name: t.Migration, Version: sp.To, Operation: op.ID, Finished: time.Now().UTC()})
		}
		if err := save(ctx, o, rec); err != nil {
			return err
		}
	}
	return nil
}

// rollback returns every component the step changed to its revision from
// before the step, records it, and returns the *FailedError to report.
func (o RunOptions) rollback(ctx context.Context, sp *StepPlan, rec *state.Step, cause error) error {
	fe := &FailedError{Step: sp.From + " → " + sp.To, Cause: cause, Version: o.State.Version}
	if ctx.Err() != nil {
		// Interrupted (a signal, a lost lock): leave the step as it is;
		// the next upgrade resumes it, or `onprem rollback` undoes it.
		fe.RollbackErr = fmt.Errorf("not attempted: %w", context.Cause(ctx))
		return fe
	}
	rec.Phase = PhaseRollback
	_ = save(ctx, o, rec)
	fmt.Fprintf(o.Progress, "  step failed: %v\n  rolling back the step's components\n", cause)
	t0 := time.Now()
	rolled, kept, err := RollBack(ctx, o.Releases, o.State, rec.Before, o.Timeout, o.Progress)
	fe.RolledBack, fe.Kept, fe.RollbackErr = rolled, kept, err
	fmt.Fprintf(o.Progress, "  rolled back %d components in %.1fs\n", len(rolled), time.Since(t0).Seconds())
	rec.RolledBack = rolled
	if o.Reporter != nil {
		for _, n := range rolled {
			o.Reporter.Report(apply.Event{Component: n, Phase: apply.PhaseRolledBack, Revision: rec.Before[n]})
		}
	}
	if err == nil {
		rec.Outcome = state.OutcomeRolledBack
	}
	return fe
}

// RollbackFloor is the least a rollback waits for a component. A
// database's pod that restarts on a busy node may need more than 30 s
// (MongoDB's took 40 s on a loaded 2-core machine), and a rollback that
// gives up on it reports a failure that resolves by itself seconds later.
const RollbackFloor = 60 * time.Second

// RollbackTimeout bounds the wait for a component's rollback: about what
// its own last install or upgrade took to be ready (took, half again as
// margin), at least RollbackFloor, at most timeout; timeout when took was
// not recorded. The rollback returns to objects that were ready before, so
// it is as fast as the way forward was; a component that fails fast is
// not then waited on for the whole timeout on its way back.
func RollbackTimeout(took, timeout time.Duration) time.Duration {
	if took <= 0 {
		return timeout
	}
	return min(timeout, max(RollbackFloor, took+took/2))
}

// Settler is what a Releases may also do (apply.HelmReleases does): wait
// until a component's objects are ready, changing nothing.
type Settler interface {
	Ready(ctx context.Context, name string, timeout time.Duration) error
}

// RollBack returns every component whose release is no longer at its
// revision in before (upgraded, failed, or retired since) to that
// revision, and updates the components' records. Components that did not
// exist before (revision 0) are left as they are: a rollback never
// uninstalls.
//
// Only components that hold their dependents (see rollbackShape: a
// database's StatefulSet stops its pod before it starts the replacement)
// order a rollback. A database goes back after the databases it depends
// on; a component that runs once to its end (the provisioning Job) starts
// once the databases it reaches are back, as it needs them to run. A
// service goes back at once, beside the databases it reaches: its new
// pods start while the database restarts and are ready once it answers.
// A service that was ready before a database it reaches was (it could
// not see that database go down) is waited for once more after it, so
// that the rollback ends with every component ready. Without a Settler
// to wait again with, services too wait for their databases first.
//
// Each rollback waits at most RollbackTimeout of what the component's
// last apply took (the state's record) and timeout; a service that goes
// back beside its databases gets their bound on top of its own. Each
// says how long it took. A failed rollback is reported and the others go
// on. It returns the components rolled back and those left, in
// dependency order (levels, name order within a level).
func RollBack(ctx context.Context, rel Releases, st *state.State, before map[string]int, timeout time.Duration, progress io.Writer) (rolled, kept []string, err error) {
	if progress == nil {
		progress = io.Discard
	}
	names := make([]string, 0, len(before))
	for n := range before {
		names = append(names, n)
	}
	slices.Sort(names)
	// What each release is now: whether it moved, and whether its
	// objects hold their dependents back. Read at once, not one after
	// the other: each is a list of the release's history, and the
	// rollback waits for all of them.
	lasts := make(map[string]*apply.ReleaseInfo, len(names))
	lastErrs := map[string]error{}
	holds := map[string]bool{}
	once := map[string]bool{}
	var readMu sync.Mutex
	var reads sync.WaitGroup
	readSlots := make(chan struct{}, apply.DefaultConcurrency)
	for _, name := range names {
		reads.Add(1)
		go func() {
			defer reads.Done()
			readSlots <- struct{}{}
			defer func() { <-readSlots }()
			last, lerr := rel.Last(ctx, name)
			h, o := true, false
			if lerr == nil && last != nil {
				h, o = rollbackShape(last.Manifest)
			}
			readMu.Lock()
			defer readMu.Unlock()
			holds[name], once[name] = h, o
			if lerr != nil {
				lastErrs[name] = fmt.Errorf("%s: %w", name, lerr)
				return
			}
			lasts[name] = last
		}()
	}
	reads.Wait()

	deps := holderDeps(names, st, holds)
	order := slices.Concat(dependencyLevels(names, deps)...)
	settler, settles := rel.(Settler)
	// besides: goes back beside the databases it reaches, not after them.
	besides := func(n string) bool { return settles && !holds[n] && !once[n] && len(deps[n]) > 0 }
	bound := map[string]time.Duration{}
	for _, n := range order {
		b := RollbackTimeout(st.Components[n].Took, timeout)
		if besides(n) {
			var most time.Duration
			for _, d := range deps[n] {
				most = max(most, bound[d])
			}
			b += most
		}
		bound[n] = b
	}

	type outcome struct {
		rolled, kept bool
		newRev       int
		digest       string
		err          error
		ended        time.Time
	}
	results := make(map[string]*outcome, len(names))
	done := make(map[string]chan struct{}, len(names))
	for _, n := range names {
		results[n], done[n] = &outcome{}, make(chan struct{})
	}
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(progress, format, args...)
	}
	// The databases take no slot: they are few, and everything else
	// may wait for them.
	slots := make(chan struct{}, apply.DefaultConcurrency)
	var wg sync.WaitGroup
	for _, name := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[name])
			r := results[name]
			defer func() { r.ended = time.Now() }()
			if !besides(name) {
				for _, d := range deps[name] {
					<-done[d]
				}
			}
			if !holds[name] {
				slots <- struct{}{}
				defer func() { <-slots }()
			}
			if lerr := lastErrs[name]; lerr != nil {
				r.err = lerr
				return
			}
			rev, last := before[name], lasts[name]
			if rev == 0 {
				r.kept = last != nil
				return
			}
			if last != nil && last.Deployed && last.Revision == rev {
				return
			}
			wait := bound[name]
			say("  rolling %s back to revision %d (waiting up to %s)\n", name, rev, wait.Round(time.Second))
			t0 := time.Now()
			r.newRev, r.err = rel.Rollback(ctx, name, rev, wait)
			if r.err != nil {
				return
			}
			r.rolled = true
			say("  %s is back at revision %d, ready after %.1fs\n", name, rev, time.Since(t0).Seconds())
			if info, ierr := rel.Last(ctx, name); ierr == nil && info != nil {
				r.digest = info.Digest
			}
		}()
	}
	wg.Wait()

	// A service that was ready before a database it reaches was back is
	// waited for once more.
	if settles {
		var swg sync.WaitGroup
		for _, name := range order {
			r := results[name]
			if !r.rolled || !besides(name) {
				continue
			}
			var last string
			var lastEnd time.Time
			for _, d := range deps[name] {
				if rd := results[d]; rd.rolled && rd.ended.After(lastEnd) {
					last, lastEnd = d, rd.ended
				}
			}
			if last == "" || r.ended.After(lastEnd) {
				continue
			}
			swg.Add(1)
			go func() {
				defer swg.Done()
				t0 := time.Now()
				if serr := settler.Ready(ctx, name, bound[name]); serr != nil {
					r.err = fmt.Errorf("%s is back at revision %d but not ready again since %s is back ('onprem doctor' says why): %w", name, before[name], last, serr)
					return
				}
				say("  %s is ready again since %s is back, after %.1fs more\n", name, last, time.Since(t0).Seconds())
			}()
		}
		swg.Wait()
	}

	var errs []error
	for _, name := range order {
		r := results[name]
		if r.err != nil {
			errs = append(errs, r.err)
		}
		switch {
		case r.kept:
			kept = append(kept, name)
		case r.rolled:
			rolled = append(rolled, name)
			if st.Components == nil {
				st.Components = map[string]state.Component{}
			}
			c := st.Components[name]
			c.Release, c.Revision, c.Status, c.UpdatedAt = name, r.newRev, "rolled back to revision "+fmt.Sprint(before[name]), time.Now().UTC()
			if r.digest != "" {
				c.Digest = r.digest
			}
			st.Components[name] = c
		}
	}
	return rolled, kept, errors.Join(errs...)
}

// rollbackShape is how a component's objects (a release manifest) roll,
// read with one decode: holds, when they can leave what depends on them
// unready while they roll (a StatefulSet, whose pods, a database's one
// instance, stop before their replacements start; Deployments roll with
// no pod down, maxUnavailable 0, and Jobs provision what the previous
// revision's services already use); once, when they run once to their
// end (a Job and no pod controller that keeps running). A manifest that
// is empty or cannot be read holds, as the safe choice.
func rollbackShape(manifest string) (holds, once bool) {
	objs, err := diff.Objects(manifest)
	if err != nil || len(objs) == 0 {
		return true, false
	}
	job, controller := false, false
	for _, o := range objs {
		switch o.GetKind() {
		case "StatefulSet":
			holds, controller = true, true
		case "Deployment", "DaemonSet":
			controller = true
		case "Job":
			job = true
		}
	}
	return holds, job && !controller
}

// holderDeps returns, for each of names, the components it depends on
// that hold their dependents (holds); the others are passed through to
// their own dependencies, in the state's record. Dependencies outside
// names are passed through too, as they are not rolled back.
func holderDeps(names []string, st *state.State, holds map[string]bool) map[string][]string {
	in := map[string]bool{}
	for _, n := range names {
		in[n] = true
	}
	deps := make(map[string][]string, len(names))
	for _, n := range names {
		seen := map[string]bool{n: true}
		var walk func(c string)
		walk = func(c string) {
			for _, d := range st.Components[c].DependsOn {
				if seen[d] {
					continue
				}
				seen[d] = true
				if in[d] && holds[d] {
					deps[n] = append(deps[n], d)
					continue
				}
				walk(d)
			}
		}
		walk(n)
	}
	return deps
}

// dependencyLevels groups names so that each comes in a later level than
// the names it depends on in deps (dependencies outside names do not
// count); each level in name order. A cycle, which a
// validated release cannot have, leaves its members one per level at the
// end, in name order.
func dependencyLevels(names []string, deps map[string][]string) [][]string {
	slices.Sort(names)
	in := map[string]bool{}
	for _, n := range names {
		in[n] = true
	}
	done := map[string]bool{}
	var levels [][]string
	for left := len(names); left > 0; {
		var level []string
		for _, n := range names {
			if done[n] {
				continue
			}
			ready := true
			for _, d := range deps[n] {
				if in[d] && !done[d] && d != n {
					ready = false
					break
				}
			}
			if ready {
				level = append(level, n)
			}
		}
		if len(level) == 0 { // a cycle: the rest one by one, in name order
			for _, n := range names {
				if !done[n] {
					levels = append(levels, []string{n})
					done[n] = true
				}
			}
			break
		}
		for _, n := range level {
			done[n] = true
		}
		left -= len(level)
		levels = append(levels, level)
	}
	return levels
}

// Record writes each applied component's release into the state, and what
// was repaired into the running operation (install and upgrade share it).
func Record(st *state.State, res *render.Result, rep *apply.Report) {
	if st.Components == nil {
		st.Components = map[string]state.Component{}
	}
	now := time.Now().UTC()
	for _, r := range rep.Components {
		c := res.Component(r.Name)
		if c == nil || r.Action == apply.Skipped {
			continue
		}
		if op := st.Current(); op != nil && r.Action != apply.Failed {
			for _, d := range r.Repaired {
				op.Repaired = append(op.Repaired, r.Name+": "+d)
			}
		}
		prev := st.Components[r.Name]
		sc := state.Component{Chart: c.Chart, ChartVersion: c.ChartVersion, Release: r.Name, Revision: r.Revision,
			Digest: r.Digest, Status: string(r.Action), UpdatedAt: now, DependsOn: c.DependsOn, Took: prev.Took}
		if r.Action == apply.Installed || r.Action == apply.Upgraded {
			sc.Took = r.Elapsed
		}
		if r.Action == apply.Failed {
			sc.Revision, sc.Digest = prev.Revision, prev.Digest
			sc.Status = "failed: " + r.Error
		}
		st.Components[r.Name] = sc
	}
}
