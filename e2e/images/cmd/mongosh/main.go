// Command mongosh stands in for MongoDB's shell in the e2e MongoDB image
// (installed as /usr/local/bin/mongosh). No mongosh build is reachable
// offline, and onprem runs exactly two scripts with it:
//
//	mongosh --nodb --norc --quiet --file .../mongodb-provision.js
//	mongosh --nodb --norc --quiet --file .../mongodb-admin.js
//
// the db-provision chart's, and the one onprem rotate credentials runs to
// alternate the admin (installer/rotate/mongodb-admin.js: grant or revoke
// a root user, see admin.go). This program does what those scripts do,
// with the same inputs and the same log lines, and nothing else: any
// other invocation exits 2, so a
// chart that starts using mongosh differently fails loudly here instead of
// passing against a program that ignored it.
//
// Inputs, as for the script:
//   - the services, one per line, in /etc/onprem/db-provision/mongodb-services;
//   - each service's user, password and database in
//     /var/run/onprem/mongodb/<service>/{username,password,database};
//   - MONGODB_HOST, MONGODB_PORT, MONGODB_TLS ("true": TLS),
//     MONGODB_REPLICA_SET (the host is a seed of that set), and the admin's
//     MONGODB_ADMIN_USERNAME and MONGODB_ADMIN_PASSWORD (authSource admin);
//   - ONPREM_SERVICES_FILE and ONPREM_SECRETS_DIR, when set, in place of the
//     two paths above (onprem rotate credentials).
//
// One difference, forced by the server it is paired with: FerretDB v1
// refuses roles other than none (its users may do anything), so users are
// created with no roles where the script gives readWrite on the service's
// database. An existing user gets the Secret's password again.
//
// No credential is ever printed.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// script and adminScript are the only files this stand-in agrees to
// "run": the db-provision chart's, and onprem rotate's (installer/rotate).
const (
	script      = "mongodb-provision.js"
	adminScript = "mongodb-admin.js"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// run is the whole program: exit 0 when every service is provisioned, 1
// when provisioning failed, 2 when invoked in a way it does not implement.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	file, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "mongosh (e2e stand-in): %v\n", err)
		return 2
	}
	switch filepath.Base(file) {
	case script:
	case adminScript:
		return runAdmin(ctx, getenv, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "mongosh (e2e stand-in): only runs %s and %s, not %s\n", script, adminScript, file)
		return 2
	}
	p := &provisioner{
		servicesFile: orDefault(getenv("ONPREM_SERVICES_FILE"), "/etc/onprem/db-provision/mongodb-services"),
		secretsDir:   orDefault(getenv("ONPREM_SECRETS_DIR"), "/var/run/onprem/mongodb"),
		getenv:       getenv,
		attempts:     60,
		pause:        5 * time.Second,
		out:          stdout,
	}
	if err := p.run(ctx); err != nil {
		p.log("failed: %v", err)
		return 1
	}
	return 0
}

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// parseArgs accepts the flags the chart passes and returns the script.
// --nodb is required: the script connects by itself.
func parseArgs(args []string) (string, error) {
	var file string
	nodb := false
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "--nodb":
			nodb = true
		case "--norc", "--quiet":
		case "--file", "-f":
			if i+1 >= len(args) {
				return "", errors.New("--file needs a path")
			}
			i++
			file = args[i]
		default:
			return "", fmt.Errorf("unsupported argument %q (supported: --nodb --norc --quiet --file FILE)", a)
		}
	}
	if !nodb {
		return "", errors.New("--nodb is required: the script connects by itself")
	}
	if file == "" {
		return "", errors.New("--file FILE is required")
	}
	return file, nil
}
