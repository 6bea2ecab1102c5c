package rotate

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/podexec"
)

// PodLogins changes logins with the engine's own client, run as its admin
// in the engine's pod (installer/podexec): psql for PostgreSQL. Every value
// travels on the client's standard input, never on a command line, and the
// admin's password comes from the container's environment.
type PodLogins struct {
	Client    kubernetes.Interface
	Namespace string
	Exec      podexec.Executor
}

// provisionSQL is the db-provision chart's PostgreSQL script: a rotation
// grants a login exactly what provisioning does.
const provisionSQL = "db-provision/files/postgresql-provision.sql"

// psql runs psql as the admin (the container's POSTGRES_USER and
// POSTGRES_PASSWORD) on the pod's loopback, reading its commands on its
// standard input. ONPREM_DB_HOST and ONPREM_DB_PORT point it elsewhere
// (tests).
var psql = []string{"sh", "-c", `set -eu
host="${ONPREM_DB_HOST:-127.0.0.1}"; port="${ONPREM_DB_PORT:-5432}"
PGPASSWORD="$POSTGRES_PASSWORD" exec psql --host="$host" --port="$port" --username="$POSTGRES_USER" --no-password \
  --dbname=postgres --no-psqlrc --quiet --set=ON_ERROR_STOP=1 --file=-
`}

// Grant implements Logins.
func (p PodLogins) Grant(ctx context.Context, engine string, l Login) error {
	if engine != PostgreSQL {
		return fmt.Errorf("onprem does not change %s logins", engine)
	}
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
	return p.run(ctx, engine, &in)
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

// Revoke implements Logins.
func (p PodLogins) Revoke(ctx context.Context, engine, username string) error {
	if engine != PostgreSQL {
		return fmt.Errorf("onprem does not change %s logins", engine)
	}
	q, err := psqlQuote(username)
	if err != nil {
		return fmt.Errorf("the login to revoke: %w", err)
	}
	return p.run(ctx, engine, strings.NewReader("\\set username "+q+"\n"+revokeSQL))
}

func (p PodLogins) run(ctx context.Context, engine string, stdin io.Reader) error {
	target, err := dbdump.Pod(ctx, p.Client, p.Namespace, engine)
	if err != nil {
		return err
	}
	return p.Exec.Exec(ctx, target, psql, stdin, io.Discard)
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
