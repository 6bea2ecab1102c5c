package render

import (
	"fmt"
	"hash/fnv"
	"maps"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
)

// TaskLabel marks the one-off Jobs of an upgrade step: the backups and the
// migrations of a release. They belong to no component (no Helm release
// holds them): the upgrade creates them itself, one at a time, before the
// step's components are upgraded. Their value is the task's name.
const TaskLabel = "onprem.dev/task"

// TaskComponent is the name Check reports task problems under.
const TaskComponent = "task"

// Task kinds.
const (
	TaskBackup    = "backup"
	TaskMigration = "migration"
)

// BackupClaim is the PersistentVolumeClaim that backup Jobs write to. The
// upgrade creates it on first use and never deletes it.
const BackupClaim = "onprem-backups"

// BackupMount is where backup Jobs mount BackupClaim.
const BackupMount = "/backups"

// BackupFileEnv names the environment variable of a backup Job that holds
// the file to write (under BackupMount). The upgrade sets it per run.
const BackupFileEnv = "BACKUP_FILE"

// DefaultMigrationTimeout bounds a migration whose release gives none.
const DefaultMigrationTimeout = 10 * time.Minute

// BackupTimeout bounds each backup Job.
const BackupTimeout = 30 * time.Minute

// Task is a Job template of an upgrade step, rendered through the same
// overlays as the components (labels, image relocation, hardening,
// placement, proxy, the operator's overlays): a migration runs the image of
// its service with the release's arguments and the service's own database
// credentials; a backup dumps one service's database with the database's
// own tools into BackupClaim.
type Task struct {
	// Name is the Job's name (and the TaskLabel value).
	Name string `json:"name"`
	// Kind is TaskBackup or TaskMigration.
	Kind string `json:"kind"`
	// Migration is the migration's name (migrations only).
	Migration string `json:"migration,omitempty"`
	// Engine and Service name the dumped database (backups only).
	Engine  string `json:"engine,omitempty"`
	Service string `json:"service,omitempty"`
	// Component is the service whose image (migration) or credentials
	// (backup) the Job uses.
	Component string                     `json:"component"`
	Timeout   time.Duration              `json:"timeout"`
	Job       *unstructured.Unstructured `json:"job"`
}

// taskBuild is one task before the post-render.
type taskBuild struct {
	task *Task
	obj  *unstructured.Unstructured
}

// tasks builds the Job templates of the release's migrations from the
// charted objects of their services (before the post-render, which then
// treats them like every other object). A migration whose service the
// configuration leaves out is skipped: its data does not exist here.
func (st *charted) buildTasks() ([]taskBuild, error) {
	rel, in := st.opts.Release, st.opts.Installation
	var out []taskBuild
	backups := map[string]bool{}
	for _, m := range rel.Migrations {
		dep := st.deployment(m.Component)
		if dep == nil {
			continue
		}
		timeout := DefaultMigrationTimeout
		if m.Timeout != "" {
			d, err := time.ParseDuration(m.Timeout)
			if err != nil {
				return nil, fmt.Errorf("release %s: migration %s: timeout: %w", rel.Version, m.Name, err)
			}
			timeout = d
		}
		for _, ref := range m.Touches {
			key := ref.Engine + "/" + ref.Service
			if backups[key] {
				continue
			}
			backups[key] = true
			src := st.deployment(ref.Service)
			if src == nil {
				return nil, fmt.Errorf("release %s: migration %s touches the %s database of %s, which this configuration does not install",
					rel.Version, m.Name, ref.Engine, ref.Service)
			}
			img, ok := rel.Image(ref.Engine)
			if !ok {
				return nil, fmt.Errorf("release %s: no %s image to back up %s with", rel.Version, ref.Engine, ref.Service)
			}
			b, err := backupJob(src, ref, images.Reference(img, in.Spec.Images.Platform))
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		job, err := migrationJob(dep, m, timeout)
		if err != nil {
			return nil, err
		}
		out = append(out, job)
	}
	return out, nil
}

// deployment returns the charted Deployment of a component, or nil.
func (st *charted) deployment(component string) *unstructured.Unstructured {
	for _, o := range st.objects {
		if o.GetKind() == "Deployment" && o.GetLabels()[ComponentLabel] == component {
			return o
		}
	}
	return nil
}

// TaskName is the Job name of a task: onprem-<kind>-<what>, shortened with
// a hash when it would not fit in a label value.
func TaskName(kind, what string) string {
	name := "onprem-" + kind + "-" + what
	if len(name) <= 63 {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s-%08x", strings.TrimRight(name[:54], "-"), h.Sum32())
}

// podTemplate copies a Deployment's pod template for a Job: the same
// service account, security contexts, pull secrets and database client
// labels (the network policies allow database traffic by those labels),
// but none of the labels that select the Deployment's pods, so a task's
// pod is never counted or routed to as one of the service's.
func podTemplate(dep *unstructured.Unstructured, taskName string) (map[string]any, map[string]any, error) {
	tmpl, ok, err := unstructured.NestedMap(dep.Object, "spec", "template")
	if err != nil || !ok {
		return nil, nil, fmt.Errorf("deployment %s: no pod template", dep.GetName())
	}
	spec, _ := tmpl["spec"].(map[string]any)
	if spec == nil {
		return nil, nil, fmt.Errorf("deployment %s: no pod spec", dep.GetName())
	}
	labels := map[string]any{
		"app.kubernetes.io/name":       "onprem-task",
		"app.kubernetes.io/managed-by": "onprem",
		TaskLabel:                      taskName,
	}
	if old, ok := tmpl["metadata"].(map[string]any); ok {
		if l, ok := old["labels"].(map[string]any); ok {
			for k, v := range l {
				if strings.HasPrefix(k, "onprem.dev/client-") {
					labels[k] = v
				}
			}
		}
	}
	spec = maps.Clone(spec)
	spec["restartPolicy"] = "Never"
	delete(spec, "topologySpreadConstraints")
	return map[string]any{"labels": labels}, spec, nil
}

// firstContainer returns a copy of the pod's first container.
func firstContainer(spec map[string]any) (map[string]any, error) {
	cs, _ := spec["containers"].([]any)
	if len(cs) == 0 {
		return nil, fmt.Errorf("no container")
	}
	c, ok := cs[0].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("malformed container")
	}
	return maps.Clone(c), nil
}

func job(name string, meta map[string]any, spec map[string]any, timeout time.Duration) *unstructured.Unstructured {
	l := map[string]any{
		"app.kubernetes.io/name":       "onprem-task",
		"app.kubernetes.io/managed-by": "onprem",
		TaskLabel:                      name,
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "batch/v1",
		"kind":       "Job",
		"metadata":   map[string]any{"name": name, "labels": l},
		"spec": map[string]any{
			// A failed migration is not retried: the upgrade rolls back
			// and says why, and the operator decides.
			"backoffLimit":          int64(0),
			"activeDeadlineSeconds": int64(timeout / time.Second),
			"template":              map[string]any{"metadata": meta, "spec": spec},
		},
	}}
}

// migrationJob runs a migration with its service's image, environment and
// credentials.
func migrationJob(dep *unstructured.Unstructured, m release.Migration, timeout time.Duration) (taskBuild, error) {
	name := TaskName(TaskMigration, m.Name)
	meta, spec, err := podTemplate(dep, name)
	if err != nil {
		return taskBuild{}, fmt.Errorf("migration %s: %w", m.Name, err)
	}
	c, err := firstContainer(spec)
	if err != nil {
		return taskBuild{}, fmt.Errorf("migration %s: deployment %s: %w", m.Name, dep.GetName(), err)
	}
	args := make([]any, 0, len(m.Args))
	for _, a := range m.Args {
		args = append(args, a)
	}
	c["name"] = "migrate"
	c["args"] = args
	for _, k := range []string{"ports", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle"} {
		delete(c, k)
	}
	spec["containers"] = []any{c}
	obj := job(name, meta, spec, timeout)
	t := &Task{Name: name, Kind: TaskMigration, Migration: m.Name, Component: m.Component, Timeout: timeout}
	return taskBuild{task: t, obj: obj}, nil
}

// backupScripts dump one database to $BACKUP_FILE with the database's own
// tools, connecting with the service's credentials (the environment of the
// service chart, charts/README.md). The dump is written beside its final
// name and renamed when complete, so a file under that name is whole. The
// password never appears on a command line.
//
// A task's pod is new, and a new pod may be refused for a moment: on some
// network plugins (kube-router) its address joins the database's
// NetworkPolicy allow-list only at the plugin's next sync. pg_dump gives up
// at the first refusal, so the PostgreSQL script first waits (a minute at
// most) until the server answers this pod (pg_isready needs the user and
// database: without them, in a container with no user of its UID, it
// makes no attempt at all); mongodump's driver retries by itself for its
// server selection timeout (30 s). With MONGODB_REPLICA_SET (high
// availability) mongodump reads the replica set's primary: the data as the
// migration will find it.
var backupScripts = map[string]string{
	"mongodb": `set -eu
mkdir -p "$(dirname "$BACKUP_FILE")"
cfg="$(mktemp)"
printf 'password: "%s"\n' "$MONGODB_PASSWORD" > "$cfg"
if [ -n "${MONGODB_REPLICA_SET:-}" ]; then
  set -- --host "$MONGODB_REPLICA_SET/$MONGODB_HOST:$MONGODB_PORT"
else
  set -- --host "$MONGODB_HOST" --port "$MONGODB_PORT"
fi
mongodump "$@" --username "$MONGODB_USERNAME" \
  --authenticationDatabase "$MONGODB_DATABASE" --db "$MONGODB_DATABASE" \
  --config "$cfg" --gzip --archive="$BACKUP_FILE.partial"
rm -f "$cfg"
mv "$BACKUP_FILE.partial" "$BACKUP_FILE"
`,
	"postgresql": `set -eu
mkdir -p "$(dirname "$BACKUP_FILE")"
waited=0
until pg_isready --quiet --host "$POSTGRESQL_HOST" --port "$POSTGRESQL_PORT" \
  --username "$POSTGRESQL_USERNAME" --dbname "$POSTGRESQL_DATABASE" --timeout=3; do
  waited=$((waited + 2))
  if [ "$waited" -ge 60 ]; then
    echo "PostgreSQL at $POSTGRESQL_HOST:$POSTGRESQL_PORT does not answer this pod after 60 s (is it running? does a NetworkPolicy refuse this pod?)" >&2
    exit 1
  fi
  sleep 2
done
PGPASSWORD="$POSTGRESQL_PASSWORD" pg_dump --host "$POSTGRESQL_HOST" --port "$POSTGRESQL_PORT" \
  --username "$POSTGRESQL_USERNAME" --dbname "$POSTGRESQL_DATABASE" --format custom --file "$BACKUP_FILE.partial"
mv "$BACKUP_FILE.partial" "$BACKUP_FILE"
`,
}

// BackupExtension is the file extension of a backup of each engine.
var BackupExtension = map[string]string{"mongodb": ".archive.gz", "postgresql": ".pgdump"}

// backupJob dumps the database ref with image, using the credentials the
// service's Deployment gives its container.
func backupJob(dep *unstructured.Unstructured, ref release.DataRef, image string) (taskBuild, error) {
	script, ok := backupScripts[ref.Engine]
	if !ok {
		return taskBuild{}, fmt.Errorf("cannot back up a %s database (of %s)", ref.Engine, ref.Service)
	}
	name := TaskName(TaskBackup, ref.Service+"-"+ref.Engine)
	meta, spec, err := podTemplate(dep, name)
	if err != nil {
		return taskBuild{}, fmt.Errorf("backup of %s: %w", ref.Service, err)
	}
	svc, err := firstContainer(spec)
	if err != nil {
		return taskBuild{}, fmt.Errorf("backup of %s: %w", ref.Service, err)
	}
	prefix := strings.ToUpper(ref.Engine) + "_"
	env := []any{map[string]any{"name": BackupFileEnv, "value": BackupMount + "/" + ref.Service + "-" + ref.Engine + BackupExtension[ref.Engine]}}
	found := 0
	svcEnv, _ := svc["env"].([]any)
	for _, e := range svcEnv {
		if m, ok := e.(map[string]any); ok && strings.HasPrefix(fmt.Sprint(m["name"]), prefix) {
			env = append(env, m)
			found++
		}
	}
	if found == 0 {
		return taskBuild{}, fmt.Errorf("backup of %s: its deployment has no %s* environment (does it use %s?)", ref.Service, prefix, ref.Engine)
	}
	c := map[string]any{
		"name":            "backup",
		"image":           image,
		"imagePullPolicy": "IfNotPresent",
		"command":         []any{"/bin/sh", "-c", script},
		"env":             env,
		"resources": map[string]any{
			"requests": map[string]any{"cpu": "100m", "memory": "256Mi"},
			"limits":   map[string]any{"cpu": "1", "memory": "1Gi"},
		},
	}
	if sc, ok := svc["securityContext"]; ok {
		c["securityContext"] = sc
	}
	spec["containers"] = []any{c}
	spec["automountServiceAccountToken"] = false
	c["volumeMounts"] = []any{
		map[string]any{"name": "backups", "mountPath": BackupMount},
		map[string]any{"name": "tmp", "mountPath": "/tmp"},
	}
	spec["volumes"] = []any{
		map[string]any{"name": "backups", "persistentVolumeClaim": map[string]any{"claimName": BackupClaim}},
		map[string]any{"name": "tmp", "emptyDir": map[string]any{}},
	}
	obj := job(name, meta, spec, BackupTimeout)
	t := &Task{Name: name, Kind: TaskBackup, Engine: ref.Engine, Service: ref.Service, Component: ref.Service, Timeout: BackupTimeout}
	return taskBuild{task: t, obj: obj}, nil
}
