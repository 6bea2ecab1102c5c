// Package dbdump says how each database engine the platform runs in its
// cluster is dumped and restored with the engine's own tools, run inside
// the engine's pod (installer/podexec) so that the dump streams through
// the API server:
//
//   - MongoDB: mongodump --db DB --archive --gzip, and mongorestore --drop
//     --nsInclude 'DB.*' --archive --gzip, as the root user;
//   - PostgreSQL: pg_dump --format=custom, and pg_restore --clean
//     --if-exists --single-transaction (all or nothing), as the superuser;
//   - RabbitMQ: rabbitmqctl export_definitions / import_definitions (users,
//     vhosts, permissions, queues, exchanges, bindings, policies; never the
//     messages);
//   - Redis: redis-cli --rdb (a snapshot); it is restored by making it the
//     base of the append-only file and restarting the server.
//
// Every script reads credentials from the container's environment (the
// chart sets it from the generated Secrets), so no password is on a
// command line, and connects to the engine on the pod's loopback. A test
// that runs these scripts outside a pod points them at another server with
// ONPREM_DB_HOST and ONPREM_DB_PORT (and Redis's data folder with
// ONPREM_REDIS_DIR).
package dbdump

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/topology"
)

// Engines onprem dumps.
const (
	MongoDB    = "mongodb"
	PostgreSQL = "postgresql"
	RabbitMQ   = "rabbitmq"
	Redis      = "redis"
)

// componentLabel selects a component's objects (render.ComponentLabel).
const componentLabel = "onprem.dev/component"

// Engine is a database engine the platform runs in its cluster: the
// component (Helm release) and container that run it.
type Engine struct {
	Name      string
	Component string
	Container string
	// Extension ends the name of a dump of this engine in a backup.
	Extension string
	// Port is the engine's port on the pod's loopback.
	Port int
}

var engines = map[string]Engine{
	MongoDB:    {Name: MongoDB, Component: "mongodb", Container: "mongodb", Extension: ".archive.gz", Port: 27017},
	PostgreSQL: {Name: PostgreSQL, Component: "postgresql", Container: "postgresql", Extension: ".pgdump", Port: 5432},
	RabbitMQ:   {Name: RabbitMQ, Component: "rabbitmq", Container: "rabbitmq", Extension: ".json"},
	Redis:      {Name: Redis, Component: "redis", Container: "redis", Extension: ".rdb", Port: 6379},
}

// Get returns the named engine.
func Get(name string) (Engine, error) {
	e, ok := engines[name]
	if !ok {
		return Engine{}, fmt.Errorf("onprem cannot dump a %q database (it dumps %s)", name, strings.Join(Names(), ", "))
	}
	return e, nil
}

// Names lists the engines.
func Names() []string {
	var out []string
	for n := range engines {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// address is the engine's host and port as the scripts see them.
func (e Engine) address() string {
	return fmt.Sprintf(`host="${ONPREM_DB_HOST:-127.0.0.1}"; port="${ONPREM_DB_PORT:-%d}"`, e.Port)
}

// MongoDBAuth, in a script run in MongoDB's pod, sets
// MONGO_INITDB_ROOT_USERNAME and MONGO_INITDB_ROOT_PASSWORD to the admin
// of the Secret the chart mounts (ONPREM_MONGO_ADMIN_DIR,
// /etc/mongodb-admin), which the kubelet keeps current, rather than the
// container's environment, which a rotation of the admin leaves behind.
// A rotation alternates the admin between two users and revokes the old
// one only once this mount holds the new one, so the mounted pair always
// logs in. Without the folder, the environment's stays.
const MongoDBAuth = `admin="${ONPREM_MONGO_ADMIN_DIR:-/etc/mongodb-admin}"
if [ -r "$admin/username" ] && [ -r "$admin/password" ]; then
  MONGO_INITDB_ROOT_USERNAME="$(cat "$admin/username")"; MONGO_INITDB_ROOT_PASSWORD="$(cat "$admin/password")"
fi
`

// mongoAuth writes the root password into a private temporary file that
// mongodump/mongorestore read with --config, removed at exit.
const mongoAuth = MongoDBAuth + `cfg="$(mktemp)"; trap 'rm -f "$cfg"' EXIT
printf 'password: "%s"\n' "$MONGO_INITDB_ROOT_PASSWORD" > "$cfg"
`

// mongoTarget sets the positional arguments to the tools' --host (and
// --port) after the script's first argument (the database) is kept in
// $db: the server itself; or, where the chart set MONGODB_REPLICA_SET
// (high availability), the replica set seeded by it, where a restore
// reaches the primary and a dump reads from a secondary when one is
// there (readPreference, given as the tools' flag when it is a dump).
func mongoTarget(dump bool) string {
	read := ""
	if dump {
		read = " --readPreference secondaryPreferred"
	}
	return `db="$1"
if [ -n "${MONGODB_REPLICA_SET:-}" ]; then
  set -- --host "$MONGODB_REPLICA_SET/$host:$port"` + read + `
else
  set -- --host "$host" --port "$port"
fi
`
}

// replSetStatusJS connects to the member on the pod's loopback (directly:
// this member's view, whichever it is) as the admin of the environment
// (no credential on a command line or in a connection string), runs
// replSetGetStatus, and prints its answer, or the error as {ok: 0,
// code, errmsg}, as one line of relaxed Extended JSON. It only reads.
const replSetStatusJS = `let r;
try {
  let host = process.env.MONGODB_HOST;
  if (host.indexOf(':') >= 0 && host.charAt(0) !== '[') { host = '[' + host + ']'; }
  const conn = new Mongo('mongodb://' + host + ':' + process.env.MONGODB_PORT +
    '/admin?directConnection=true&serverSelectionTimeoutMS=5000&connectTimeoutMS=5000');
  const admin = conn.getDB('admin');
  admin.auth(process.env.MONGODB_ADMIN_USERNAME, process.env.MONGODB_ADMIN_PASSWORD);
  r = admin.runCommand({ replSetGetStatus: 1 });
} catch (e) {
  r = { ok: 0, code: (e && e.code) || 0, errmsg: (e && e.message) || String(e) };
}
print(EJSON.stringify(r, { relaxed: true }));
`

// ReplSetStatus returns the command that prints, run in a member of
// MongoDB's replica set, the set's status as that member sees it
// (replSetGetStatus, mongosh's rs.status()) as one line of relaxed
// Extended JSON (topology.ParseReplSetStatus reads it). It changes
// nothing. The admin is the mounted admin Secret's (MongoDBAuth).
func ReplSetStatus() []string {
	e := engines[MongoDB]
	return script(e.address()+"\n"+MongoDBAuth+`MONGODB_HOST="$host" MONGODB_PORT="$port" \
MONGODB_ADMIN_USERNAME="$MONGO_INITDB_ROOT_USERNAME" MONGODB_ADMIN_PASSWORD="$MONGO_INITDB_ROOT_PASSWORD" \
  exec mongosh --nodb --norc --quiet --eval "$1"
`, replSetStatusJS)
}

// script returns sh -c SCRIPT with positional arguments.
func script(body string, args ...string) []string {
	return append([]string{"sh", "-c", "set -eu\n" + body, "onprem"}, args...)
}

// PostgreSQLAuth, in a script run in PostgreSQL's pod after $host and
// $port are set, sets POSTGRES_PASSWORD to the admin's password of the
// Secret the chart mounts (ONPREM_PG_ADMIN_DIR, /etc/postgresql-admin),
// which the kubelet keeps current, rather than the container's
// environment, which a rotation of the admin's password leaves behind.
// While a rotation is under way the Secret holds the next password too
// (next-password): the one the server accepts is used. Without the
// folder, the environment's password stays.
//
// Each file is read once, next-password first: the kubelet swaps the
// mounted Secret's files at once, but two reads may straddle a swap, and
// a rotation only moves forward (next-password added, the server
// changed, then password takes its value and next-password goes). Read
// in this order, a next-password already gone means the password read
// after it is the new one; a check of the file followed by a read of it
// could find it gone in between (and `set -e` ended the script).
const PostgreSQLAuth = `admin="${ONPREM_PG_ADMIN_DIR:-/etc/postgresql-admin}"
next="$(cat "$admin/next-password" 2>/dev/null || :)"
current="$(cat "$admin/password" 2>/dev/null || :)"
if [ -n "$current" ]; then
  POSTGRES_PASSWORD="$current"
fi
if [ -n "$next" ] && ! PGPASSWORD="${POSTGRES_PASSWORD:-}" PGCONNECT_TIMEOUT=5 psql --host="$host" --port="$port" \
    --username="$POSTGRES_USER" --no-password --dbname=postgres --no-psqlrc --tuples-only --command='SELECT 1' >/dev/null 2>&1; then
  POSTGRES_PASSWORD="$next"
fi
`

// databaseEngine checks the name of database db, then returns the named
// engine: what DumpCommand and RestoreCommand need before they build
// their command.
func databaseEngine(engine, db string) (Engine, error) {
	if err := checkDatabase(db); err != nil {
		return Engine{}, err
	}
	return Get(engine)
}

// DumpCommand returns the command that writes a logical dump of database
// db to its standard output.
func DumpCommand(engine, db string) ([]string, error) {
	e, err := databaseEngine(engine, db)
	if err != nil {
		return nil, err
	}
	switch engine {
	case MongoDB:
		return script(e.address()+"\n"+mongoAuth+mongoTarget(true)+
			`mongodump "$@" --username "$MONGO_INITDB_ROOT_USERNAME" --authenticationDatabase admin \
  --config "$cfg" --db "$db" --gzip --archive --quiet
`, db), nil
	case PostgreSQL:
		return script(e.address()+"\n"+PostgreSQLAuth+
			`PGPASSWORD="$POSTGRES_PASSWORD" exec pg_dump --host="$host" --port="$port" --username="$POSTGRES_USER" --no-password \
  --dbname="$1" --format=custom
`, db), nil
	}
	return nil, fmt.Errorf("%s has no databases to dump one by one", engine)
}

// RestoreCommand returns the command that restores database db from a dump
// (DumpCommand's output) read on its standard input, replacing what the
// dump holds: MongoDB drops each dumped collection before restoring it;
// PostgreSQL drops and recreates each dumped object in one transaction,
// so a restore that fails changes nothing.
func RestoreCommand(engine, db string) ([]string, error) {
	e, err := databaseEngine(engine, db)
	if err != nil {
		return nil, err
	}
	switch engine {
	case MongoDB:
		return script(e.address()+"\n"+mongoAuth+mongoTarget(false)+
			`mongorestore "$@" --username "$MONGO_INITDB_ROOT_USERNAME" --authenticationDatabase admin \
  --config "$cfg" --nsInclude "$db.*" --drop --gzip --archive --quiet
`, db), nil
	case PostgreSQL:
		return script(e.address()+"\n"+PostgreSQLAuth+
			`PGPASSWORD="$POSTGRES_PASSWORD" exec pg_restore --host="$host" --port="$port" --username="$POSTGRES_USER" --no-password \
  --dbname="$1" --clean --if-exists --single-transaction --exit-on-error
`, db), nil
	}
	return nil, fmt.Errorf("%s has no databases to restore one by one", engine)
}

// ExportDefinitions writes RabbitMQ's definitions (JSON) to its standard
// output.
func ExportDefinitions() []string {
	return script(`exec rabbitmqctl export_definitions - --silent`)
}

// ImportDefinitions imports RabbitMQ's definitions read on its standard
// input (a file of the container's temporary folder in between, which
// rabbitmqctl reads).
func ImportDefinitions() []string {
	return script(`f="$(mktemp)"; trap 'rm -f "$f"' EXIT
cat > "$f"
rabbitmqctl import_definitions "$f" --silent
`)
}

// RedisAuth, in a script run in Redis's pod, makes redis-cli use the
// password of the file the chart mounts from Redis's Secret, which the
// kubelet keeps current, rather than the container's environment, which a
// rotation leaves behind (ONPREM_REDIS_AUTH_FILE points elsewhere:
// tests). Without the file, the environment's REDISCLI_AUTH stays.
const RedisAuth = `auth="${ONPREM_REDIS_AUTH_FILE:-/etc/redis-auth/password}"
if [ -r "$auth" ]; then REDISCLI_AUTH="$(cat "$auth")"; export REDISCLI_AUTH; fi
`

// RedisSnapshot writes a snapshot of Redis (an RDB file) to its standard
// output. redis-cli writes it to a file first, in Redis's data folder (the
// container's root filesystem is read-only, and written to its standard
// output the snapshot would keep the replication stream's end marker),
// which is removed at the end.
func RedisSnapshot() []string {
	e := engines[Redis]
	return script(e.address() + "\n" + RedisAuth + `dir="${ONPREM_REDIS_DIR:-/data}"
f="$dir/onprem-snapshot.rdb"; trap 'rm -f "$f"' EXIT
redis-cli -h "$host" -p "$port" --no-auth-warning --rdb "$f" >&2
cat "$f"
`)
}

// RedisStage writes the snapshot read on standard input beside Redis's
// data (the chart's --dir, /data), as onprem-restore.rdb.
func RedisStage() []string {
	return script(`dir="${ONPREM_REDIS_DIR:-/data}"
cat > "$dir/onprem-restore.rdb.tmp" && mv "$dir/onprem-restore.rdb.tmp" "$dir/onprem-restore.rdb"`)
}

// RedisSwap replaces Redis's data with the staged snapshot and stops the
// server without saving; the kubelet starts it again, and it loads the
// snapshot. The chart runs Redis with an append-only file, which Redis
// (7.0 and later: a folder appendonlydir with a manifest) loads instead of
// dump.rdb when it starts: the snapshot becomes the append-only file's
// base (an RDB base is what Redis writes itself with its default
// aof-use-rdb-preamble), alone in its manifest.
func RedisSwap() []string {
	e := engines[Redis]
	return script(e.address() + "\n" + RedisAuth + `dir="${ONPREM_REDIS_DIR:-/data}"
test -s "$dir/onprem-restore.rdb"
rm -rf "$dir/appendonlydir.onprem-restore"
mkdir "$dir/appendonlydir.onprem-restore"
mv "$dir/onprem-restore.rdb" "$dir/appendonlydir.onprem-restore/appendonly.aof.1.base.rdb"
printf 'file appendonly.aof.1.base.rdb seq 1 type b\n' > "$dir/appendonlydir.onprem-restore/appendonly.aof.manifest"
rm -rf "$dir/appendonlydir" "$dir/appendonly.aof" "$dir/dump.rdb"
mv "$dir/appendonlydir.onprem-restore" "$dir/appendonlydir"
# Redis is the container's first process: its exit stops the container and
# kills this script with it. The shutdown is left to a child a moment
# later, so that the script ends first, with its exit code.
(sleep 1; redis-cli -h "$host" -p "$port" --no-auth-warning shutdown nosave) </dev/null >/dev/null 2>&1 &
`)
}

// checkDatabase refuses names that are not a platform database's
// (credentials.DatabaseName: letters, digits, underscores).
func checkDatabase(db string) error {
	if db == "" || len(db) > 63 {
		return fmt.Errorf("database name %q: empty or too long", db)
	}
	for _, r := range db {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_') {
			return fmt.Errorf("database name %q: only letters, digits and underscores", db)
		}
	}
	return nil
}

// NotRunningError: the engine's pod is not there or not ready.
type NotRunningError struct {
	Engine, Namespace, Reason string
}

func (e *NotRunningError) Error() string {
	return fmt.Sprintf("%s is not running in namespace %s (%s): 'onprem status' shows why; it must be ready to be backed up or restored",
		e.Engine, e.Namespace, e.Reason)
}

// Pod returns where engine runs in namespace: the first ready pod (by
// name) of its component's StatefulSet, or of a replicated database its
// primary, container Engine.Container.
func Pod(ctx context.Context, c kubernetes.Interface, namespace, engine string) (podexec.Target, error) {
	e, pods, err := enginePods(ctx, c, namespace, engine)
	if err != nil {
		return podexec.Target{}, err
	}
	if len(pods) == 0 {
		return podexec.Target{}, &NotRunningError{Engine: engine, Namespace: namespace, Reason: "no pod"}
	}
	if replicated(pods) {
		// A replicated database is dumped and restored on its primary:
		// the only member that takes writes, and the newest data.
		for _, p := range pods {
			if topology.PodReady(&p) && topology.IsPrimary(&p) {
				return podexec.Target{Namespace: namespace, Pod: p.Name, Container: e.Container}, nil
			}
		}
		return podexec.Target{}, &NotRunningError{Engine: engine, Namespace: namespace,
			Reason: "none of its " + fmt.Sprint(len(pods)) + " members is a ready primary (a failover under way?)"}
	}
	for _, p := range pods {
		if topology.PodReady(&p) {
			return podexec.Target{Namespace: namespace, Pod: p.Name, Container: e.Container}, nil
		}
	}
	return podexec.Target{}, &NotRunningError{Engine: engine, Namespace: namespace, Reason: "pod " + pods[0].Name + " is not ready"}
}

// Members is every running member of database engine's StatefulSet in
// namespace (by name), to run in each a command that a member does not
// replicate to the others (Redis's ACL). A member that is not running (its
// node lost, its pod recreated) is left out: when it starts, it reads the
// Secret as it is then. It fails when no member runs.
func Members(ctx context.Context, c kubernetes.Interface, namespace, engine string) ([]podexec.Target, error) {
	e, pods, err := enginePods(ctx, c, namespace, engine)
	if err != nil {
		return nil, err
	}
	var out []podexec.Target
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, podexec.Target{Namespace: namespace, Pod: p.Name, Container: e.Container})
		}
	}
	if len(out) == 0 {
		return nil, &NotRunningError{Engine: engine, Namespace: namespace, Reason: "no running pod"}
	}
	return out, nil
}

// enginePods is engine and the pods of its component's StatefulSet in
// namespace, by name.
func enginePods(ctx context.Context, c kubernetes.Interface, namespace, engine string) (Engine, []corev1.Pod, error) {
	e, err := Get(engine)
	if err != nil {
		return e, nil, err
	}
	sets, err := c.AppsV1().StatefulSets(namespace).List(ctx, metav1.ListOptions{LabelSelector: componentLabel + "=" + e.Component})
	if err != nil {
		return e, nil, fmt.Errorf("finding %s's pods: %w", engine, err)
	}
	if len(sets.Items) == 0 {
		return e, nil, &NotRunningError{Engine: engine, Namespace: namespace, Reason: "no StatefulSet of component " + e.Component}
	}
	sel, err := metav1.LabelSelectorAsSelector(sets.Items[0].Spec.Selector)
	if err != nil {
		return e, nil, fmt.Errorf("finding %s's pods: %w", engine, err)
	}
	pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return e, nil, fmt.Errorf("finding %s's pods: %w", engine, err)
	}
	slices.SortFunc(pods.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return e, pods.Items, nil
}

// replicated reports whether pods are the members of a replicated database
// (they carry topology.ClusterLabel, or Redis's RedisClusterLabel).
func replicated(pods []corev1.Pod) bool {
	for _, p := range pods {
		if p.Labels[topology.ClusterLabel] != "" || p.Labels[topology.RedisClusterLabel] != "" {
			return true
		}
	}
	return false
}
