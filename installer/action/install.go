package action

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/gitops"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/rotate"
	"onprem.dev/onprem/installer/runner"
	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/version"
	"onprem.dev/onprem/preflight"
	"onprem.dev/onprem/upgrade"
)

// Install makes a cluster match the configuration: it takes the
// installation's lock, generates the secrets that do not exist yet,
// applies every component in dependency order and records the result in
// the installation's state. Running it again with the same configuration
// changes nothing, unless what runs has drifted from it: a component whose
// live objects differ in a field onprem sets is applied again, and the
// result (Repaired) and the history name what was reverted.
type Install struct {
	Source
	// Cluster says which cluster (kubeconfig and context).
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn *Configuration
	// Set holds --set COMPONENT.key=value overrides.
	Set []string
	// DryRun renders and validates every object against the API server
	// (server-side dry run) without changing anything.
	DryRun bool
	// Concurrency bounds the components applied at once.
	Concurrency int
	// Timeout bounds each component's apply and wait.
	Timeout time.Duration
	// LockWait is how long to wait for another onprem holding the lock.
	LockWait time.Duration
	// LockLease is how long the lock outlives an onprem that died holding
	// it (default: state's default lease).
	LockLease time.Duration
	// SkipChecks lists preflight check IDs not to run; they are recorded
	// in the state's history.
	SkipChecks []string
	// Reporter receives progress (may be nil).
	Reporter apply.Reporter
	// Preflight receives the preflight report before anything is changed
	// (may be nil).
	Preflight func(*preflight.Report)
	// RuntimeFetch says where the runtimes of spec.runtimes[] get their
	// chart and how Git hosts are reached.
	RuntimeFetch RuntimeFetch
	// Exec runs the database clients of a credential rotation that
	// spec.rotation asks for, and the dumps and restores of a move between
	// single and high (default: in the engines' pods).
	Exec podexec.Executor
	// MoveDir is where a move of databases between spec.availability
	// single and high keeps its backup (default DefaultMoveDir).
	MoveDir string
	// beforeMoveDelete, for tests: see availabilityMove.beforeDelete.
	beforeMoveDelete func()
}

// InstallResult is what an install did.
type InstallResult struct {
	Installation string                  `json:"installation"`
	Namespace    string                  `json:"namespace"`
	Version      string                  `json:"version"`
	FromVersion  string                  `json:"fromVersion,omitempty"`
	DryRun       bool                    `json:"dryRun,omitempty"`
	Preflight    *preflight.Report       `json:"preflight,omitempty"`
	Secrets      *secrets.Report         `json:"generatedSecrets,omitempty"`
	Components   []apply.ComponentResult `json:"components"`
	// Move is what the move of databases between spec.availability
	// single and high did (nil when nothing moved).
	Move *MoveResult `json:"availabilityMove,omitempty"`
	// CertificateRenewal says what spec.rotation.certificateMaxAgeDays
	// did to the serving certificate: renewed, or due and why not ("" when
	// not due or not asked for).
	CertificateRenewal string `json:"certificateRenewal,omitempty"`
	// CredentialRotation says what spec.rotation.credentialsMaxAgeDays
	// did: the logins rotated, or why not ("" when none was due or it is
	// not asked for).
	CredentialRotation string `json:"credentialRotation,omitempty"`
	// KeyRotation says what spec.rotation.keysMaxAgeDays did: the keys
	// rotated, or why not ("" when not due or not asked for).
	KeyRotation string `json:"keyRotation,omitempty"`
	// Runners are the runners of spec.runners[], installed or converged
	// after the components; UndeclaredRunners are the other runners
	// registered with the installation, left alone.
	Runners           []runner.Result `json:"runners,omitempty"`
	UndeclaredRunners []string        `json:"undeclaredRunners,omitempty"`
	// Runtimes are the runtimes of spec.runtimes[], installed or converged
	// after the runners; UndeclaredRuntimes the other recorded runtimes.
	Runtimes           []gitops.Result `json:"runtimes,omitempty"`
	UndeclaredRuntimes []string        `json:"undeclaredRuntimes,omitempty"`
	Elapsed            time.Duration   `json:"elapsed"`
}

// Run installs. On a component failure it returns the result with the
// failure recorded and an *apply.FailedError; what was applied stays.
func (i *Install) Run(ctx context.Context) (*InstallResult, error) {
	start := time.Now()
	l, err := i.Source.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if err := l.Release.CheckInstaller(version.Version); err != nil {
		return nil, err
	}
	res, err := render.Render(ctx, l.RenderOptions(i.Set))
	if err != nil {
		if render.IsInputError(err) {
			return nil, inputErr(err)
		}
		return nil, err
	}
	// What the cluster would refuse (a pod the namespace's restricted Pod
	// Security Standard does not admit) or the platform's rules forbid
	// stops here, before anything is touched.
	if err := render.Verify(res, render.CheckOptionsFor(l.Installation)); err != nil {
		return nil, inputErr(err)
	}
	conf := configuration(i.Conn, i.Cluster)
	cl, err := conf.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	in := l.Installation
	declared, err := connectRunners(ctx, in, i.Cluster, cl)
	if err != nil {
		return nil, err
	}
	declaredRuntimes, err := connectRuntimes(ctx, in, i.Cluster, cl)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, d := range declaredRuntimes {
			clear(d.token)
		}
	}()
	out := &InstallResult{Installation: in.Metadata.Name, Namespace: res.Namespace, Version: res.Version, DryRun: i.DryRun}
	// Every check runs before anything is touched (the lock below creates
	// the namespace on a first install).
	pre, err := runPreflight(ctx, &preflight.Env{Installation: in, Release: l.Release, Releases: l.Releases, Rendered: res, Cluster: cl, MovesAvailability: true},
		preflight.Options{Skip: i.SkipChecks})
	out.Preflight = pre
	if pre != nil && i.Preflight != nil {
		i.Preflight(pre)
	}
	if err != nil {
		out.Elapsed = time.Since(start)
		return out, err
	}
	applyOpts := apply.Options{
		Getter: cl.Getter, Client: cl.Client, Result: res, Charts: l.Charts(l.Release.Version),
		Concurrency: i.Concurrency, Timeout: i.Timeout, DryRun: i.DryRun, Reporter: i.Reporter,
	}
	if i.DryRun {
		rep, err := apply.Apply(ctx, applyOpts)
		if rep != nil {
			out.Components = rep.Components
		}
		out.Elapsed = time.Since(start)
		return out, err
	}

	ctx, h, err := conf.lockAndLoad(ctx, res.Namespace, "install", i.LockWait, i.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	store, st := h.store, h.st
	digest, err := in.Digest()
	if err != nil {
		return nil, err
	}
	if st.Version != "" && st.Version != res.Version {
		return nil, inputErr(&VersionChangeError{Installed: st.Version, Configured: res.Version, Namespace: res.Namespace})
	}
	out.FromVersion = st.Version
	kind := state.KindInstall
	host, _ := os.Hostname()
	st.Installation, st.Namespace = in.Metadata.Name, res.Namespace
	if err := store.Begin(ctx, st, state.Operation{
		Kind: kind, Version: res.Version, FromVersion: st.Version, Started: start,
		Installer: version.Version, Host: host, Components: componentNames(res), SkippedChecks: pre.Skipped,
		Bundles: l.BundleUses(),
	}); err != nil {
		return nil, err
	}
	finish := func(outcome, msg string) error {
		return store.Finish(context.WithoutCancel(ctx), st, outcome, msg)
	}

	rep, err := secrets.Ensure(ctx, cl.Client, res.Namespace, res.Secrets, secrets.GenerateOptions{Domain: in.Spec.Domain})
	if err != nil {
		if ferr := finish(state.OutcomeFailed, "generating secrets: "+err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return nil, fmt.Errorf("generating secrets: %w", err)
	}
	out.Secrets = &rep
	out.CertificateRenewal = renewIfDue(ctx, cl.Client, res.Namespace, in)

	if out.Move, err = i.moveAvailability(ctx, cl, in, res, st, applyOpts); err != nil {
		err = fmt.Errorf("moving databases between spec.availability single and high: %w (run onprem install again to finish the move: its backup and record are kept)", err)
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		if ferr := finish(state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		out.Elapsed = time.Since(start)
		return out, err
	}

	arep, aerr := apply.Apply(ctx, applyOpts)
	if arep != nil {
		out.Components = arep.Components
		upgrade.Record(st, res, arep)
	}
	out.Elapsed = time.Since(start)
	if out.Move != nil {
		// The move left the services stopped for this apply to start.
		if aerr == nil {
			out.Move.Downtime = time.Since(out.Move.stopped)
		} else {
			aerr = fmt.Errorf("%w (the databases were moved and hold their data; the services stay stopped until an install succeeds: fix the cause and run onprem install again, which starts them)", aerr)
		}
	}
	if aerr != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			aerr = fmt.Errorf("%w: %w", aerr, cause)
		}
		if ferr := finish(state.OutcomeFailed, aerr.Error()); ferr != nil {
			aerr = errors.Join(aerr, ferr)
		}
		return out, aerr
	}
	p := &runner.Platform{Cluster: cl, Namespace: res.Namespace, Store: store, State: st, Installation: in}
	out.Runners, out.UndeclaredRunners, err = convergeRunners(ctx, l, p, res.Version, declared, runner.Options{Timeout: i.Timeout, Reporter: i.Reporter})
	if err == nil {
		rp := runtimePlatform(cl, res.Namespace, store, st, in)
		out.Runtimes, out.UndeclaredRuntimes, err = convergeRuntimes(ctx, l, rp, res.Version, declaredRuntimes,
			gitops.Options{Timeout: i.Timeout, Reporter: i.Reporter, Git: i.RuntimeFetch.Git}, i.RuntimeFetch)
	}
	out.Elapsed = time.Since(start)
	if err != nil {
		if ferr := finish(state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return out, err
	}
	out.CredentialRotation = rotateCredentialsIfDue(ctx, cl, i.Exec, res.Namespace, in, st, i.Timeout)
	out.KeyRotation = rotateKeysIfDue(ctx, cl, res.Namespace, in, i.Timeout)
	st.ConfigDigest = digest
	// Backups carry the configuration that made the platform (with its
	// overlay folders), so a restore can make it again anywhere.
	if err := backup.StoreConfig(ctx, cl.Client, res.Namespace, in, secretNames(res)); err != nil {
		if ferr := finish(state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		return out, err
	}
	msg := fmt.Sprintf("%d components ready", len(arep.Components))
	if out.Move != nil {
		msg += fmt.Sprintf("; moved %s (services stopped %s)", strings.Join(out.Move.Databases, ", "), out.Move.Downtime.Round(time.Second))
	}
	if r := repaired(arep.Components); len(r) > 0 {
		msg += "; repaired " + strings.Join(r, ", ")
	}
	if out.CredentialRotation != "" {
		msg += "; credentials " + out.CredentialRotation
	}
	if out.KeyRotation != "" {
		msg += "; keys " + out.KeyRotation
	}
	if err := finish(state.OutcomeSucceeded, msg); err != nil {
		return out, err
	}
	return out, nil
}

// Repaired lists what was reverted in the components applied again because
// their live objects had drifted ("Deployment/gitops-ui image").
func (r *InstallResult) Repaired() []string { return repaired(r.Components) }

func repaired(cs []apply.ComponentResult) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Repaired...)
	}
	return out
}

// secretNames lists the Secrets the installer generates for res.
func secretNames(res *render.Result) []string {
	names := make([]string, 0, len(res.Secrets))
	for _, s := range res.Secrets {
		names = append(names, s.Name)
	}
	return names
}

func componentNames(res *render.Result) []string {
	names := make([]string, 0, len(res.Components))
	for _, c := range res.Components {
		names = append(names, c.Name)
	}
	return names
}

// VersionChangeError: install was asked for a version other than the
// installed one. Changing versions is an upgrade (with its path, backups,
// migrations and rollback), never a re-install.
type VersionChangeError struct {
	Installed, Configured, Namespace string
}

func (e *VersionChangeError) Error() string {
	return fmt.Sprintf("platform %s is installed in namespace %s but the configuration asks for %s: install does not change versions; "+
		"run `onprem upgrade plan --to %s` then `onprem upgrade apply --to %s` (or set spec.version back to %s)",
		e.Installed, e.Namespace, e.Configured, e.Configured, e.Configured, e.Installed)
}

// rotateCredentialsIfDue rotates the services' own database logins that
// spec.rotation.credentialsMaxAgeDays says are old, once the platform has
// converged (installer/rotate), and finishes interrupted rotations. As
// with the certificate, a rotation that fails does not fail the install:
// every service keeps a login its database accepts, and the result and
// the log say what happened and what to run.
func rotateCredentialsIfDue(ctx context.Context, cl *kube.Cluster, ex podexec.Executor, ns string, in *config.Installation, st *state.State, timeout time.Duration) string {
	days := in.Spec.Rotation.CredentialsMaxAgeDays
	if days <= 0 {
		return ""
	}
	var done []string
	for _, engine := range credentialEngines {
		if _, ok := st.Components[engine]; !ok {
			continue // external, or not used: the operator's
		}
		due, err := rotate.Due(ctx, cl.Client, ns, engine, time.Duration(days)*24*time.Hour, time.Now())
		if err == nil && len(due) == 0 {
			continue
		}
		var res *rotate.CredentialsResult
		if err == nil {
			res, err = rotate.Credentials(ctx, credentialOptions(cl, ex, ns, engine, due, timeout,
				func(line string) { slog.Info("credential rotation: " + line) }))
		}
		if err != nil {
			msg := fmt.Sprintf("%s logins are due for rotation (spec.rotation.credentialsMaxAgeDays) but were not all rotated: %v; "+
				"every service keeps a login its database accepts: run 'onprem rotate credentials --database %s' to finish", engine, err, engine)
			slog.Warn(msg)
			done = append(done, msg)
			continue
		}
		for _, l := range res.Logins {
			done = append(done, engine+" "+l.Service+" "+l.From+" → "+l.To)
		}
	}
	for _, engine := range adminEngines {
		if _, ok := st.Components[engine]; !ok {
			continue
		}
		due, err := rotate.AdminDue(ctx, cl.Client, ns, engine, time.Duration(days)*24*time.Hour, time.Now())
		if err == nil && due {
			o := credentialOptions(cl, ex, ns, engine, nil, timeout, func(line string) { slog.Info("credential rotation: " + line) })
			o.Admin = true
			_, err = rotate.Credentials(ctx, o)
			if err == nil {
				done = append(done, engine+" admin")
			}
		}
		if err != nil {
			msg := fmt.Sprintf("the %s admin is due for rotation (spec.rotation.credentialsMaxAgeDays) but was not rotated: %v; "+
				"onprem's scripts keep working with the admin of the Secret: run 'onprem rotate credentials --admin --database %s' to finish", engine, err, engine)
			slog.Warn(msg)
			done = append(done, msg)
		}
	}
	if len(done) == 0 {
		return ""
	}
	slog.Info("credentials rotated (spec.rotation.credentialsMaxAgeDays)", "logins", strings.Join(done, ", "))
	return "rotated (spec.rotation.credentialsMaxAgeDays): " + strings.Join(done, ", ")
}

// rotateKeysIfDue rotates the signing and encryption keys when
// spec.rotation.keysMaxAgeDays says they are old, or finishes a key
// rotation that was interrupted, once the platform has converged
// (installer/rotate). It never retires the old keys: tokens issued before
// stay valid until the operator runs 'onprem rotate keys --retire'. A
// rotation that fails does not fail the install: every pod accepts the
// keys any other pod uses, and the result and the log say what to run.
func rotateKeysIfDue(ctx context.Context, cl *kube.Cluster, ns string, in *config.Installation, timeout time.Duration) string {
	days := in.Spec.Rotation.KeysMaxAgeDays
	if days <= 0 {
		return ""
	}
	due, err := rotate.KeysDue(ctx, cl.Client, ns, time.Duration(days)*24*time.Hour, time.Now())
	if err == nil && !due {
		return ""
	}
	var res *rotate.KeysResult
	if err == nil {
		res, err = rotate.Keys(ctx, rotate.KeysOptions{Client: cl.Client, Namespace: ns, RolloutTimeout: timeout,
			Progress: func(line string) { slog.Info("key rotation: " + line) }})
	}
	if err != nil {
		msg := fmt.Sprintf("the signing and encryption keys are due for rotation (spec.rotation.keysMaxAgeDays) but were not rotated: %v; "+
			"every service accepts the keys in use: run 'onprem rotate keys' to finish", err)
		slog.Warn(msg)
		return msg
	}
	msg := fmt.Sprintf("rotated (spec.rotation.keysMaxAgeDays): %d keys in each ring; retire the older ones with 'onprem rotate keys --retire' once their tokens have expired", res.RingAfter)
	slog.Info("keys " + msg)
	return msg
}

// renewIfDue renews the self-signed serving certificate when
// spec.rotation.certificateMaxAgeDays says it is old (installer/rotate).
// A certificate that cannot be renewed does not fail the install: what
// happened is said in the result and the log, with what to run.
func renewIfDue(ctx context.Context, c kubernetes.Interface, ns string, in *config.Installation) string {
	days := in.Spec.Rotation.CertificateMaxAgeDays
	if days <= 0 || in.Spec.TLS.Mode != config.TLSModeSelfSigned {
		return ""
	}
	res, err := rotate.RenewIfDue(ctx, c, ns, days, time.Now())
	switch {
	case err != nil:
		msg := "the serving certificate is due for renewal (spec.rotation.certificateMaxAgeDays) but was not renewed: " + err.Error()
		slog.Warn(msg)
		return msg
	case res == nil:
		return ""
	}
	slog.Info("serving certificate renewed", "summary", res.Summary)
	return "renewed (spec.rotation.certificateMaxAgeDays): " + res.Summary
}

// moveAvailability moves the databases whose installed form is not the
// one spec.availability asks for, or finishes a move an earlier install
// began (availabilityMove).
func (i *Install) moveAvailability(ctx context.Context, cl *kube.Cluster, in *config.Installation, res *render.Result, st *state.State, applyOpts apply.Options) (*MoveResult, error) {
	changes, err := preflight.AvailabilityChanges(ctx, cl.Client, res.Namespace, in)
	if err != nil {
		return nil, err
	}
	dir := i.MoveDir
	if dir == "" {
		if dir, err = DefaultMoveDir(); err != nil {
			return nil, err
		}
	}
	ex := i.Exec
	if ex == nil {
		ex = podexec.Kube{Config: cl.Config, Client: cl.Client}
	}
	timeout := i.Timeout
	if timeout <= 0 {
		timeout = apply.DefaultTimeout
	}
	m := &availabilityMove{cl: cl, exec: ex, ns: res.Namespace, res: res, st: st, applyOpts: applyOpts, dir: dir,
		timeout: timeout, changes: changes, beforeDelete: i.beforeMoveDelete}
	return m.run(ctx)
}
