package backup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/backupstore"
	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/internal/counting"
)

// Opened is a backup read whole and verified (every entry against the
// manifest), ready to be restored. Close removes the local copy a bucket's
// backup was downloaded to.
type Opened struct {
	Name     string
	Where    string
	Manifest *backupfile.Manifest
	// Config is the effective configuration (ConfigSecret's keys: see
	// UnpackConfig); State the record; Secrets the generated Secrets and
	// the managed clusters' Argo CD Secrets.
	Config        map[string][]byte
	State         *state.State
	Secrets       []SavedSecret
	Registrations Registrations

	reopen     func() (io.ReadCloser, error)
	identities []age.Identity
	cleanup    func()
}

// Close forgets the Secrets' values and removes the downloaded copy.
func (o *Opened) Close() {
	for i := range o.Secrets {
		for _, v := range o.Secrets[i].Data {
			clear(v)
		}
	}
	if o.cleanup != nil {
		o.cleanup()
		o.cleanup = nil
	}
}

// OpenOptions say how to read a backup.
type OpenOptions struct {
	Identities []age.Identity
	// WorkDir receives the download of a backup from a bucket (default:
	// the system's temporary folder); it stays encrypted there.
	WorkDir  string
	Progress func(Progress)
}

// Open reads the backup name of store twice at most: a bucket's is first
// downloaded (still encrypted) to a local file, then the file is read
// whole and every entry checked, so that a wrong key, a damaged or
// truncated file or a newer format is refused before anything is changed.
// The dumps are streamed again from the file by RestoreData.
func Open(ctx context.Context, store backupstore.Store, name string, o OpenOptions) (*Opened, error) {
	progress := o.Progress
	if progress == nil {
		progress = func(Progress) {}
	}
	out := &Opened{Name: name, Where: store.String(), identities: o.Identities}
	if d, ok := store.(backupstore.Dir); ok {
		path := d.Path + "/" + name
		if _, _, err := store.Open(ctx, name); err != nil { // a clear error for a missing name
			return nil, err
		}
		out.reopen = func() (io.ReadCloser, error) { return os.Open(path) }
	} else {
		t0 := time.Now()
		progress(Progress{Item: "download", Phase: PhaseStarted, Message: "from " + store.String()})
		f, err := os.CreateTemp(o.WorkDir, ".onprem-restore-*"+backupfile.Extension)
		if err != nil {
			return nil, fmt.Errorf("a local copy of the backup: %w", err)
		}
		path := f.Name()
		out.cleanup = func() { _ = os.Remove(path) }
		r, _, err := store.Open(ctx, name)
		if err == nil {
			var n int64
			n, err = io.Copy(f, r)
			r.Close()
			if err == nil {
				err = f.Sync()
			}
			progress(Progress{Item: "download", Phase: PhaseDone, Bytes: n, Elapsed: time.Since(t0)})
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			out.Close()
			return nil, fmt.Errorf("downloading backup %s from %s: %w", name, store, err)
		}
		out.reopen = func() (io.ReadCloser, error) { return os.Open(path) }
	}
	if err := out.verify(progress); err != nil {
		out.Close()
		return nil, err
	}
	return out, nil
}

// OpenFile is Open of a local file.
func OpenFile(ctx context.Context, path string, o OpenOptions) (*Opened, error) {
	dir, name := splitPath(path)
	return Open(ctx, backupstore.Dir{Path: dir}, name, o)
}

func splitPath(path string) (string, string) {
	i := strings.LastIndex(path, "/")
	if i < 0 {
		return ".", path
	}
	if i == 0 {
		return "/", path[1:]
	}
	return path[:i], path[i+1:]
}

// verify reads the whole file once and keeps the small entries.
func (o *Opened) verify(progress func(Progress)) error {
	t0 := time.Now()
	progress(Progress{Item: "verify", Phase: PhaseStarted, Message: "decrypting and checking every entry"})
	f, err := o.reopen()
	if err != nil {
		return err
	}
	defer f.Close()
	small := map[string][]byte{}
	m, err := backupfile.Verify(f, o.identities, func(e backupfile.Entry, data []byte) error {
		small[e.Name] = data
		return nil
	})
	if err != nil {
		return err
	}
	o.Manifest = m
	for _, name := range []string{entryConfig, entryState, entrySecrets, entryRegistrations} {
		if _, ok := small[name]; !ok {
			return &backupfile.CorruptError{Entry: name, Reason: "the backup lacks this entry"}
		}
	}
	o.Config = map[string][]byte{ConfigKey: small[entryConfig]}
	if ov, ok := small[entryOverlays]; ok {
		o.Config[OverlaysKey] = ov
	}
	var st state.State
	if err := json.Unmarshal(small[entryState], &st); err != nil {
		return &backupfile.CorruptError{Entry: entryState, Reason: "not a state record", Err: err}
	}
	o.State = &st
	if err := json.Unmarshal(small[entrySecrets], &o.Secrets); err != nil {
		return &backupfile.CorruptError{Entry: entrySecrets, Reason: "not a list of Secrets", Err: err}
	}
	clear(small[entrySecrets])
	if err := json.Unmarshal(small[entryRegistrations], &o.Registrations); err != nil {
		return &backupfile.CorruptError{Entry: entryRegistrations, Reason: "not the registrations", Err: err}
	}
	progress(Progress{Item: "verify", Phase: PhaseDone, Bytes: m.Size(), Elapsed: time.Since(t0),
		Message: fmt.Sprintf("platform %s, %d databases, made %s by onprem %s", m.Version, len(m.Databases()), m.Created.Format(time.RFC3339), m.Installer)})
	return nil
}

// SecretsReport says what RestoreSecrets did, by Secret name.
type SecretsReport struct {
	Created   []string `json:"created,omitempty"`
	Unchanged []string `json:"unchanged,omitempty"`
	Replaced  []string `json:"replaced,omitempty"`
	// Kept are Secrets whose values differ from the backup's and were
	// left as they are (SecretsMissing).
	Kept []string `json:"kept,omitempty"`
}

// SecretsMode says what RestoreSecrets does with a Secret that exists with
// values other than the backup's.
type SecretsMode int

const (
	// SecretsRefuse changes nothing and returns a *SecretConflictError.
	SecretsRefuse SecretsMode = iota
	// SecretsMissing creates the missing Secrets and keeps the others as
	// they are: the running platform's databases use their credentials.
	SecretsMissing
	// SecretsReplace replaces them with the backup's.
	SecretsReplace
)

// SecretConflictError: a Secret of the backup exists in the cluster with
// other values.
type SecretConflictError struct {
	Namespace string
	Names     []string
}

func (e *SecretConflictError) Error() string {
	return fmt.Sprintf("Secrets %s exist in namespace %s with values other than the backup's: restoring would change credentials the running platform uses; nothing was changed (restore onto an empty cluster, or give --force to replace them)",
		strings.Join(e.Names, ", "), e.Namespace)
}

// RestoreSecrets creates the backup's Secrets of the platform namespace
// in ns (the others belong to runtimes and are restored with them). An
// existing Secret with the same values is left alone; one with other
// values is handled as mode says, checked for every Secret before any is
// written.
// The operator's own Secrets that the configuration names are created only
// where they are missing.
func (o *Opened) RestoreSecrets(ctx context.Context, c kubernetes.Interface, ns string, mode SecretsMode) (*SecretsReport, error) {
	var generated, operator []SavedSecret
	for _, s := range o.secretsOf(o.Manifest.Namespace) {
		if s.Operator {
			operator = append(operator, s)
		} else {
			generated = append(generated, s)
		}
	}
	rep, err := RestoreSecrets(ctx, c, ns, generated, mode)
	if err != nil || len(operator) == 0 {
		return rep, err
	}
	orep, err := RestoreSecrets(ctx, c, ns, operator, SecretsMissing)
	if orep != nil {
		rep.Created = append(rep.Created, orep.Created...)
		rep.Unchanged = append(rep.Unchanged, orep.Unchanged...)
		rep.Kept = append(rep.Kept, orep.Kept...)
	}
	return rep, err
}

// RuntimeSecrets returns the saved Secrets of a runtime's namespace.
func (o *Opened) RuntimeSecrets(namespace string) []SavedSecret { return o.secretsOf(namespace) }

func (o *Opened) secretsOf(namespace string) []SavedSecret {
	var out []SavedSecret
	for _, s := range o.Secrets {
		if s.Namespace == namespace {
			out = append(out, s)
		}
	}
	return out
}

// RestoreSecrets creates saved in ns (see Opened.RestoreSecrets).
func RestoreSecrets(ctx context.Context, c kubernetes.Interface, ns string, saved []SavedSecret, mode SecretsMode) (*SecretsReport, error) {
	api := c.CoreV1().Secrets(ns)
	rep := &SecretsReport{}
	current := make([]*corev1.Secret, len(saved))
	var conflicts []string
	for i, s := range saved {
		cur, err := api.Get(ctx, s.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading Secret %s/%s: %w", ns, s.Name, err)
		}
		current[i] = cur
		if !sameData(cur.Data, s.Data) {
			conflicts = append(conflicts, s.Name)
		}
	}
	if len(conflicts) > 0 && mode == SecretsRefuse {
		return nil, &SecretConflictError{Namespace: ns, Names: conflicts}
	}
	for i, s := range saved {
		obj := s.Object()
		obj.Namespace = ns
		switch {
		case current[i] == nil:
			if _, err := api.Create(ctx, obj, metav1.CreateOptions{FieldManager: state.ManagedBy}); err != nil {
				return rep, fmt.Errorf("creating Secret %s/%s: %w", ns, s.Name, err)
			}
			rep.Created = append(rep.Created, s.Name)
		case sameData(current[i].Data, s.Data):
			rep.Unchanged = append(rep.Unchanged, s.Name)
		case mode == SecretsMissing:
			rep.Kept = append(rep.Kept, s.Name)
		default:
			upd := current[i].DeepCopy()
			upd.Data, upd.Type = s.Data, s.Type
			if _, err := api.Update(ctx, upd, metav1.UpdateOptions{FieldManager: state.ManagedBy}); err != nil {
				return rep, fmt.Errorf("replacing Secret %s/%s: %w", ns, s.Name, err)
			}
			rep.Replaced = append(rep.Replaced, s.Name)
		}
	}
	return rep, nil
}

func sameData(a, b map[string][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// DataOptions say which data RestoreData restores.
type DataOptions struct {
	Client    kubernetes.Interface
	Exec      podexec.Executor
	Namespace string
	// Engines are the engines the platform runs in its cluster (the
	// others are external: their dumps, if any, are skipped).
	Engines map[string]bool
	// Redis restores Redis's snapshot when the backup has one.
	Redis    bool
	Progress func(Progress)
}

// RestoreData reads the backup again and streams every dump into its
// engine, checking each entry against the manifest of the first read.
// The engines are restored at once, each by a reader of its own over the
// file, and each engine's entries in the backup's order; every restore
// replaces what the dump holds, so running it again after an
// interruption converges. The first failure stops the others.
func (o *Opened) RestoreData(ctx context.Context, d DataOptions) error {
	if d.Progress == nil {
		d.Progress = func(Progress) {}
	}
	var engines []string
	for _, e := range o.Manifest.Entries {
		if e.Engine != "" && !slices.Contains(engines, e.Engine) {
			engines = append(engines, e.Engine)
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	errs := make(chan error, len(engines))
	for _, engine := range engines {
		go func() {
			err := o.restoreEngine(ctx, d, engine)
			if err != nil {
				cancel(err)
			}
			errs <- err
		}()
	}
	var first error
	for range engines {
		if err := <-errs; err != nil && (first == nil || errors.Is(first, context.Canceled)) {
			first = err
		}
	}
	return first
}

// restoreEngine restores the entries of one engine.
func (o *Opened) restoreEngine(ctx context.Context, d DataOptions, engine string) error {
	progress := d.Progress
	f, err := o.reopen()
	if err != nil {
		return err
	}
	defer f.Close()
	r, err := backupfile.NewReader(f, o.identities, backupfile.ReadOptions{Expect: o.Manifest})
	if err != nil {
		return err
	}
	var target podexec.Target
	found := false
	for {
		e, content, err := r.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if e.Engine != engine {
			continue // another engine's: read (and checked) by Next
		}
		var item string
		var cmds [][]string
		switch e.Kind {
		case backupfile.KindDatabase:
			item = e.Engine + "/" + e.Database
			cmd, err := dbdump.RestoreCommand(e.Engine, e.Database)
			if err != nil {
				return err
			}
			cmds = [][]string{cmd}
		case backupfile.KindDefinitions:
			item, cmds = "rabbitmq/definitions", [][]string{dbdump.ImportDefinitions()}
		case backupfile.KindCache:
			if !d.Redis {
				progress(Progress{Item: "redis", Phase: PhaseSkipped, Message: "not asked for (--include-redis)"})
				continue
			}
			item, cmds = "redis", [][]string{dbdump.RedisStage(), dbdump.RedisSwap()}
		default:
			continue
		}
		if !d.Engines[e.Engine] {
			progress(Progress{Item: item, Phase: PhaseSkipped, Message: e.Engine + " is external in this installation: its owner restores it"})
			continue
		}
		if !found {
			if target, err = waitPod(ctx, d.Client, d.Namespace, engine); err != nil {
				return err
			}
			found = true
		}
		t0 := time.Now()
		progress(Progress{Item: item, Phase: PhaseStarted, Bytes: e.Size})
		cr := &counting.Reader{R: content}
		if err := d.Exec.Exec(ctx, target, cmds[0], cr, io.Discard); err != nil {
			if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
				return cause // another engine failed first
			}
			err = fmt.Errorf("restoring %s: %w", item, err)
			progress(Progress{Item: item, Phase: PhaseFailed, Err: err, Elapsed: time.Since(t0)})
			return err
		}
		// The command may stop reading before the end (an error it did not
		// report): what is left must still match the manifest.
		if _, err := io.Copy(io.Discard, cr); err != nil {
			return err
		}
		before := restarts(ctx, d.Client, target)
		for _, cmd := range cmds[1:] {
			if err := d.Exec.Exec(ctx, target, cmd, nil, io.Discard); err != nil {
				// Redis's swap ends by stopping the server, which stops
				// its container: a command killed with it (137) or a
				// stream cut with it is that stop, which the restart
				// below proves. Any other exit is a failure.
				var ee *podexec.ExitError
				if e.Kind != backupfile.KindCache || (errors.As(err, &ee) && ee.Code != 137) || ctx.Err() != nil {
					return fmt.Errorf("restoring %s: %w", item, err)
				}
			}
		}
		if e.Kind == backupfile.KindCache {
			found = false
			if err := waitRestarted(ctx, d.Client, target, before); err != nil {
				return fmt.Errorf("restoring %s: %w", item, err)
			}
		}
		progress(Progress{Item: item, Phase: PhaseDone, Bytes: cr.N, Elapsed: time.Since(t0)})
	}
}

// waitPod waits up to five minutes for engine's pod to be ready.
func waitPod(ctx context.Context, c kubernetes.Interface, ns, engine string) (podexec.Target, error) {
	var t podexec.Target
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		t, last = dbdump.Pod(ctx, c, ns, engine)
		return last == nil, nil
	})
	if err != nil && last != nil {
		return t, last
	}
	return t, err
}

// waitRestarted waits until the target's container restarted (more than
// before times) and its pod is ready again (Redis after its data was
// swapped).
func waitRestarted(ctx context.Context, c kubernetes.Interface, t podexec.Target, before int32) error {
	return wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == t.Container {
				return cs.RestartCount > before && cs.Ready, nil
			}
		}
		return false, nil
	})
}

func restarts(ctx context.Context, c kubernetes.Interface, t podexec.Target) int32 {
	p, err := c.CoreV1().Pods(t.Namespace).Get(ctx, t.Pod, metav1.GetOptions{})
	if err != nil {
		return 0
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == t.Container {
			// The container may already have restarted when this runs:
			// count from one less so that the wait sees it.
			if cs.State.Running == nil || !cs.Ready {
				return cs.RestartCount - 1
			}
			return cs.RestartCount
		}
	}
	return 0
}

// Engines returns the engines whose dumps the backup holds.
func (o *Opened) Engines() []string {
	var out []string
	for _, e := range o.Manifest.Entries {
		if e.Engine != "" && !slices.Contains(out, e.Engine) {
			out = append(out, e.Engine)
		}
	}
	return out
}
