// Command mongodump stands in for MongoDB's dump tool in the e2e MongoDB
// image (installed as /usr/local/bin/mongodump). No MongoDB tools build is
// reachable offline (github.com/mongodb/mongo-tools is not served by the
// module proxy), and onprem runs exactly two forms of it:
//
//	# the upgrade's backup Job (installer/render, backupScripts)
//	mongodump --host H --port P --username U --authenticationDatabase DB \
//	  --db DB --config FILE --gzip --archive=FILE
//	# a platform backup (installer/dbdump), to standard output
//	mongodump --host H --port P --username U --authenticationDatabase admin \
//	  --config FILE --db DB --gzip --archive --quiet
//
// where FILE holds `password: "..."` (so the password is on no command
// line). This program accepts those forms and nothing else (exit 2), and
// dumps every collection of the database in the stand-ins' own archive
// format (e2e/images/internal/mongotool), which the mongorestore stand-in
// reads.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"onprem.dev/onprem/e2e/images/internal/mongotool"
)

const tool = "mongodump"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := parseArgs(os.Args[1:])
	if err != nil {
		mongotool.Fail(tool, 2, err)
	}
	n, err := dump(ctx, a, os.Stdout)
	if err != nil {
		mongotool.Fail(tool, 1, err)
	}
	if !a.Quiet {
		fmt.Fprintf(os.Stderr, "mongodump (e2e stand-in): %d document(s) of database %s written\n", n, a.DB)
	}
}

func parseArgs(argv []string) (mongotool.Args, error) {
	return mongotool.Parse(argv, []string{"--db"}, []string{"--quiet"})
}

// dump writes the archive to a.Archive (whole or not at all) or to stdout.
func dump(ctx context.Context, a mongotool.Args, stdout io.Writer) (int, error) {
	client, err := mongotool.Connect(a)
	if err != nil {
		return 0, err
	}
	defer client.Disconnect(context.WithoutCancel(ctx))
	db := client.Database(a.DB)
	if a.ToStdio {
		return mongotool.Write(ctx, stdout, db)
	}
	f, err := os.Create(a.Archive)
	if err != nil {
		return 0, err
	}
	n, err := mongotool.Write(ctx, f, db)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(a.Archive)
		return 0, err
	}
	return n, nil
}
