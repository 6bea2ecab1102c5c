package rotate

import (
	"bytes"
	"context"
	_ "embed"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/podexec"
)

// PodLogins changes logins with the engine's own client, run as its admin
// in the engine's pod (installer/podexec), with the db-provision chart's
// own scripts: psql for PostgreSQL, mongosh for MongoDB; rabbitmqctl for
// RabbitMQ (which reaches the node with the Erlang cookie). Every value
// travels on the command's standard input, never on a command line, and
// the admin's password comes from the container's environment.
type PodLogins struct {
	Client    kubernetes.Interface
	Namespace string
	Exec      podexec.Executor
}

// The db-provision chart's scripts: a rotation grants a login exactly
// what provisioning does.
const (
	provisionSQL = "db-provision/files/postgresql-provision.sql"
	provisionJS  = "db-provision/files/mongodb-provision.js"
)

// mongosh runs the provisioning script ($1) for one login read on its
// standard input (username, password and database, a line each), laid out
// as the Job's mounted Secret would be, in a private folder removed at
// the end; as the admin (the mounted admin Secret, dbdump.MongoDBAuth, else
// the container's MONGO_INITDB_ROOT_USERNAME and MONGO_INITDB_ROOT_PASSWORD)
// on the pod's loopback.
var mongosh = []string{"sh", "-c", `set -eu
` + dbdump.MongoDBAuth + `dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
mkdir "$dir/login"
IFS= read -r username; IFS= read -r password; IFS= read -r database
printf '%s' "$username" > "$dir/login/username"
printf '%s' "$password" > "$dir/login/password"
printf '%s' "$database" > "$dir/login/database"
unset password
printf 'login\n' > "$dir/services"
printf '%s' "$1" > "$dir/mongodb-provision.js"
MONGODB_HOST="${ONPREM_DB_HOST:-127.0.0.1}" MONGODB_PORT="${ONPREM_DB_PORT:-27017}" \
MONGODB_ADMIN_USERNAME="$MONGO_INITDB_ROOT_USERNAME" MONGODB_ADMIN_PASSWORD="$MONGO_INITDB_ROOT_PASSWORD" \
ONPREM_SERVICES_FILE="$dir/services" ONPREM_SECRETS_DIR="$dir" \
  mongosh --nodb --norc --quiet --file "$dir/mongodb-provision.js"
`, "onprem"}

// psql runs psql as the admin (the container's POSTGRES_USER, and the
// password of the mounted admin Secret, dbdump.PostgreSQLAuth) on the
// pod's loopback, reading its commands on its
// standard input. ONPREM_DB_HOST and ONPREM_DB_PORT point it elsewhere
// (tests).
var psql = []string{"sh", "-c", `set -eu
host="${ONPREM_DB_HOST:-127.0.0.1}"; port="${ONPREM_DB_PORT:-5432}"
` + dbdump.PostgreSQLAuth + `PGPASSWORD="$POSTGRES_PASSWORD" exec psql --host="$host" --port="$port" --username="$POSTGRES_USER" --no-password \
  --dbname=postgres --no-psqlrc --quiet --set=ON_ERROR_STOP=1 --file=-
`}

// rabbitmqGrant makes the user read on standard input (a line, then its
// password on the next) an administrator of every virtual host with every
// permission, as RabbitMQ's first user is, with that password: created,
// or its password changed. rabbitmqctl reads the password on its standard
// input.
var rabbitmqGrant = []string{"sh", "-c", `set -eu
IFS= read -r username; IFS= read -r password
if rabbitmqctl --quiet list_users --no-table-headers --silent | cut -f1 | grep -qxF -- "$username"; then
  printf '%s\n' "$password" | rabbitmqctl --quiet change_password -- "$username" >/dev/null
else
  printf '%s\n' "$password" | rabbitmqctl --quiet add_user -- "$username" >/dev/null
fi
unset password
rabbitmqctl --quiet set_user_tags -- "$username" administrator >/dev/null
rabbitmqctl --quiet list_vhosts --no-table-headers --silent | while IFS= read -r vhost; do
  rabbitmqctl --quiet set_permissions -p "$vhost" -- "$username" '.*' '.*' '.*' >/dev/null
done
`}

// rabbitmqRevoke deletes the user read on standard input, which ends its
// connections; a user that does not exist is revoked already.
var rabbitmqRevoke = []string{"sh", "-c", `set -eu
IFS= read -r username
if rabbitmqctl --quiet list_users --no-table-headers --silent | cut -f1 | grep -qxF -- "$username"; then
  rabbitmqctl --quiet delete_user -- "$username" >/dev/null
fi
`}

// Grant implements Logins.
func (p PodLogins) Grant(ctx context.Context, engine string, l Login) error {
	switch engine {
	case RabbitMQ:
		if err := oneLine(l.Username, string(l.Password)); err != nil {
			return err
		}
		return p.run(ctx, engine, rabbitmqGrant, strings.NewReader(l.Username+"\n"+string(l.Password)+"\n"), l.Password)
	case PostgreSQL:
		script, err := fs.ReadFile(charts.FS, provisionSQL)
		if err != nil {
			return fmt.Errorf("reading the provisioning script: %w", err)
		}
		var in bytes.Buffer
		for _, v := range [][2]string{{"username", l.Username}, {"password", string(l.Password)}, {"database", l.Database}, {"owner", l.Owner}} {
			q, err := psqlQuote(v[1])
			if err != nil {
				return fmt.Errorf("the %s of the login: %w", v[0], err)
			}
			fmt.Fprintf(&in, "\\set %s %s\n", v[0], q)
		}
		in.Write(script)
		return p.run(ctx, engine, psql, &in, l.Password)
	case MongoDB:
		script, err := fs.ReadFile(charts.FS, provisionJS)
		if err != nil {
			return fmt.Errorf("reading the provisioning script: %w", err)
		}
		if err := oneLine(l.Username, string(l.Password), l.Database); err != nil {
			return err
		}
		in := strings.NewReader(l.Username + "\n" + string(l.Password) + "\n" + l.Database + "\n")
		return p.run(ctx, engine, append(slices.Clone(mongosh), string(script)), in, l.Password)
	}
	return fmt.Errorf("onprem does not change %s logins", engine)
}

// revokeSQL makes the login :'username' unable to log in (no LOGIN, no
// password) and ends its sessions; it refuses a superuser or the admin.
const revokeSQL = `\set VERBOSITY terse
SELECT current_setting('is_superuser') = 'on' AS is_superuser \gset
\if :is_superuser
SET log_statement = 'none';
\endif
SELECT coalesce(bool_or(rolsuper OR rolname = current_user), false) AS refused
FROM pg_roles WHERE rolname = :'username' \gset
\if :refused
DO $$ BEGIN RAISE EXCEPTION 'the login to revoke is a superuser or the admin role: refusing to change it'; END $$;
\endif
SELECT format('ALTER ROLE %I WITH NOLOGIN PASSWORD NULL', :'username')
WHERE EXISTS (SELECT FROM pg_roles WHERE rolname = :'username') \gexec
SELECT count(pg_terminate_backend(pid)) AS ended FROM pg_stat_activity
WHERE usename = :'username' AND pid <> pg_backend_pid() \gset
`

// Revoke implements Logins. RabbitMQ: the user is deleted, its
// connections closed. PostgreSQL: no LOGIN, no password, its
// sessions ended. MongoDB: the user is given a new random password that
// nobody holds (provisioning does it, so the user keeps nothing else).
func (p PodLogins) Revoke(ctx context.Context, engine string, l Login) error {
	switch engine {
	case RabbitMQ:
		if err := oneLine(l.Username); err != nil {
			return err
		}
		return p.run(ctx, engine, rabbitmqRevoke, strings.NewReader(l.Username+"\n"), nil)
	case PostgreSQL:
		q, err := psqlQuote(l.Username)
		if err != nil {
			return fmt.Errorf("the login to revoke: %w", err)
		}
		return p.run(ctx, engine, psql, strings.NewReader("\\set username "+q+"\n"+revokeSQL), nil)
	case MongoDB:
		pw, err := generatePassword()
		if err != nil {
			return err
		}
		l.Password = pw
		return p.Grant(ctx, engine, l)
	}
	return fmt.Errorf("onprem does not change %s logins", engine)
}

// oneLine refuses an empty value or one with a line break or NUL, which
// the scripts read line by line.
func oneLine(values ...string) error {
	for _, v := range values {
		if v == "" || strings.ContainsAny(v, "\n\r\x00") {
			return fmt.Errorf("a login's username, password and database must be one non-empty line each")
		}
	}
	return nil
}

// run runs cmd in the engine's pod; a failure carries the end of what it
// printed (the scripts print no value; password is redacted anyway).
func (p PodLogins) run(ctx context.Context, engine string, cmd []string, stdin io.Reader, password []byte) error {
	target, err := dbdump.Pod(ctx, p.Client, p.Namespace, engine)
	if err != nil {
		return err
	}
	return p.runIn(ctx, target, cmd, stdin, password)
}

// runIn runs cmd in target; a failure carries the end of what it printed,
// password redacted.
func (p PodLogins) runIn(ctx context.Context, target podexec.Target, cmd []string, stdin io.Reader, password []byte) error {
	var out tail
	if err := p.Exec.Exec(ctx, target, cmd, stdin, &out); err != nil {
		if s := strings.TrimSpace(string(out.b)); s != "" {
			err = fmt.Errorf("%w; it printed: %s", err, s)
		}
		return redactErr(err, password)
	}
	return nil
}

// runEach runs cmd in every running member of engine (dbdump.Members),
// each with its own copy of stdin, and stops at the first that fails,
// naming it.
func (p PodLogins) runEach(ctx context.Context, engine string, cmd []string, stdin string, password []byte) error {
	targets, err := dbdump.Members(ctx, p.Client, p.Namespace, engine)
	if err != nil {
		return err
	}
	for _, target := range targets {
		if err := p.runIn(ctx, target, cmd, strings.NewReader(stdin), password); err != nil {
			if len(targets) > 1 {
				err = fmt.Errorf("in pod %s: %w", target.Pod, err)
			}
			return err
		}
	}
	return nil
}

// tail keeps the last 2 KiB written to it.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2048 {
		t.b = t.b[len(t.b)-2048:]
	}
	return len(p), nil
}

// psqlQuote quotes a value as one argument of a psql meta-command: single
// quotes, inside which psql reads \\ as a backslash and \' as a quote. A
// line break or NUL would end the command: refused.
func psqlQuote(v string) (string, error) {
	if strings.ContainsAny(v, "\n\r\x00") {
		return "", fmt.Errorf("holds a line break or NUL, which psql cannot take")
	}
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'", nil
}

// mongoshAdmin runs the admin script ($1, mongodb-admin.js) to grant or
// revoke ($2) the admin login read on its standard input (username, then
// password, a line each; revoke reads the username only), laid out in a
// private folder removed at the end; as the admin of the mounted admin
// Secret (dbdump.MongoDBAuth), on the pod's loopback.
var mongoshAdmin = []string{"sh", "-c", `set -eu
` + dbdump.MongoDBAuth + `dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
IFS= read -r username; printf '%s' "$username" > "$dir/username"
if [ "$2" = grant ]; then IFS= read -r password; printf '%s' "$password" > "$dir/password"; unset password; fi
printf '%s' "$1" > "$dir/mongodb-admin.js"
MONGODB_HOST="${ONPREM_DB_HOST:-127.0.0.1}" MONGODB_PORT="${ONPREM_DB_PORT:-27017}" \
MONGODB_ADMIN_USERNAME="$MONGO_INITDB_ROOT_USERNAME" MONGODB_ADMIN_PASSWORD="$MONGO_INITDB_ROOT_PASSWORD" \
ONPREM_LOGIN_DIR="$dir" ONPREM_ADMIN_ACTION="$2" \
  mongosh --nodb --norc --quiet --file "$dir/mongodb-admin.js"
`, "onprem"}

// mongodbAdminJS is the script mongoshAdmin runs.
//
//go:embed mongodb-admin.js
var mongodbAdminJS string

// GrantAdmin implements AdminLogins: l becomes a user of MongoDB's admin
// database with the root role and l's password.
func (p PodLogins) GrantAdmin(ctx context.Context, engine string, l Login) error {
	if engine != MongoDB {
		return fmt.Errorf("onprem alternates the admin of %s only, not %s's", MongoDB, engine)
	}
	if err := oneLine(l.Username, string(l.Password)); err != nil {
		return err
	}
	in := strings.NewReader(l.Username + "\n" + string(l.Password) + "\n")
	return p.run(ctx, engine, append(slices.Clone(mongoshAdmin), mongodbAdminJS, "grant"), in, l.Password)
}

// RevokeAdmin implements AdminLogins: the user is dropped.
func (p PodLogins) RevokeAdmin(ctx context.Context, engine, username string) error {
	if engine != MongoDB {
		return fmt.Errorf("onprem alternates the admin of %s only, not %s's", MongoDB, engine)
	}
	if err := oneLine(username); err != nil {
		return err
	}
	return p.run(ctx, engine, append(slices.Clone(mongoshAdmin), mongodbAdminJS, "revoke"), strings.NewReader(username+"\n"), nil)
}
