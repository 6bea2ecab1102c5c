// Command postgres-entrypoint is the entrypoint of the e2e PostgreSQL
// image (installed as /usr/local/bin/docker-entrypoint.sh). It honours the
// part of the official postgres image's contract that the postgresql chart
// relies on:
//
//   - an empty PGDATA (default /var/lib/postgresql/data; the chart sets a
//     folder below the volume's root) is initialised on the first start:
//     initdb with POSTGRES_USER (default postgres) as the superuser whose
//     password is POSTGRES_PASSWORD (or the file POSTGRES_PASSWORD_FILE
//     names), then the database POSTGRES_DB (default: the user's name),
//     then the *.sql and *.sh files of /docker-entrypoint-initdb.d;
//   - every TCP client must authenticate (scram-sha-256, or
//     POSTGRES_HOST_AUTH_METHOD), on every address (listen_addresses '*');
//     the Unix socket in /var/run/postgresql trusts local users, as in the
//     official image;
//   - during the initialisation the server listens on a private socket
//     only, so the chart's TCP probes fail until the real server is up;
//   - then it replaces itself with postgres ("postgres" or flags as
//     arguments; any other command is run as it is);
//   - started as root it gives PGDATA to the postgres user and becomes
//     that user (the chart starts it as uid 999 directly).
//
// An existing database is never touched: the variables only matter on the
// first start.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"onprem.dev/onprem/e2e/images/internal/entry"
)

func main() {
	args := os.Args[1:]
	if len(args) == 0 {
		args = []string{"postgres"}
	}
	if strings.HasPrefix(args[0], "-") {
		args = append([]string{"postgres"}, args...)
	}
	if args[0] != "postgres" {
		if err := entry.Exec(args, os.Environ()); err != nil {
			entry.Fail("%v", err)
		}
	}
	if err := server(args); err != nil {
		entry.Fail("%v", err)
	}
}

func server(args []string) error {
	pgdata := os.Getenv("PGDATA")
	if pgdata == "" {
		pgdata = "/var/lib/postgresql/data"
		os.Setenv("PGDATA", pgdata)
	}
	if entry.IsRoot() {
		u, err := entry.LookupUser("postgres")
		if err != nil {
			return err
		}
		if err := entry.StepDown(u, pgdata, "/var/run/postgresql"); err != nil {
			return fmt.Errorf("becoming the postgres user: %w", err)
		}
	}
	if st, err := os.Stat(filepath.Join(pgdata, "PG_VERSION")); err != nil || st.Size() == 0 {
		if err := initialize(pgdata); err != nil {
			return fmt.Errorf("initialising the database in %s: %w", pgdata, err)
		}
	} else {
		entry.Logf("PGDATA %s holds a database: starting it as it is", pgdata)
	}
	return entry.Exec(args, entry.EnvWithout("POSTGRES_PASSWORD"))
}

func initialize(pgdata string) error {
	user := os.Getenv("POSTGRES_USER")
	if user == "" {
		user = "postgres"
	}
	password, err := entry.Env("POSTGRES_PASSWORD")
	if err != nil {
		return err
	}
	method := os.Getenv("POSTGRES_HOST_AUTH_METHOD")
	if method == "" {
		method = "scram-sha-256"
	}
	if strings.ContainsAny(method, " \t\n") {
		return fmt.Errorf("POSTGRES_HOST_AUTH_METHOD=%q is not an authentication method (scram-sha-256, md5, trust, ...)", method)
	}
	if password == "" && method != "trust" {
		return fmt.Errorf("the database is not initialised and POSTGRES_PASSWORD is empty: set POSTGRES_PASSWORD " +
			"(the postgresql chart takes it from the Secret named by global.databases.postgresql.secretName), " +
			"or POSTGRES_HOST_AUTH_METHOD=trust to let every client in without a password")
	}
	db := os.Getenv("POSTGRES_DB")
	if db == "" {
		db = user
	}

	if err := os.MkdirAll(pgdata, 0o700); err != nil {
		return fmt.Errorf("creating PGDATA (the data volume must be writable by uid %d, e.g. through the pod's fsGroup): %w", os.Getuid(), err)
	}
	st, err := os.Stat(pgdata)
	if err != nil {
		return err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && int(sys.Uid) != os.Getuid() {
		return fmt.Errorf("PGDATA %s belongs to uid %d, but postgres runs as uid %d and must own it: "+
			"point PGDATA at a folder below the volume's root", pgdata, sys.Uid, os.Getuid())
	}
	if err := os.Chmod(pgdata, 0o700); err != nil {
		return fmt.Errorf("chmod 0700 PGDATA: %w", err)
	}

	tmp, err := os.MkdirTemp("", "pg-init-")
	if err != nil {
		return fmt.Errorf("a temporary folder (the image needs a writable /tmp): %w", err)
	}
	defer os.RemoveAll(tmp)

	initdb := []string{"initdb", "--username=" + user, "--pgdata=" + pgdata,
		"--auth-local=trust", "--auth-host=" + method, "--encoding=UTF8", "--locale=C.UTF-8"}
	if password != "" {
		pwfile := filepath.Join(tmp, "pwfile")
		if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
			return err
		}
		initdb = append(initdb, "--pwfile="+pwfile)
	}
	initdb = append(initdb, strings.Fields(os.Getenv("POSTGRES_INITDB_ARGS"))...)
	entry.Logf("initialising a database in %s for the superuser %s", pgdata, user)
	if err := run(nil, initdb...); err != nil {
		return err
	}
	if err := appendFile(filepath.Join(pgdata, "pg_hba.conf"),
		"\n# Added by the image's entrypoint: TCP clients from anywhere authenticate.\nhost all all all "+method+"\n"); err != nil {
		return err
	}
	if err := appendFile(filepath.Join(pgdata, "postgresql.conf"),
		"\n# Added by the image's entrypoint.\nlisten_addresses = '*'\n"); err != nil {
		return err
	}

	scripts, err := initScripts("/docker-entrypoint-initdb.d")
	if err != nil {
		return err
	}
	if db == "postgres" && len(scripts) == 0 {
		return nil
	}
	// A server on a private socket and no TCP: nothing else can connect
	// while the database is being set up.
	opts := "-c listen_addresses='' -c unix_socket_directories='" + tmp + "'"
	if err := run(nil, "pg_ctl", "--pgdata="+pgdata, "-w", "-t", "120", "-o", opts, "start"); err != nil {
		return fmt.Errorf("starting a temporary server: %w", err)
	}
	env := []string{"PGHOST=" + tmp, "PGUSER=" + user, "PGDATABASE=" + db}
	psql := func(dbname string, args ...string) error {
		return run(env, append([]string{"psql", "-v", "ON_ERROR_STOP=1", "--no-psqlrc", "--quiet", "--dbname=" + dbname}, args...)...)
	}
	setup := func() error {
		if db != "postgres" {
			entry.Logf("creating the database %s", db)
			if err := psql("postgres", "-c", "CREATE DATABASE "+quoteIdent(db)); err != nil {
				return err
			}
		}
		for _, s := range scripts {
			entry.Logf("running %s", s)
			var err error
			if strings.HasSuffix(s, ".sql") {
				err = psql(db, "-f", s)
			} else {
				err = run(env, "sh", s)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	setupErr := setup()
	if err := run(nil, "pg_ctl", "--pgdata="+pgdata, "-m", "fast", "-w", "stop"); err != nil && setupErr == nil {
		return fmt.Errorf("stopping the temporary server: %w", err)
	}
	return setupErr
}

// initScripts lists the *.sql and *.sh files of dir, sorted.
func initScripts(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".sql", ".sh":
			out = append(out, filepath.Join(dir, e.Name()))
		default:
			entry.Logf("ignoring %s (only *.sql and *.sh are run)", filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(out)
	return out, nil
}

// run runs a command with the entrypoint's output and env added to the
// environment.
func run(env []string, argv ...string) error {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.Env = append(entry.EnvWithout("POSTGRES_PASSWORD"), env...)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", argv[0], err)
	}
	return nil
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// quoteIdent quotes a PostgreSQL identifier.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
