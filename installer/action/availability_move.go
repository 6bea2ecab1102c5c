package action

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"filippo.io/age"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/backupstore"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/preflight"
)

// MoveSecret is the Secret of the platform namespace that records a move
// of databases between a single server and a replicated cluster while it
// runs: the key its backup is encrypted to, where that backup is, and how
// far the move went. An install that finds it finishes the move.
const MoveSecret = "onprem-availability-move"

// Keys of MoveSecret.
const (
	moveKeyIdentity = "identity"
	moveKeyFile     = "file"
	moveKeyHost     = "host"
	moveKeyEngines  = "engines"
	moveKeyPhase    = "phase"
	moveKeyStarted  = "started"
)

// Phases of a move, in MoveSecret.
const (
	// moveBackingUp: the services are being stopped and the databases
	// backed up; the databases are as installed.
	moveBackingUp = "backing-up"
	// moveBackedUp: the backup is complete and read back; from here on
	// the databases' StatefulSets and volumes may be gone, and the backup
	// is what holds their data.
	moveBackedUp = "backed-up"
)

// MoveTrigger is the trigger recorded in a move's backup.
const MoveTrigger = "availability-move"

// DefaultMoveDir is where a move keeps its backup on this machine:
// $XDG_STATE_HOME/onprem/availability-moves, else
// ~/.local/state/onprem/availability-moves.
func DefaultMoveDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "onprem", "availability-moves"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("finding a folder for the move's backup (give --move-dir): %w", err)
	}
	return filepath.Join(home, ".local", "state", "onprem", "availability-moves"), nil
}

// MoveResult is what a move of databases between single and high did.
type MoveResult struct {
	// Databases are the engines moved ("postgresql", ...).
	Databases []string `json:"databases"`
	// Changes say each one's forms, for people.
	Changes []string `json:"changes"`
	// Resumed is set when the move finished one an earlier install began.
	Resumed bool `json:"resumed,omitempty"`
	// Backup is the backup that carried the data (deleted once the move
	// succeeded).
	Backup string `json:"backup"`
	// Downtime is how long the services were stopped: from their stop
	// until the install's apply has them ready in their new form.
	Downtime time.Duration `json:"downtime"`
	// stopped is when the services stopped.
	stopped time.Time
}

// availabilityMove moves installed databases between a single server and a
// replicated cluster, under the install's lock and operation: the services
// stop (nothing writes any more), every database is backed up to a file on
// this machine and read back, the moving databases' StatefulSets and
// volumes are deleted, the databases are applied in their new form with
// their users provisioned, and the moved databases' data is restored into
// them; the services stay stopped for the install's apply, which starts
// them once, in their new form. No write a service acknowledged is lost:
// none is accepted between the backup and the restore. Killed at any
// step, the next install finishes it from MoveSecret.
type availabilityMove struct {
	cl        *kube.Cluster
	exec      podexec.Executor
	ns        string
	res       *render.Result
	st        *state.State
	applyOpts apply.Options
	dir       string
	timeout   time.Duration
	changes   []preflight.AvailabilityChange
	// beforeDelete, for tests, runs once the backup is read back and
	// before the StatefulSets are deleted.
	beforeDelete func()
}

func (m *availabilityMove) log(msg string, args ...any) {
	slog.Info("availability move: "+msg, args...)
}

// run moves the databases of m.changes, or finishes the move MoveSecret
// records. It returns nil, nil when there is nothing to move.
func (m *availabilityMove) run(ctx context.Context) (*MoveResult, error) {
	secrets := m.cl.Client.CoreV1().Secrets(m.ns)
	rec, err := secrets.Get(ctx, MoveSecret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		rec = nil
	case err != nil:
		return nil, fmt.Errorf("reading the record of a move (Secret %s/%s): %w", m.ns, MoveSecret, err)
	}
	if rec == nil && len(m.changes) == 0 {
		return nil, nil
	}
	out := &MoveResult{}
	if rec == nil {
		if rec, err = m.begin(ctx); err != nil {
			return nil, err
		}
	} else {
		out.Resumed = true
		m.log("finishing the move an earlier install began", "started", string(rec.Data[moveKeyStarted]), "host", string(rec.Data[moveKeyHost]), "phase", string(rec.Data[moveKeyPhase]))
	}
	engines := strings.Split(string(rec.Data[moveKeyEngines]), ",")
	out.Databases = engines
	for _, c := range m.changes {
		out.Changes = append(out.Changes, c.String())
	}
	file := string(rec.Data[moveKeyFile])
	out.Backup = file
	ids, err := age.ParseIdentities(strings.NewReader(string(rec.Data[moveKeyIdentity])))
	if err != nil {
		return nil, fmt.Errorf("the key of the move in Secret %s/%s: %w", m.ns, MoveSecret, err)
	}
	stopped := time.Now()

	m.log("stopping the services: nothing writes to the databases until the move is over")
	if _, err := backup.StopServices(ctx, m.cl.Client, m.ns, serviceNames(m.res)); err != nil {
		return out, err
	}
	if string(rec.Data[moveKeyPhase]) == moveBackingUp {
		if err := m.backUp(ctx, rec, ids, file); err != nil {
			return out, err
		}
	}
	opened, err := backup.OpenFile(ctx, file, backup.OpenOptions{Identities: ids})
	if err != nil {
		host, _ := os.Hostname()
		lost := "; if that file is lost, restore the platform's latest backup (onprem restore --force --yes) and then delete the Secret " + m.ns + "/" + MoveSecret
		if errors.Is(err, os.ErrNotExist) && string(rec.Data[moveKeyHost]) != host {
			return out, fmt.Errorf("the move's backup %s is on %s, where the move began: run onprem install there to finish it%s: %w", file, rec.Data[moveKeyHost], lost, err)
		}
		return out, fmt.Errorf("reading back the move's backup %s%s: %w", file, lost, err)
	}
	defer opened.Close()
	if m.beforeDelete != nil {
		m.beforeDelete()
	}
	for _, e := range engines {
		if err := m.replace(ctx, e); err != nil {
			return out, err
		}
	}
	m.log("installing the databases in their new form, without the services")
	applyOpts := m.applyOpts
	applyOpts.Result = withoutServices(m.res)
	if _, err := apply.Apply(ctx, applyOpts); err != nil {
		return out, fmt.Errorf("installing the moved databases: %w", err)
	}
	m.log("provisioning the services' users in the moved databases")
	if err := provisionAgain(ctx, m.cl, m.res); err != nil {
		return out, err
	}
	moved := map[string]bool{}
	for _, e := range engines {
		moved[e] = true
	}
	m.log("restoring the moved databases' data", "databases", strings.Join(engines, ", "))
	if err := opened.RestoreData(ctx, backup.DataOptions{Client: m.cl.Client, Exec: m.exec, Namespace: m.ns, Engines: moved, Redis: moved["redis"],
		Progress: func(p backup.Progress) {
			if p.Phase == backup.PhaseDone || p.Phase == backup.PhaseFailed {
				m.log(p.Item+" "+p.Phase, "bytes", p.Bytes)
			}
		}}); err != nil {
		return out, fmt.Errorf("restoring the moved databases from %s: %w", file, err)
	}
	// The services are not started here in their old form only to be
	// rolled by the install's apply a minute later: they stay at zero,
	// and the apply that follows starts them once, in their new form
	// (their replicas and their new settings), and waits for them.
	m.log("the services start with the install's apply, in their new form")
	if _, err := backup.ReleaseServices(ctx, m.cl.Client, m.ns); err != nil {
		return out, err
	}
	out.stopped = stopped
	if err := secrets.Delete(ctx, MoveSecret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return out, fmt.Errorf("the move is done but its record (Secret %s/%s) was not deleted: %w", m.ns, MoveSecret, err)
	}
	if err := os.Remove(file); err != nil && !errors.Is(err, os.ErrNotExist) {
		m.log("the move's backup was not deleted", "file", file, "error", err)
	}
	m.log("done", "databases", strings.Join(engines, ", "), "took", time.Since(stopped).Round(time.Second))
	return out, nil
}

// begin records a new move in MoveSecret: a key of its own (the backup
// carries the platform's Secrets), the backup's path on this machine.
func (m *availabilityMove) begin(ctx context.Context) (*corev1.Secret, error) {
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return nil, fmt.Errorf("the folder of the move's backup: %w", err)
	}
	dir, err := filepath.Abs(m.dir)
	if err != nil {
		return nil, err
	}
	id, err := age.GenerateHybridIdentity()
	if err != nil {
		return nil, err
	}
	var engines []string
	for _, c := range m.changes {
		engines = append(engines, c.Engine)
	}
	host, _ := os.Hostname()
	now := time.Now().UTC()
	rec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: MoveSecret, Namespace: m.ns, Labels: map[string]string{"app.kubernetes.io/managed-by": "onprem"}},
		Type:       corev1.SecretTypeOpaque,
		Data: map[string][]byte{
			moveKeyIdentity: []byte(id.String()),
			moveKeyFile:     []byte(filepath.Join(dir, backupstore.Name(m.st.Installation, now))),
			moveKeyHost:     []byte(host),
			moveKeyEngines:  []byte(strings.Join(engines, ",")),
			moveKeyPhase:    []byte(moveBackingUp),
			moveKeyStarted:  []byte(now.Format(time.RFC3339)),
		},
	}
	created, err := m.cl.Client.CoreV1().Secrets(m.ns).Create(ctx, rec, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("recording the move (Secret %s/%s): %w", m.ns, MoveSecret, err)
	}
	var what []string
	for _, c := range m.changes {
		what = append(what, c.String())
	}
	m.log("moving "+strings.Join(what, "; "), "backup", string(rec.Data[moveKeyFile]))
	return created, nil
}

// backUp backs every database up to file and marks the move backed up.
// A backup an earlier run left unfinished is replaced.
func (m *availabilityMove) backUp(ctx context.Context, rec *corev1.Secret, ids []age.Identity, file string) error {
	var recipients []age.Recipient
	for _, id := range ids {
		if h, ok := id.(*age.HybridIdentity); ok {
			recipients = append(recipients, h.Recipient())
		}
	}
	if len(recipients) == 0 {
		return fmt.Errorf("the key of the move in Secret %s/%s is not a hybrid age key", m.ns, MoveSecret)
	}
	// Begun on another machine: its folder may not exist here.
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("the folder of the move's backup: %w", err)
	}
	_ = os.Remove(file)
	dyn, err := dynamic.NewForConfig(m.cl.Config)
	if err != nil {
		return err
	}
	m.log("backing up every database", "file", file)
	res, err := backup.Create(ctx, backup.CreateOptions{
		Client: m.cl.Client, Dynamic: dyn, Exec: m.exec, Namespace: m.ns, State: m.st,
		Recipients: recipients, Store: backupstore.Dir{Path: filepath.Dir(file)}, Name: filepath.Base(file),
		Trigger: MoveTrigger, IncludeRedis: slices.Contains(strings.Split(string(rec.Data[moveKeyEngines]), ","), "redis"), BetweenSteps: true,
	})
	if err != nil {
		return fmt.Errorf("backing up before the move: %w", err)
	}
	m.log("backed up", "databases", len(res.Manifest.Databases()), "bytes", res.Size)
	rec.Data[moveKeyPhase] = []byte(moveBackedUp)
	if _, err := m.cl.Client.CoreV1().Secrets(m.ns).Update(ctx, rec, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("recording the move's backup (Secret %s/%s): %w", m.ns, MoveSecret, err)
	}
	return nil
}

// replace deletes engine's StatefulSet, the volumes of its members and its
// clients' Service with its Endpoints, and waits until they are gone, so
// that it is made again in its new form with empty volumes.
//
// The Service goes because its two forms differ: PostgreSQL's and Redis's
// have no selector when replicated (Patroni and the keepers write its
// Endpoints, which are Patroni's leader lock, labelled as Patroni selects
// them) and a selector otherwise (the cluster writes them). Endpoints left
// from the other form stand in the way: Patroni sees no lock among the
// objects it selects, cannot create the one that is there, and no member
// ever leads.
func (m *availabilityMove) replace(ctx context.Context, engine string) error {
	c := m.cl.Client
	var claims []string
	sts, err := c.AppsV1().StatefulSets(m.ns).Get(ctx, engine, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return fmt.Errorf("reading StatefulSet %s/%s: %w", m.ns, engine, err)
	default:
		replicas := 1
		if sts.Spec.Replicas != nil {
			replicas = int(*sts.Spec.Replicas)
		}
		for _, t := range sts.Spec.VolumeClaimTemplates {
			for i := range max(replicas, 3) {
				claims = append(claims, fmt.Sprintf("%s-%s-%d", t.Name, engine, i))
			}
		}
		m.log("deleting "+engine+"'s StatefulSet and volumes", "claims", strings.Join(claims, ", "))
		bg := metav1.DeletePropagationBackground
		if err := c.AppsV1().StatefulSets(m.ns).Delete(ctx, engine, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting StatefulSet %s/%s: %w", m.ns, engine, err)
		}
	}
	for _, name := range claims {
		if err := c.CoreV1().PersistentVolumeClaims(m.ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting volume claim %s/%s: %w", m.ns, name, err)
		}
	}
	if err := c.CoreV1().Services(m.ns).Delete(ctx, engine, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Service %s/%s: %w", m.ns, engine, err)
	}
	// Once the Service is gone nothing makes its Endpoints again.
	if err := c.CoreV1().Endpoints(m.ns).Delete(ctx, engine, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting Endpoints %s/%s: %w", m.ns, engine, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, m.timeout, true, func(ctx context.Context) (bool, error) {
		pods, err := c.CoreV1().Pods(m.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, p := range pods.Items {
			if ownedBy(&p, "StatefulSet", engine) {
				return false, nil
			}
		}
		for _, name := range claims {
			if _, err := c.CoreV1().PersistentVolumeClaims(m.ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		if _, err := c.CoreV1().Services(m.ns).Get(ctx, engine, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, nil
		}
		_, err = c.CoreV1().Endpoints(m.ns).Get(ctx, engine, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s's pods, volumes, Service and Endpoints to be gone: %w", engine, err)
	}
	return nil
}

func ownedBy(p *corev1.Pod, kind, name string) bool {
	return slices.ContainsFunc(p.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == kind && o.Name == name })
}
