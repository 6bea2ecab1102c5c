// Package backup writes and restores whole-platform backups: per-service
// logical dumps of MongoDB and PostgreSQL taken with the engines' own
// tools inside their pods and streamed through the API server
// (installer/dbdump, installer/podexec), RabbitMQ's definitions, Redis
// optionally, the generated Secrets, the state record, the effective
// configuration and the registrations of runners and runtimes, in one
// encrypted file (installer/backupfile) at a destination
// (installer/backupstore).
//
// Create and the restore steps are the library's; installer/action wraps
// them in the installation's lock and records them in the state history.
package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"filippo.io/age"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/backupstore"
	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/version"
	"onprem.dev/onprem/internal/counting"
)

// Phases of Progress events.
const (
	PhaseStarted  = "started"
	PhaseDone     = "done"
	PhaseSkipped  = "skipped"
	PhaseFailed   = "failed"
	PhaseProgress = "progress"
)

// Progress is one step of a backup or a restore, for the operator.
type Progress struct {
	// Item is what the step is about: "secrets", "mongodb/pipelines_api",
	// "component gitops-api", ...
	Item    string
	Phase   string
	Bytes   int64
	Elapsed time.Duration
	Message string
	Err     error
}

// CreateOptions say what to back up and where.
type CreateOptions struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Exec    podexec.Executor
	// Namespace is the platform's; State its record, as read under the
	// installation's lock.
	Namespace string
	State     *state.State
	// Config is the effective configuration (PackConfig); empty: the one
	// the last install or upgrade stored in the cluster (ConfigSecret).
	Config     map[string][]byte
	Recipients []age.Recipient
	Store      backupstore.Store
	// Name of the backup (default: backupstore.Name at the start).
	Name         string
	Trigger      string
	IncludeRedis bool
	Progress     func(Progress)
	// BetweenSteps is set by an upgrade that backs the platform up between
	// two of its steps: its own operation is running, and the platform is
	// whole at State.Version.
	BetweenSteps bool
}

// Result is what a backup wrote.
type Result struct {
	Name     string               `json:"name"`
	Where    string               `json:"where"`
	Size     int64                `json:"size"`
	Manifest *backupfile.Manifest `json:"manifest"`
	Elapsed  time.Duration        `json:"elapsed"`
}

// Create writes one backup. On any failure the destination keeps nothing
// of it.
func Create(ctx context.Context, o CreateOptions) (res *Result, err error) {
	start := time.Now()
	progress := o.Progress
	if progress == nil {
		progress = func(Progress) {}
	}
	st := o.State
	if st == nil || st.Version == "" {
		return nil, fmt.Errorf("no platform is installed in namespace %s: nothing to back up", o.Namespace)
	}
	if run := st.Running(); run != nil && run.Kind != state.KindBackup && !o.BetweenSteps {
		return nil, fmt.Errorf("operation %s (%s, started %s) did not finish: a backup now would hold a platform halfway through it; finish it first (run the same command again, or 'onprem rollback')",
			run.ID, run.Kind, run.Started.Format(time.RFC3339))
	}
	col, err := collect(ctx, o.Client, o.Dynamic, o.Namespace, st, o.Config)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	hdr := backupfile.Header{
		Installation: st.Installation, Namespace: o.Namespace, Version: st.Version, Installer: version.Version,
		Created: start.UTC(), Host: host, Trigger: o.Trigger, Components: sortedKeys(st.Components),
	}
	if hdr.Trigger == "" {
		hdr.Trigger = backupfile.TriggerManual
	}
	name := o.Name
	if name == "" {
		name = backupstore.Name(st.Installation, start)
	}
	up, err := o.Store.Create(ctx, name)
	if err != nil {
		return nil, err
	}
	committed := false
	defer func() {
		if !committed {
			up.Abort()
		}
	}()
	cw := &counting.Writer{W: up}
	w, err := backupfile.NewWriter(cw, o.Recipients, hdr)
	if err != nil {
		return nil, err
	}

	secretsJSON, err := json.Marshal(col.secrets)
	if err != nil {
		return nil, err
	}
	regs, err := json.MarshalIndent(col.registrations, "", "  ")
	if err != nil {
		return nil, err
	}
	smalls := []struct {
		entry backupfile.Entry
		data  []byte
	}{
		{backupfile.Entry{Name: entryConfig, Kind: backupfile.KindConfig}, col.config[ConfigKey]},
	}
	if o := col.config[OverlaysKey]; len(o) > 0 {
		smalls = append(smalls, struct {
			entry backupfile.Entry
			data  []byte
		}{backupfile.Entry{Name: entryOverlays, Kind: backupfile.KindConfig}, o})
	}
	for _, e := range append(smalls, []struct {
		entry backupfile.Entry
		data  []byte
	}{
		{backupfile.Entry{Name: entryState, Kind: backupfile.KindState}, col.state},
		{backupfile.Entry{Name: entrySecrets, Kind: backupfile.KindSecrets}, secretsJSON},
		{backupfile.Entry{Name: entryRegistrations, Kind: backupfile.KindRegistrations}, regs},
	}...) {
		if _, err := w.Add(e.entry, e.data); err != nil {
			return nil, err
		}
	}
	clear(secretsJSON)
	progress(Progress{Item: "secrets", Phase: PhaseDone, Message: fmt.Sprintf("%d Secrets, the state, the configuration and the registrations", len(col.secrets))})

	for _, engine := range []string{dbdump.MongoDB, dbdump.PostgreSQL} {
		eng, _ := dbdump.Get(engine)
		dbs := col.databases[engine]
		if _, internal := st.Components[eng.Component]; !internal {
			if len(dbs) > 0 {
				progress(Progress{Item: engine, Phase: PhaseSkipped, Message: "external: its owner backs it up"})
			}
			continue
		}
		if len(dbs) == 0 {
			continue
		}
		target, err := dbdump.Pod(ctx, o.Client, o.Namespace, engine)
		if err != nil {
			return nil, err
		}
		for _, db := range dbs {
			cmd, err := dbdump.DumpCommand(engine, db.name)
			if err != nil {
				return nil, err
			}
			item := engine + "/" + db.name
			e := backupfile.Entry{Name: databaseEntry(eng, db.name), Kind: backupfile.KindDatabase, Engine: engine, Database: db.name, Service: db.service}
			if err := stream(ctx, o.Exec, w, target, cmd, e, item, progress); err != nil {
				return nil, err
			}
		}
	}
	if _, internal := st.Components["rabbitmq"]; internal {
		target, err := dbdump.Pod(ctx, o.Client, o.Namespace, dbdump.RabbitMQ)
		if err != nil {
			return nil, err
		}
		e := backupfile.Entry{Name: entryDefinitions, Kind: backupfile.KindDefinitions, Engine: dbdump.RabbitMQ}
		if err := stream(ctx, o.Exec, w, target, dbdump.ExportDefinitions(), e, "rabbitmq/definitions", progress); err != nil {
			return nil, err
		}
	}
	if o.IncludeRedis {
		if _, internal := st.Components["redis"]; !internal {
			progress(Progress{Item: "redis", Phase: PhaseSkipped, Message: "external: its owner backs it up"})
		} else {
			target, err := dbdump.Pod(ctx, o.Client, o.Namespace, dbdump.Redis)
			if err != nil {
				return nil, err
			}
			e := backupfile.Entry{Name: entryRedis, Kind: backupfile.KindCache, Engine: dbdump.Redis}
			if err := stream(ctx, o.Exec, w, target, dbdump.RedisSnapshot(), e, "redis", progress); err != nil {
				return nil, err
			}
		}
	}
	m, err := w.Close()
	if err != nil {
		return nil, err
	}
	if err := up.Commit(); err != nil {
		return nil, err
	}
	committed = true
	return &Result{Name: name, Where: o.Store.String(), Size: cw.N, Manifest: m, Elapsed: time.Since(start)}, nil
}

// stream runs cmd in target and writes its output as entry e.
func stream(ctx context.Context, ex podexec.Executor, w *backupfile.Writer, target podexec.Target, cmd []string, e backupfile.Entry, item string, progress func(Progress)) error {
	t0 := time.Now()
	progress(Progress{Item: item, Phase: PhaseStarted})
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		err := ex.Exec(ctx, target, cmd, nil, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	got, err := w.AddStream(e, pr)
	if err != nil {
		pr.CloseWithError(err)
		cancel()
		xerr := <-done
		if xerr != nil && !errors.Is(xerr, context.Canceled) && !errors.Is(err, xerr) {
			err = fmt.Errorf("%w (%v)", err, xerr)
		}
		err = fmt.Errorf("backing up %s: %w", item, err)
		progress(Progress{Item: item, Phase: PhaseFailed, Err: err, Elapsed: time.Since(t0)})
		return err
	}
	if err := <-done; err != nil {
		err = fmt.Errorf("backing up %s: %w", item, err)
		progress(Progress{Item: item, Phase: PhaseFailed, Err: err, Elapsed: time.Since(t0)})
		return err
	}
	progress(Progress{Item: item, Phase: PhaseDone, Bytes: got.Size, Elapsed: time.Since(t0)})
	return nil
}

// Databases lists the platform's databases by engine (sorted), as a backup
// finds them: one per generated service credential Secret.
func Databases(ctx context.Context, c kubernetes.Interface, ns string) (map[string][]string, error) {
	col, err := collect(ctx, c, nil, ns, &state.State{}, map[string][]byte{ConfigKey: []byte("-")})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for engine, dbs := range col.databases {
		for _, d := range dbs {
			out[engine] = append(out[engine], d.name)
		}
		slices.Sort(out[engine])
	}
	return out, nil
}
