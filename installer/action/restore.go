package action

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/backupstore"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/gitops"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/runner"
	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/version"
	"onprem.dev/onprem/preflight"
	"onprem.dev/onprem/upgrade"
)

// Restore brings a platform back from a backup.
//
// Onto an empty cluster (disaster recovery) it installs the backup's
// platform version with the backup's Secrets (every service keeps its
// credentials and keys), first everything but the services (ingress,
// databases, their provisioning), then restores every database, then
// starts the services, and then installs again the runners and runtimes
// that ran on the lost cluster (a runtime's Git token is never in a
// backup: it is asked for as 'runtime install' asks for it).
//
// Onto the cluster of an installed platform (a database volume lost, data
// damaged) it needs Force and Confirmed: it stops the services, provisions
// the databases' users again, restores the databases' contents and starts
// the services; the Secrets in the cluster are kept.
//
// It refuses, before changing anything, a backup it cannot decrypt, a
// damaged or truncated one, one of a newer format or platform version than
// this onprem knows, and one of another version than the installed
// platform's. Killed midway, it is finished by running it again.
type Restore struct {
	// Cluster is the cluster to restore onto.
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn *Configuration
	// From is the backup: a file, s3://BUCKET/PREFIX/NAME, or a name at
	// Destination; with Latest and Destination, the newest there.
	From        string
	Destination BackupDestination
	Latest      bool
	Keys        backupfile.Keys
	// ConfigPath replaces the backup's configuration (a new cluster's
	// storage class, say); its spec.version must be the backup's.
	ConfigPath string
	// Bundles, PublicKeys and AllowUnsigned: air-gapped bundles, as for
	// install.
	Bundles       []string
	PublicKeys    []string
	AllowUnsigned bool
	// Force allows restoring into an installed platform, replacing its
	// databases' contents; Confirmed is the operator's confirmation.
	Force, Confirmed bool
	// IncludeRedis restores Redis's data when the backup has it.
	IncludeRedis bool
	// GitTokenFiles are the Git tokens of the runtimes to install again,
	// by runtime name; a runtime without one uses TokenEnv (default
	// ONPREM_GIT_TOKEN), then spec.runtimes[].gitToken.
	GitTokenFiles map[string]string
	TokenEnv      string
	// PlatformTokenFile is the platform token the runtimes register with
	// again; when empty, $ONPREM_PLATFORM_TOKEN, then
	// spec.runtimeConfig.platformToken. Like Git tokens, it is not in
	// backups.
	PlatformTokenFile string
	RuntimeFetch      RuntimeFetch
	SkipChecks        []string
	Concurrency       int
	Timeout           time.Duration
	LockWait          time.Duration
	LockLease         time.Duration
	WorkDir           string
	Reporter          apply.Reporter
	Progress          func(backup.Progress)
	Preflight         func(*preflight.Report)
	// Exec runs the restore tools (default: in the pods, through the API
	// server).
	Exec podexec.Executor
}

// Restore modes.
const (
	RestoreEmptyCluster = "empty-cluster"
	RestoreInPlace      = "in-place"
)

// RestoreResult is what a restore did.
type RestoreResult struct {
	Backup       string                  `json:"backup"`
	Where        string                  `json:"where"`
	Installation string                  `json:"installation"`
	Namespace    string                  `json:"namespace"`
	Version      string                  `json:"version"`
	Mode         string                  `json:"mode"`
	Created      time.Time               `json:"backupCreated"`
	Secrets      *backup.SecretsReport   `json:"secrets,omitempty"`
	Databases    []string                `json:"databases"`
	Components   []apply.ComponentResult `json:"components,omitempty"`
	Runners      []AttachmentResult      `json:"runners,omitempty"`
	Runtimes     []AttachmentResult      `json:"runtimes,omitempty"`
	// Todo lists what the operator must still do (runtimes whose Git
	// token was not given, attachments on other clusters to check).
	Todo []string `json:"todo,omitempty"`
	// Serving is when the platform served again with the backup's data
	// (every component Ready, the restore recorded), from the command's
	// start: the recovery time of the platform itself. Elapsed, the
	// whole command, adds the runners and runtimes installed again.
	Serving time.Duration `json:"serving,omitempty"`
	Elapsed time.Duration `json:"elapsed"`
}

// AttachmentResult is a runner or runtime after a restore.
type AttachmentResult struct {
	Name string `json:"name"`
	// Outcome: installed, left (on another cluster), skipped, failed.
	Outcome string `json:"outcome"`
	Message string `json:"message,omitempty"`
	// Elapsed is how long its install took (installed or failed).
	Elapsed time.Duration `json:"elapsed,omitempty"`
}

// LivePlatformError: the cluster runs a platform and Force was not given.
type LivePlatformError struct {
	Namespace, Version, Backup string
	Created                    time.Time
	Force                      bool
}

func (e *LivePlatformError) Error() string {
	if e.Force {
		return fmt.Sprintf("platform %s runs in namespace %s: restoring %s replaces its databases' contents with the backup's from %s; confirm with --yes",
			e.Version, e.Namespace, e.Backup, e.Created.Format(time.RFC3339))
	}
	return fmt.Sprintf("platform %s runs in namespace %s and holds data: restoring %s would replace its databases' contents with the backup's from %s; nothing was changed. "+
		"To restore onto an empty cluster, point --context at it; to replace this platform's data, give --force (and confirm, or --yes)",
		e.Version, e.Namespace, e.Backup, e.Created.Format(time.RFC3339))
}

// Run restores.
func (r *Restore) Run(ctx context.Context) (*RestoreResult, error) {
	start := time.Now()
	progress := r.Progress
	if progress == nil {
		progress = func(backup.Progress) {}
	}
	phase := func(msg string) {
		progress(backup.Progress{Item: "restore", Phase: backup.PhaseProgress, Message: msg})
	}
	ids, err := r.Keys.DecryptWith()
	if err != nil {
		return nil, inputErr(err)
	}
	store, name, err := r.locate(ctx)
	if err != nil {
		return nil, err
	}
	phase("restoring " + name + " from " + store.String())
	o, err := openBackup(ctx, store, name, backup.OpenOptions{Identities: ids, WorkDir: r.WorkDir, Progress: progress})
	if err != nil {
		return nil, err
	}
	defer o.Close()
	m := o.Manifest
	out := &RestoreResult{Backup: name, Where: store.String(), Installation: m.Installation, Version: m.Version, Created: m.Created}
	for _, e := range m.Databases() {
		out.Databases = append(out.Databases, e.Engine+"/"+e.Database)
	}

	l, cfgPath, cleanup, err := r.load(ctx, o)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	defer l.Close()
	in := l.Installation
	if err := l.Release.CheckInstaller(version.Version); err != nil {
		return nil, err
	}
	res, err := render.Render(ctx, l.RenderOptions(nil))
	if err != nil {
		return nil, err
	}
	ns := res.Namespace
	out.Namespace = ns
	conf := configuration(r.Conn, r.Cluster)
	cl, err := conf.Cluster(ctx)
	if err != nil {
		return nil, err
	}
	// What is there, read before the lock is taken (which creates the
	// namespace), decides the mode; it is read again under the lock.
	before, err := state.NewStore(cl.Client, ns).Load(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.checkTarget(before, ns, name, m); err != nil {
		return nil, err
	}
	// The backup brings the Secrets the checks look for (the bucket's,
	// the external databases', the pull Secret).
	provided := map[string]*corev1.Secret{}
	for _, s := range o.Secrets {
		if s.Namespace == m.Namespace {
			provided[s.Name] = s.Object()
		}
	}
	pre, err := runPreflight(ctx, &preflight.Env{Installation: in, Release: l.Release, Releases: l.Releases, Rendered: res, Cluster: cl, Provided: provided},
		preflight.Options{Skip: r.SkipChecks})
	if pre != nil && r.Preflight != nil {
		r.Preflight(pre)
	}
	if err != nil {
		return out, err
	}

	lctx, h, err := conf.lockAndLoad(ctx, ns, "restore", r.LockWait, r.LockLease)
	if err != nil {
		return nil, err
	}
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			h.unlock()
		}
	}
	defer unlock()
	if err := r.checkTarget(h.st, ns, name, m); err != nil {
		return nil, err
	}
	out.Mode = RestoreEmptyCluster
	if h.st.Version != "" {
		out.Mode = RestoreInPlace
	}
	host, _ := os.Hostname()
	h.st.Installation, h.st.Namespace = in.Metadata.Name, ns
	if err := h.store.Begin(lctx, h.st, state.Operation{
		Kind: state.KindRestore, Version: m.Version, Installer: version.Version, Host: host,
		Components: componentNames(res), SkippedChecks: pre.Skipped, Bundles: l.BundleUses(),
		Backup: &state.BackupRecord{Name: name, Where: store.String(), Trigger: m.Trigger, Version: m.Version, Databases: len(m.Databases())},
	}); err != nil {
		return nil, err
	}
	fail := func(err error) (*RestoreResult, error) {
		if cause := context.Cause(lctx); cause != nil && lctx.Err() != nil {
			err = fmt.Errorf("%w: %w", err, cause)
		}
		err = fmt.Errorf("%w (run the same restore again to finish it)", err)
		if ferr := h.store.Finish(context.WithoutCancel(lctx), h.st, state.OutcomeFailed, err.Error()); ferr != nil {
			err = errors.Join(err, ferr)
		}
		out.Elapsed = time.Since(start)
		return out, err
	}
	ex := r.Exec
	if ex == nil {
		ex = podexec.Kube{Config: cl.Config, Client: cl.Client}
	}
	engines := map[string]bool{}
	for _, e := range o.Engines() {
		if c := res.Component(e); c != nil {
			engines[e] = true
		}
	}
	data := backup.DataOptions{Client: cl.Client, Exec: ex, Namespace: ns, Engines: engines, Redis: r.IncludeRedis, Progress: progress}
	applyOpts := apply.Options{Getter: cl.Getter, Client: cl.Client, Charts: l.Charts(l.Release.Version),
		Concurrency: r.Concurrency, Timeout: r.Timeout, Reporter: r.Reporter}

	if out.Mode == RestoreEmptyCluster {
		phase("restoring the Secrets")
		if out.Secrets, err = o.RestoreSecrets(lctx, cl.Client, ns, backup.SecretsRefuse); err != nil {
			return fail(err)
		}
		if _, err := secrets.Ensure(lctx, cl.Client, ns, res.Secrets, secrets.GenerateOptions{Domain: in.Spec.Domain}); err != nil {
			return fail(fmt.Errorf("generating secrets: %w", err))
		}
		phase("installing platform " + m.Version + " without its services: ingress, databases, their provisioning")
		applyOpts.Result = withoutServices(res)
		rep, err := apply.Apply(lctx, applyOpts)
		if rep != nil {
			upgrade.Record(h.st, res, rep)
		}
		if err != nil {
			return fail(err)
		}
		phase("restoring the databases")
		if err := o.RestoreData(lctx, data); err != nil {
			return fail(err)
		}
		phase("starting the services")
		applyOpts.Result = res
		rep, err = apply.Apply(lctx, applyOpts)
		if rep != nil {
			out.Components = rep.Components
			upgrade.Record(h.st, res, rep)
		}
		if err != nil {
			return fail(err)
		}
		finished := m.Finished
		if finished.IsZero() {
			finished = m.Created
		}
		made := &state.BackupRecord{Name: name, Where: store.String(), Trigger: m.Trigger, Databases: len(m.Databases()), Version: m.Version}
		mergeState(h.st, o.State, cl.Server, made, finished)
	} else {
		phase("stopping the services, provisioning the databases' users again")
		if out.Secrets, err = o.RestoreSecrets(lctx, cl.Client, ns, backup.SecretsMissing); err != nil {
			return fail(err)
		}
		// Both at once: provisioning changes no user a running service
		// relies on (the same names and passwords).
		provisioned := make(chan error, 1)
		go func() { provisioned <- provisionAgain(lctx, cl, res) }()
		_, serr := backup.StopServices(lctx, cl.Client, ns, serviceNames(res))
		if err := errors.Join(serr, <-provisioned); err != nil {
			return fail(err)
		}
		phase("restoring the databases")
		if err := o.RestoreData(lctx, data); err != nil {
			return fail(err)
		}
		phase("starting the services")
		timeout := r.Timeout
		if timeout <= 0 {
			timeout = apply.DefaultTimeout
		}
		if _, err := backup.StartServices(lctx, cl.Client, ns, timeout); err != nil {
			return fail(err)
		}
	}
	if digest, err := in.Digest(); err == nil {
		h.st.ConfigDigest = digest
	}
	if err := backup.StoreConfig(lctx, cl.Client, ns, in, secretNames(res)); err != nil {
		return fail(err)
	}
	msg := fmt.Sprintf("restored %s (platform %s, made %s): %d databases", name, m.Version, m.Created.Format(time.RFC3339), len(out.Databases))
	if err := h.store.Finish(lctx, h.st, state.OutcomeSucceeded, msg); err != nil {
		return out, err
	}
	unlock()
	out.Serving = time.Since(start)
	if out.Mode == RestoreEmptyCluster {
		r.attach(ctx, o, l, cfgPath, cl, out)
	}
	out.Elapsed = time.Since(start)
	return out, nil
}

// locate finds the backup named by From, Destination and Latest.
func (r *Restore) locate(ctx context.Context) (backupstore.Store, string, error) {
	if r.From == "" && !r.Latest {
		return nil, "", inputErr(errors.New("name the backup: --from FILE, --from s3://BUCKET/PREFIX/NAME" + backupfile.Extension + ", or --from DESTINATION --latest"))
	}
	if r.Latest {
		d := r.Destination
		if d.To == "" {
			d.To = r.From
		}
		store, err := d.open(ctx, nil, "")
		if err != nil {
			return nil, "", err
		}
		latest, err := backupstore.Latest(ctx, store, "")
		if err != nil {
			return nil, "", inputErr(err)
		}
		return store, latest.Name, nil
	}
	store, name, err := r.Destination.ref(ctx, nil, "", r.From)
	if err != nil {
		return nil, "", err
	}
	return store, name, nil
}

// load reads the configuration to restore with: ConfigPath, else the
// backup's (unpacked with its overlay folders into a private temporary
// folder). Its version must be the backup's, and a release this onprem
// (or a bundle) has.
func (r *Restore) load(ctx context.Context, o *backup.Opened) (*Loaded, string, func(), error) {
	m := o.Manifest
	if len(r.Bundles) == 0 {
		set, err := release.Embedded()
		if err != nil {
			return nil, "", nil, err
		}
		if _, err := set.Get(m.Version); err != nil {
			var known []string
			for _, rel := range set.All() {
				known = append(known, rel.Version)
			}
			return nil, "", nil, inputErr(fmt.Errorf("the backup holds platform %s, which this onprem (%s) does not know (it knows %s): use an onprem that ships %s, or give its bundle (--bundle)",
				m.Version, version.Version, strings.Join(known, ", "), m.Version))
		}
	}
	cleanup := func() {}
	path := r.ConfigPath
	if path == "" {
		dir, err := os.MkdirTemp(r.WorkDir, ".onprem-restore-config-")
		if err != nil {
			return nil, "", nil, err
		}
		cleanup = func() { _ = os.RemoveAll(dir) }
		if path, err = backup.UnpackConfig(dir, o.Config); err != nil {
			cleanup()
			return nil, "", nil, err
		}
	}
	src := Source{ConfigPath: path, Bundles: r.Bundles, PublicKeys: r.PublicKeys, AllowUnsigned: r.AllowUnsigned}
	if r.ConfigPath == "" {
		// The platform's version is the backup's, whatever the kept file
		// said (an upgrade --to another version than the file's).
		v := m.Version
		src.Overrides.Version = &v
	}
	l, err := src.Load(ctx)
	if err != nil {
		cleanup()
		if r.ConfigPath == "" {
			return nil, "", nil, fmt.Errorf("the backup's configuration: %w", err)
		}
		return nil, "", nil, err
	}
	if l.Installation.Spec.Version != m.Version {
		l.Close()
		cleanup()
		return nil, "", nil, inputErr(fmt.Errorf("%s: spec.version is %s but the backup holds platform %s: a restore installs the backup's version (upgrade afterwards); set spec.version: %s",
			r.ConfigPath, l.Installation.Spec.Version, m.Version, m.Version))
	}
	return l, path, cleanup, nil
}

// checkTarget refuses a restore onto a platform that runs, unless forced
// and confirmed, and onto one of another version or installation.
func (r *Restore) checkTarget(st *state.State, ns, name string, m *backupfile.Manifest) error {
	if st.Version == "" {
		if len(st.Components) > 0 && !unfinishedRestore(st) && !r.Force {
			return inputErr(fmt.Errorf("namespace %s holds components of a platform that was never installed to the end (%s): restoring would replace them; give --force (and confirm, or --yes), or restore onto an empty cluster",
				ns, strings.Join(slices.Sorted(maps.Keys(st.Components)), ", ")))
		}
		return nil
	}
	if st.Installation != "" && st.Installation != m.Installation {
		return inputErr(fmt.Errorf("namespace %s holds installation %q, the backup is of %q: restore it onto an empty cluster (or into its own namespace)", ns, st.Installation, m.Installation))
	}
	if st.Version != m.Version {
		return inputErr(fmt.Errorf("platform %s runs in namespace %s, the backup holds %s: its data fits only its own version; restore onto an empty cluster, or bring the platform to %s first",
			st.Version, ns, m.Version, m.Version))
	}
	if !r.Force || !r.Confirmed {
		return inputErr(&LivePlatformError{Namespace: ns, Version: st.Version, Backup: name, Created: m.Created, Force: r.Force})
	}
	return nil
}

// unfinishedRestore reports whether the last operation is a restore that
// did not succeed: the platform namespace holds what it made.
func unfinishedRestore(st *state.State) bool {
	for i := len(st.History) - 1; i >= 0; i-- {
		op := st.History[i]
		if op.Kind == state.KindBackup {
			continue
		}
		return op.Kind == state.KindRestore && op.Outcome != state.OutcomeSucceeded
	}
	return false
}

// withoutServices is res without the services (the pipelines and GitOps
// groups) and without the scheduled backup, which must not read the
// databases before their data is back: what must run before the databases
// are restored.
func withoutServices(res *render.Result) *render.Result {
	cp := *res
	cp.Components = nil
	for _, c := range res.Components {
		if !isService(c) && c.Group != release.GroupBackup {
			cp.Components = append(cp.Components, c)
		}
	}
	return &cp
}

func isService(c *render.Component) bool {
	return c.Group == release.GroupPipelines || c.Group == release.GroupGitOps
}

func serviceNames(res *render.Result) []string {
	var out []string
	for _, c := range res.Components {
		if isService(c) {
			out = append(out, c.Name)
		}
	}
	return out
}

// provisionAgain runs db-provision's Job once more, under another name (its
// own Job belongs to its Helm release): a database whose volume was lost
// gets its services' users back before its data.
func provisionAgain(ctx context.Context, cl *kube.Cluster, res *render.Result) error {
	c := res.Component(render.ProvisionComponent)
	if c == nil {
		return nil
	}
	for _, obj := range c.Objects {
		if obj.GetKind() != "Job" {
			continue
		}
		job := obj.DeepCopy()
		job.SetName("onprem-restore-" + render.ProvisionComponent)
		unstructured.RemoveNestedField(job.Object, "spec", "selector")
		unstructured.RemoveNestedField(job.Object, "spec", "template", "metadata", "labels", "batch.kubernetes.io/controller-uid")
		if err := upgrade.RunJob(ctx, cl.Client, res.Namespace, job, render.DefaultMigrationTimeout); err != nil {
			return fmt.Errorf("provisioning the databases' users again: %w", err)
		}
		bg := metav1.DeletePropagationBackground
		_ = cl.Client.BatchV1().Jobs(res.Namespace).Delete(ctx, job.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg})
	}
	return nil
}

// mergeState makes the record of the restored platform: the backup's
// history before the restore's own operations (so the restore stays the
// newest), its completed migrations (never run again), and its runners and
// runtimes, those of the platform's cluster now on this one.
//
// The backup's record was copied while the backup ran, so that backup
// shows there as running: it is made, from the backup's own manifest, the
// successful backup it is (made is the restore's record of it). Another
// operation running then was interrupted by the loss.
func mergeState(st, saved *state.State, server string, made *state.BackupRecord, finished time.Time) {
	seen := map[string]bool{}
	for _, op := range st.History {
		seen[op.ID] = true
	}
	var hist []state.Operation
	for _, op := range saved.History {
		if !seen[op.ID] {
			switch {
			case op.Outcome == state.OutcomeRunning && op.Kind == state.KindBackup && made != nil:
				rec := *made
				if rec.Where == "" && op.Backup != nil {
					rec.Where = op.Backup.Where
				}
				op.Outcome, op.Finished, op.Backup = state.OutcomeSucceeded, finished, &rec
				op.Message = fmt.Sprintf("backup %s written to %s (%d databases); the platform was restored from it", rec.Name, rec.Where, rec.Databases)
			case op.Outcome == state.OutcomeRunning:
				op.Outcome = state.OutcomeFailed
				op.Message = "running when the backup was made"
			}
			hist = append(hist, op)
		}
	}
	st.History = append(hist, st.History...)
	for _, mg := range saved.Migrations {
		if !st.Migrated(mg.Name) {
			st.Migrations = append(st.Migrations, mg)
		}
	}
	st.Runners = mergeAttachments(st.Runners, saved.Runners, func(rec *state.Runner) {
		if backup.OnPlatformCluster(rec.Kubeconfig, rec.Context) {
			rec.Server = server
		}
	})
	st.Runtimes = mergeAttachments(st.Runtimes, saved.Runtimes, func(rec *state.Runtime) {
		if backup.OnPlatformCluster(rec.Kubeconfig, rec.Context) {
			rec.Server = server
		}
	})
	if st.RuntimeConfig == nil {
		st.RuntimeConfig = saved.RuntimeConfig
	}
}

// mergeAttachments adds to into (the restored record's runners or
// runtimes; made when nil and saved has some) the attachments of saved
// that it does not hold, each moved by move (one on the platform's
// cluster is now on the new cluster's server), and returns it.
func mergeAttachments[R any](into, saved map[string]R, move func(*R)) map[string]R {
	if into == nil && len(saved) > 0 {
		into = map[string]R{}
	}
	for n, rec := range saved {
		if _, ok := into[n]; ok {
			continue
		}
		move(&rec)
		into[n] = rec
	}
	return into
}

// attach installs again the runners and runtimes that ran on the lost
// cluster (each through its own action, under the lock), with their Git
// sources and managed clusters. Those on other clusters were not lost.
func (r *Restore) attach(ctx context.Context, o *backup.Opened, l *Loaded, cfgPath string, cl *kube.Cluster, out *RestoreResult) {
	src := Source{ConfigPath: cfgPath, Bundles: r.Bundles, PublicKeys: r.PublicKeys, AllowUnsigned: r.AllowUnsigned}
	regs := o.Registrations
	for _, name := range slices.Sorted(maps.Keys(regs.Runners)) {
		rec := regs.Runners[name]
		if !backup.OnPlatformCluster(rec.Kubeconfig, rec.Context) {
			out.Runners = append(out.Runners, AttachmentResult{Name: name, Outcome: "left", Message: "runs on another cluster (" + rec.Server + "): not lost"})
			continue
		}
		a := &RunnerInstall{Source: src, Cluster: r.Cluster, Name: name, Namespace: rec.Namespace, Concurrency: rec.Concurrency,
			Timeout: r.Timeout, LockWait: r.LockWait, LockLease: r.LockLease, Reporter: r.Reporter}
		began := time.Now()
		if _, err := a.Run(ctx); err != nil {
			out.Runners = append(out.Runners, AttachmentResult{Name: name, Outcome: "failed", Message: err.Error(), Elapsed: time.Since(began)})
			out.Todo = append(out.Todo, fmt.Sprintf("runner %s: %v; then: onprem runner install %s -c onprem.yaml", name, err, name))
			continue
		}
		out.Runners = append(out.Runners, AttachmentResult{Name: name, Outcome: "installed", Elapsed: time.Since(began)})
	}
	env := r.TokenEnv
	if env == "" {
		env = gitops.TokenEnv
	}
	names := slices.Sorted(maps.Keys(regs.Runtimes))
	// The configuration runtime first: the others find its layout.
	if cfg := regs.RuntimeConfig; cfg != nil && cfg.ConfigRuntime != "" {
		if i := slices.Index(names, cfg.ConfigRuntime); i > 0 {
			names = append(append([]string{cfg.ConfigRuntime}, names[:i]...), names[i+1:]...)
		}
	}
	for _, name := range names {
		rec := regs.Runtimes[name]
		if !backup.OnPlatformCluster(rec.Kubeconfig, rec.Context) {
			out.Runtimes = append(out.Runtimes, AttachmentResult{Name: name, Outcome: "left", Message: "runs on another cluster (" + rec.Server + "): not lost"})
			continue
		}
		file := r.GitTokenFiles[name]
		if file == "" && !hasToken(l.Installation, name, env) {
			msg := "its Git token is not in backups (it lives only on the runtime's cluster): give it to install the runtime again"
			out.Runtimes = append(out.Runtimes, AttachmentResult{Name: name, Outcome: "skipped", Message: msg})
			out.Todo = append(out.Todo, fmt.Sprintf("runtime %s: %s: onprem restore ... --git-token-file %s=FILE, or onprem runtime install %s --namespace %s --git-token-file FILE -c onprem.yaml",
				name, msg, name, name, rec.Namespace))
			continue
		}
		if r.PlatformTokenFile == "" && !hasPlatformToken(l.Installation) {
			msg := "the platform token it registers with is not in backups (it lives only on the runtime's cluster): give it to install the runtime again"
			out.Runtimes = append(out.Runtimes, AttachmentResult{Name: name, Outcome: "skipped", Message: msg})
			out.Todo = append(out.Todo, fmt.Sprintf("runtime %s: %s: onprem restore ... --platform-token-file FILE, or onprem runtime install %s --namespace %s --platform-token-file FILE -c onprem.yaml",
				name, msg, name, rec.Namespace))
			continue
		}
		a := &RuntimeInstall{Source: src, Cluster: r.Cluster, Name: name, Namespace: rec.Namespace, TokenFile: file, TokenEnv: env, PlatformTokenFile: r.PlatformTokenFile,
			Fetch: r.RuntimeFetch, Timeout: r.Timeout, LockWait: r.LockWait, LockLease: r.LockLease, Reporter: r.Reporter}
		began := time.Now()
		if _, err := a.Run(ctx); err != nil {
			out.Runtimes = append(out.Runtimes, AttachmentResult{Name: name, Outcome: "failed", Message: err.Error(), Elapsed: time.Since(began)})
			out.Todo = append(out.Todo, fmt.Sprintf("runtime %s: %v", name, err))
			continue
		}
		msg, err := restoreRuntimeObjects(ctx, o, cl, name, rec.Namespace)
		if err != nil {
			out.Runtimes = append(out.Runtimes, AttachmentResult{Name: name, Outcome: "failed", Message: err.Error(), Elapsed: time.Since(began)})
			out.Todo = append(out.Todo, fmt.Sprintf("runtime %s: its Git sources and managed clusters: %v", name, err))
			continue
		}
		out.Runtimes = append(out.Runtimes, AttachmentResult{Name: name, Outcome: "installed", Message: msg, Elapsed: time.Since(began)})
	}
}

// hasToken reports whether a Git token for runtime is available without a
// file: the environment variable, or spec.runtimes[].gitToken.
func hasToken(in *config.Installation, name, env string) bool {
	if os.Getenv(env) != "" {
		return true
	}
	for _, rt := range in.Spec.Runtimes {
		if rt.Name == name && (rt.GitToken.File != "" || rt.GitToken.Env != "") {
			return true
		}
	}
	return false
}

// hasPlatformToken reports whether the platform token is available
// without a file: $ONPREM_PLATFORM_TOKEN or spec.runtimeConfig.platformToken.
func hasPlatformToken(in *config.Installation) bool {
	return os.Getenv(gitops.PlatformTokenEnv) != "" || in.Spec.RuntimeConfig.PlatformToken != (config.SecretSource{})
}

// restoreRuntimeObjects creates the runtime's Git sources (Argo CD
// Applications) and managed clusters' Secrets from the backup.
func restoreRuntimeObjects(ctx context.Context, o *backup.Opened, cl *kube.Cluster, name, ns string) (string, error) {
	saved := o.RuntimeSecrets(ns)
	if len(saved) > 0 {
		if _, err := backup.RestoreSecrets(ctx, cl.Client, ns, saved, backup.SecretsReplace); err != nil {
			return "", err
		}
	}
	apps := o.Registrations.GitSources[name]
	if len(apps) > 0 {
		dyn, err := dynamic.NewForConfig(cl.Config)
		if err != nil {
			return "", err
		}
		for _, a := range apps {
			u := &unstructured.Unstructured{Object: a}
			u.SetNamespace(ns)
			if _, err := dyn.Resource(gitops.Applications).Namespace(ns).Apply(ctx, u.GetName(), u, metav1.ApplyOptions{FieldManager: runner.FieldManager, Force: true}); err != nil {
				return "", fmt.Errorf("git source %s: %w", u.GetName(), err)
			}
		}
	}
	return fmt.Sprintf("%d Git source(s), %d managed cluster(s) restored", len(apps), len(o.Registrations.ManagedClusters[name])), nil
}
