// Package state keeps an installation's record in its cluster and guards it
// with a lock (DESIGN.md, flow step 6: "the cluster is the source of truth;
// a second operator's machine sees the same state").
//
// # The record
//
// The State lives in the Secret onprem-state (SecretName) of the platform
// namespace, of type onprem.dev/state (SecretType), labelled
// app.kubernetes.io/managed-by=onprem, as indented JSON under the data key
// state.json (DataKey). It records the installed platform version, the
// digest of the configuration that produced it, each component's Helm
// release and revision, the build runners registered with the platform
// (where each runs and at which version; never its token), and the history
// of operations (install, upgrade, rollback, uninstall: when, by which
// onprem on which host, outcome), newest last, the last MaxHistory of
// them.
//
// A Secret is used because it is where the platform's operators already
// restrict access, not because the record is secret: it never contains a
// secret value. Generated passwords and keys live in their own Secrets;
// the record holds names, versions, digests and messages only, and
// TestNoSecretFields fails if a field named like a password, token, key or
// credential is added to it. Messages are written by onprem itself and must
// not quote secret values either.
//
// Store.Save is optimistic: the Secret's resourceVersion seen by Load (or
// the last Save) guards the update, so a writer that did not see the latest
// record gets a *ConflictError (errors.Is(err, ErrConflict)) and overwrites
// nothing. A record that cannot be decoded is reported as a *CorruptError
// that says how to look at it with kubectl; it is never overwritten
// silently.
//
// # The lock
//
// Acquire takes the Lease onprem-lock (LeaseName) in the platform namespace
// for the duration of an operation; see Acquire.
package state

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/version"
)

const (
	// SecretName is the Secret holding the State in the platform namespace.
	SecretName = "onprem-state"
	// LeaseName is the Lease used as the installation's lock.
	LeaseName = "onprem-lock"
	// SecretType is the type of the state Secret.
	SecretType corev1.SecretType = "onprem.dev/state"
	// DataKey is the key of the JSON record in the Secret's data.
	DataKey = "state.json"
	// MaxHistory is how many operations the history keeps (the newest).
	MaxHistory = 200

	// ManagedByLabel and ManagedBy mark the objects onprem itself owns.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	ManagedBy      = "onprem"

	// maxRecordBytes keeps the record well under the 1 MiB limit of a
	// Secret; older history is dropped first.
	maxRecordBytes = 900 << 10
)

// Operation kinds.
const (
	KindInstall   = "install"
	KindUpgrade   = "upgrade"
	KindRollback  = "rollback"
	KindUninstall = "uninstall"
	KindAdopt     = "adopt"
	// KindBackup is a backup of the platform (installer/backup); it
	// changes nothing installed.
	KindBackup = "backup"
	// KindRestore installs a backup's version with its Secrets and data
	// (onto an empty cluster) or restores its data into the installed
	// platform.
	KindRestore = "restore"
	// KindRotate changes generated Secrets' values on the operator's
	// demand (installer/rotate); its message names what changed, never a
	// value.
	KindRotate = "rotate"
)

// MaxBackupHistory is how many backup operations the history keeps (the
// newest): scheduled backups run often, and must not push installs and
// upgrades out of the history.
const MaxBackupHistory = 30

// Operation outcomes.
const (
	OutcomeRunning   = "running"
	OutcomeSucceeded = "succeeded"
	OutcomeFailed    = "failed"
	// OutcomeRolledBack: an upgrade step failed and its components were
	// returned to their revisions from before it.
	OutcomeRolledBack = "rolled-back"
)

// State is the record of one installation.
type State struct {
	Installation string `json:"installation"`
	Namespace    string `json:"namespace"`
	// Version is the installed platform version: that of the last
	// install, upgrade or rollback that succeeded ("" before the first
	// success and after a successful uninstall).
	Version      string               `json:"version"`
	ConfigDigest string               `json:"configDigest"`
	Components   map[string]Component `json:"components"`
	// History holds the operations, newest last, at most MaxHistory.
	History []Operation `json:"history"`
	// Migrations are the data migrations that completed, oldest first; a
	// migration that completed is never run again.
	Migrations []Migration `json:"migrations,omitempty"`
	// Runners are the build runners registered to the platform, by name
	// (names are unique across the installation). Their registration
	// tokens are not here: they live in Secrets only.
	Runners map[string]Runner `json:"runners,omitempty"`
	// Runtimes are the GitOps runtimes, by name (installer/gitops). Their
	// Git token is never recorded: it lives only in a Secret on the
	// runtime's cluster.
	Runtimes map[string]Runtime `json:"runtimes,omitempty"`
	// RuntimeConfig is the shared configuration repository of the runtimes
	// and which runtime holds the configuration.
	RuntimeConfig *RuntimeConfig `json:"runtimeConfig,omitempty"`

	// secret is the Secret this State was loaded from or saved to; its
	// resourceVersion guards the next Save. nil: not stored yet.
	secret *corev1.Secret
}

// Component is the record of one installed component.
type Component struct {
	Chart        string    `json:"chart"`
	ChartVersion string    `json:"chartVersion"`
	Release      string    `json:"release"`  // Helm release name
	Revision     int       `json:"revision"` // Helm release revision
	Digest       string    `json:"digest"`   // digest of the rendered component
	Status       string    `json:"status"`
	UpdatedAt    time.Time `json:"updatedAt,omitzero"`
	// Took is how long its last install or upgrade took to be ready (0:
	// not recorded); a rollback waits for it about as long (see
	// upgrade.RollbackTimeout).
	Took time.Duration `json:"took,omitempty"`
	// DependsOn names the components this one was installed after (the
	// DAG edges), so that uninstall and status can order components from
	// the record alone, even when the configuration changed since.
	DependsOn []string `json:"dependsOn,omitempty"`
}

// Runner is the record of one build runner (installer/runner).
type Runner struct {
	// Server is the API server of the runner's cluster; Kubeconfig and
	// Context are how onprem was told to reach it (both empty: the
	// platform's own cluster, however onprem reaches that).
	Server     string `json:"server"`
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
	// Namespace is the runner's (agent and builds); EngineNamespace its
	// build engine's.
	Namespace       string `json:"namespace"`
	EngineNamespace string `json:"engineNamespace"`
	Concurrency     int    `json:"concurrency"`
	// Version is the platform release whose runner chart and images it
	// runs.
	Version      string `json:"version"`
	Chart        string `json:"chart"`
	ChartVersion string `json:"chartVersion"`
	Release      string `json:"release"`  // Helm release name, in Namespace
	Revision     int    `json:"revision"` // Helm release revision
	// Status is deployed, or failed: <why> after a failed apply.
	Status       string    `json:"status"`
	RegisteredAt time.Time `json:"registeredAt"`
	UpdatedAt    time.Time `json:"updatedAt,omitzero"`
}

// Runtime is the record of one GitOps runtime (installer/gitops).
type Runtime struct {
	// Server, Kubeconfig and Context: as for Runner.
	Server       string `json:"server"`
	Kubeconfig   string `json:"kubeconfig,omitempty"`
	Context      string `json:"context,omitempty"`
	Namespace    string `json:"namespace"`
	Version      string `json:"version"`
	Chart        string `json:"chart"`
	ChartVersion string `json:"chartVersion"`
	Release      string `json:"release"`
	Revision     int    `json:"revision"`
	// Status is deployed, or failed: <why> after a failed apply.
	Status      string    `json:"status"`
	InstalledAt time.Time `json:"installedAt"`
	UpdatedAt   time.Time `json:"updatedAt,omitzero"`
}

// RuntimeConfig is the runtimes' shared configuration repository (never
// with credentials) and the runtime designated to hold the configuration.
type RuntimeConfig struct {
	URL           string `json:"url"`
	Branch        string `json:"branch,omitempty"`
	Path          string `json:"path,omitempty"`
	ConfigRuntime string `json:"configRuntime,omitempty"`
}

// BundleUse is an air-gapped bundle an operation took a release from.
type BundleUse struct {
	Release string `json:"release"`
	File    string `json:"file"`
	// Signer is the id of the public key the bundle is signed with;
	// TrustedBy the trusted key its signature verified with (id, name,
	// origin). Public keys only: no secret is recorded.
	Signer    string `json:"signer,omitempty"`
	TrustedBy string `json:"trustedBy,omitempty"`
	// Unverified says why it was used without a trusted signature
	// (--allow-unsigned); empty when its signature was verified.
	Unverified string `json:"unverified,omitempty"`
}

// Operation is one entry of the history.
type Operation struct {
	ID            string    `json:"id"`
	Kind          string    `json:"kind"` // install, upgrade, rollback, uninstall, adopt, backup, restore
	Version       string    `json:"version"`
	FromVersion   string    `json:"fromVersion,omitempty"`
	Started       time.Time `json:"started"`
	Finished      time.Time `json:"finished,omitzero"`
	Installer     string    `json:"installer"` // onprem version
	Host          string    `json:"host"`
	Outcome       string    `json:"outcome"` // running, succeeded, failed
	Message       string    `json:"message,omitempty"`
	Components    []string  `json:"components,omitempty"`
	SkippedChecks []string  `json:"skippedChecks,omitempty"`
	// Bundles are the air-gapped bundles the operation's releases came
	// from, with how their signatures were judged.
	Bundles []BundleUse `json:"bundles,omitempty"`
	// Steps are the steps of an upgrade (or the step a rollback undid),
	// in order.
	Steps []Step `json:"steps,omitempty"`
	// Backup is the backup a backup operation wrote, or a restore read.
	Backup *BackupRecord `json:"backup,omitempty"`
	// Repaired lists what an install or upgrade reverted in components
	// whose live objects had drifted from what onprem applies, as
	// "component: Kind/name fields" (field names, never values).
	Repaired []string `json:"repaired,omitempty"`
}

// BackupRecord names a backup file (never a key or a credential).
type BackupRecord struct {
	// Name is the file's name; Where the destination (a folder, or
	// s3://BUCKET/PREFIX at ENDPOINT).
	Name  string `json:"name"`
	Where string `json:"where"`
	// Trigger: manual, schedule or upgrade.
	Trigger string `json:"trigger,omitempty"`
	Size    int64  `json:"size,omitempty"`
	// Databases is how many databases it holds.
	Databases int `json:"databases,omitempty"`
	// Version is the platform version it holds (restore).
	Version string `json:"version,omitempty"`
}

// Step is one step of an upgrade: the platform going from one release to
// the next on the upgrade path.
type Step struct {
	From     string    `json:"from"`
	To       string    `json:"to"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	// Outcome: running, succeeded, failed, rolled-back.
	Outcome string `json:"outcome"`
	// Phase is what the step was doing last: backup, migrate, apply,
	// remove, rollback or done.
	Phase string `json:"phase,omitempty"`
	// Before holds each component's Helm revision from before the step
	// (0: the component was not installed); a rollback returns to these.
	Before map[string]int `json:"before,omitempty"`
	// Applied lists the components the step installed or upgraded.
	Applied []string `json:"applied,omitempty"`
	// Removed lists the components the step's release dropped (their Helm
	// history is kept, so that a rollback can restore them).
	Removed []string `json:"removed,omitempty"`
	// RolledBack lists the components returned to their Before revision.
	RolledBack []string `json:"rolledBack,omitempty"`
	Backups    []Backup `json:"backups,omitempty"`
	// Archive is the backup of the whole platform written before the
	// step (spec.backup).
	Archive *BackupRecord `json:"archive,omitempty"`
	// Migrations lists the migrations this step ran.
	Migrations []string `json:"migrations,omitempty"`
	Message    string   `json:"message,omitempty"`
}

// Backup is a database dump taken before a migration changed it.
type Backup struct {
	Engine  string `json:"engine"`
	Service string `json:"service"`
	// Claim and Path say where the dump is: a file on that
	// PersistentVolumeClaim of the platform namespace.
	Claim    string    `json:"claim"`
	Path     string    `json:"path"`
	Job      string    `json:"job"`
	Finished time.Time `json:"finished,omitzero"`
}

// Migration is a data migration that completed.
type Migration struct {
	Name      string    `json:"name"`
	Version   string    `json:"version"` // the release that brought it
	Operation string    `json:"operation"`
	Finished  time.Time `json:"finished"`
}

// Migrated reports whether the named migration completed.
func (s *State) Migrated(name string) bool {
	for _, m := range s.Migrations {
		if m.Name == name {
			return true
		}
	}
	return false
}

// Current returns the running operation (the last one whose outcome is
// running) for the caller to update in place before a Save, or nil.
func (s *State) Current() *Operation { return s.Running() }

// Running returns the operation that is still running (the last one whose
// outcome is running), or nil.
func (s *State) Running() *Operation {
	for i := len(s.History) - 1; i >= 0; i-- {
		if s.History[i].Outcome == OutcomeRunning {
			return &s.History[i]
		}
	}
	return nil
}

// Stored reports whether the State was loaded from or saved to the cluster.
func (s *State) Stored() bool { return s.secret != nil }

// ErrConflict is matched (errors.Is) by a *ConflictError.
var ErrConflict = errors.New("the onprem state was changed by someone else")

// ConflictError says that the state Secret changed between Load and Save.
type ConflictError struct {
	Namespace string
	Err       error
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("the onprem state (Secret %s/%s) was changed by someone else since it was read "+
		"(is another onprem running against this cluster?); nothing was overwritten: run the command again to start from the current state",
		e.Namespace, SecretName)
}

func (e *ConflictError) Unwrap() error        { return e.Err }
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// CorruptError says that the state Secret exists but cannot be read.
type CorruptError struct {
	Namespace string
	Reason    string
	Err       error
}

func (e *CorruptError) Error() string {
	msg := fmt.Sprintf("the onprem state (Secret %s/%s) cannot be read: %s", e.Namespace, SecretName, e.Reason)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg + fmt.Sprintf("; inspect it with: kubectl -n %s get secret %s -o jsonpath='{.data.state\\.json}' | base64 -d",
		e.Namespace, SecretName)
}

func (e *CorruptError) Unwrap() error { return e.Err }

// Store reads and writes the State of the installation in one namespace.
type Store struct {
	client    kubernetes.Interface
	namespace string
	now       func() time.Time
}

// NewStore returns the Store of the platform namespace.
func NewStore(c kubernetes.Interface, namespace string) *Store {
	return &Store{client: c, namespace: namespace, now: func() time.Time { return time.Now().UTC() }}
}

// Load reads the State. When the Secret (or the namespace) does not exist
// it returns an empty State, not an error.
func (s *Store) Load(ctx context.Context) (*State, error) {
	sec, err := s.client.CoreV1().Secrets(s.namespace).Get(ctx, SecretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &State{Namespace: s.namespace, Components: map[string]Component{}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the onprem state (Secret %s/%s): %w", s.namespace, SecretName, err)
	}
	st, err := decode(sec)
	if err != nil {
		return nil, err
	}
	return st, nil
}

func decode(sec *corev1.Secret) (*State, error) {
	corrupt := func(reason string, err error) error {
		return &CorruptError{Namespace: sec.Namespace, Reason: reason, Err: err}
	}
	if sec.Type != SecretType {
		return nil, corrupt(fmt.Sprintf("it is of type %q, not %q (is it onprem's?)", sec.Type, SecretType), nil)
	}
	data, ok := sec.Data[DataKey]
	if !ok {
		return nil, corrupt(fmt.Sprintf("it has no %s key", DataKey), nil)
	}
	if t := bytes.TrimSpace(data); len(t) == 0 || t[0] != '{' {
		return nil, corrupt(fmt.Sprintf("%s is not a JSON object", DataKey), nil)
	}
	var st State
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, corrupt(fmt.Sprintf("%s is not valid", DataKey), err)
	}
	if st.Namespace == "" {
		st.Namespace = sec.Namespace
	}
	if st.Components == nil {
		st.Components = map[string]Component{}
	}
	st.secret = sec
	return &st, nil
}

// Save writes st: it creates the Secret when st was not stored yet, and
// otherwise updates it guarded by the resourceVersion seen by the last Load
// or Save of st. If someone else changed (or created, or deleted) the Secret
// meanwhile, Save returns a *ConflictError and writes nothing. History
// beyond MaxHistory is dropped, oldest first.
func (s *Store) Save(ctx context.Context, st *State) error {
	if st.Namespace == "" {
		st.Namespace = s.namespace
	}
	trimHistory(st, MaxHistory)
	data, err := encode(st)
	if err != nil {
		return err
	}
	secrets := s.client.CoreV1().Secrets(s.namespace)
	var saved *corev1.Secret
	if st.secret == nil {
		saved, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      SecretName,
				Namespace: s.namespace,
				Labels:    map[string]string{ManagedByLabel: ManagedBy},
			},
			Type: SecretType,
			Data: map[string][]byte{DataKey: data},
		}, metav1.CreateOptions{FieldManager: ManagedBy})
		if apierrors.IsAlreadyExists(err) {
			return &ConflictError{Namespace: s.namespace, Err: err}
		}
	} else {
		sec := st.secret.DeepCopy()
		if sec.Labels == nil {
			sec.Labels = map[string]string{}
		}
		sec.Labels[ManagedByLabel] = ManagedBy
		sec.Data = map[string][]byte{DataKey: data}
		saved, err = secrets.Update(ctx, sec, metav1.UpdateOptions{FieldManager: ManagedBy})
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return &ConflictError{Namespace: s.namespace, Err: err}
		}
	}
	if err != nil {
		return fmt.Errorf("saving the onprem state (Secret %s/%s): %w", s.namespace, SecretName, err)
	}
	st.secret = saved
	return nil
}

// encode returns the record as indented JSON, dropping the oldest history
// while it is too large for a Secret.
func encode(st *State) ([]byte, error) {
	for {
		data, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("encoding the onprem state: %w", err)
		}
		if len(data) <= maxRecordBytes || len(st.History) <= 1 {
			return data, nil
		}
		trimHistory(st, len(st.History)-max(1, len(st.History)/10))
	}
}

func trimHistory(st *State, keep int) {
	backups := 0
	for i := len(st.History) - 1; i >= 0; i-- {
		if st.History[i].Kind != KindBackup || st.History[i].Outcome == OutcomeRunning {
			continue
		}
		if backups++; backups > MaxBackupHistory {
			st.History = append(st.History[:i:i], st.History[i+1:]...)
		}
	}
	if n := len(st.History); n > keep {
		st.History = append([]Operation(nil), st.History[n-keep:]...)
	}
}

// Begin records the start of op and saves: op gets an ID, its start time,
// the installer's version and host when they are empty, FromVersion
// defaults to the installed version, and its outcome is running. An
// operation still marked running in the history (its onprem was killed; the
// caller holds the lock, so none can still run) is closed as failed with a
// message saying it was interrupted. If the save fails st is left as it was.
func (s *Store) Begin(ctx context.Context, st *State, op Operation) error {
	switch op.Kind {
	case KindInstall, KindUpgrade, KindRollback, KindUninstall, KindAdopt, KindBackup, KindRestore, KindRotate:
	default:
		return fmt.Errorf("state: unknown operation kind %q (want install, upgrade, rollback, uninstall, adopt, backup, restore or rotate)", op.Kind)
	}
	now := s.now()
	if op.ID == "" {
		op.ID = newID(now)
	}
	if op.Started.IsZero() {
		op.Started = now
	}
	if op.Installer == "" {
		op.Installer = version.Version
	}
	if op.Host == "" {
		op.Host, _ = os.Hostname()
	}
	if op.FromVersion == "" {
		op.FromVersion = st.Version
	}
	op.Outcome = OutcomeRunning
	op.Finished = time.Time{}

	old := st.History
	hist := append([]Operation(nil), st.History...)
	for i := range hist {
		if hist[i].Outcome == OutcomeRunning {
			hist[i].Outcome = OutcomeFailed
			hist[i].Finished = now
			hist[i].Message = fmt.Sprintf("interrupted: the onprem running it stopped before it finished (found by operation %s)", op.ID)
		}
	}
	st.History = append(hist, op)
	if err := s.Save(ctx, st); err != nil {
		st.History = old
		return err
	}
	return nil
}

// Finish closes the running operation with outcome (succeeded or failed)
// and message, and saves. When an install, upgrade or rollback succeeded,
// st.Version becomes the operation's version; when an uninstall succeeded
// it becomes "". The caller sets ConfigDigest and Components. Pass a
// context that is not canceled (context.WithoutCancel) when recording the
// failure of an interrupted operation. If the save fails st is left as it
// was.
func (s *Store) Finish(ctx context.Context, st *State, outcome, message string) error {
	if outcome != OutcomeSucceeded && outcome != OutcomeFailed {
		return fmt.Errorf("state: an operation finishes as %s or %s, not %q", OutcomeSucceeded, OutcomeFailed, outcome)
	}
	i := len(st.History) - 1
	for ; i >= 0 && st.History[i].Outcome != OutcomeRunning; i-- {
	}
	if i < 0 {
		return errors.New("state: there is no running operation to finish (Begin was not called, or the operation was already finished)")
	}
	oldHist, oldVersion := st.History, st.Version
	hist := append([]Operation(nil), st.History...)
	op := &hist[i]
	op.Outcome, op.Message, op.Finished = outcome, message, s.now()
	if outcome == OutcomeSucceeded {
		switch op.Kind {
		case KindInstall, KindUpgrade, KindRollback, KindAdopt, KindRestore:
			if op.Version != "" {
				st.Version = op.Version
			}
		case KindUninstall:
			st.Version = ""
		}
	}
	st.History = hist
	if err := s.Save(ctx, st); err != nil {
		st.History, st.Version = oldHist, oldVersion
		return err
	}
	return nil
}

// Delete removes the state Secret (uninstall --purge). A missing Secret is
// not an error.
func (s *Store) Delete(ctx context.Context) error {
	err := s.client.CoreV1().Secrets(s.namespace).Delete(ctx, SecretName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the onprem state (Secret %s/%s): %w", s.namespace, SecretName, err)
	}
	return nil
}

// newID returns a sortable, unique operation ID: 20260122T051822Z-1a2b3c.
func newID(now time.Time) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b)
}
