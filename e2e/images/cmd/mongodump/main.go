// Command mongodump stands in for MongoDB's dump tool in the e2e MongoDB
// image (installed as /usr/local/bin/mongodump). No MongoDB tools build is
// reachable offline, and the upgrade's backup Job (installer/render,
// backupScripts) runs exactly one form of it:
//
//	mongodump --host H --port P --username U --authenticationDatabase DB \
//	  --db DB --config FILE --gzip --archive=FILE
//
// where FILE holds `password: "..."` (so the password is on no command
// line). This program accepts that form and nothing else (exit 2), and
// dumps every collection of the database.
//
// The archive is NOT mongodump's archive format: it is a gzip stream of
// BSON documents, a header {collection: NAME} before each collection's
// documents. It proves that the backup Job runs, authenticates as the
// service, reads the service's data and writes a whole file to the backup
// volume; restoring from it is not something the platform does by itself.
package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "mongodump (e2e stand-in): %v\n", err)
		os.Exit(2)
	}
	n, err := dump(ctx, a)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mongodump (e2e stand-in): %v\n", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "mongodump (e2e stand-in): %d document(s) of database %s written to %s\n", n, a.db, a.archive)
}

type args struct {
	host, port, username, authDB, db, config, archive string
}

// parseArgs accepts the backup Job's form; every listed flag is required.
func parseArgs(argv []string) (args, error) {
	var a args
	gz := false
	targets := map[string]*string{
		"--host": &a.host, "--port": &a.port, "--username": &a.username,
		"--authenticationDatabase": &a.authDB, "--db": &a.db, "--config": &a.config, "--archive": &a.archive,
	}
	for i := 0; i < len(argv); i++ {
		name, value, inline := strings.Cut(argv[i], "=")
		if name == "--gzip" && !inline {
			gz = true
			continue
		}
		p, ok := targets[name]
		if !ok {
			return a, fmt.Errorf("unsupported argument %q (this stand-in implements the upgrade backup's form only)", argv[i])
		}
		if !inline {
			if i+1 >= len(argv) {
				return a, fmt.Errorf("%s needs a value", name)
			}
			i++
			value = argv[i]
		}
		*p = value
	}
	for name, p := range targets {
		if *p == "" {
			return a, fmt.Errorf("%s is required", name)
		}
	}
	if !gz {
		return a, errors.New("--gzip is required")
	}
	return a, nil
}

// password reads the --config file: one line `password: "..."`.
func password(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--config: %w", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "password:"); ok {
			v = strings.TrimSpace(v)
			if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
				v = v[1 : len(v)-1]
			}
			if v != "" {
				return v, nil
			}
		}
	}
	return "", errors.New("--config: no password line")
}

func dump(ctx context.Context, a args) (int, error) {
	pw, err := password(a.config)
	if err != nil {
		return 0, err
	}
	client, err := mongo.Connect(options.Client().SetHosts([]string{net.JoinHostPort(a.host, a.port)}).
		SetServerSelectionTimeout(30 * time.Second).
		SetAuth(options.Credential{Username: a.username, Password: pw, AuthSource: a.authDB}))
	if err != nil {
		return 0, err
	}
	defer client.Disconnect(context.WithoutCancel(ctx))
	db := client.Database(a.db)
	names, err := db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return 0, fmt.Errorf("listing the collections of %s: %w", a.db, err)
	}
	f, err := os.Create(a.archive)
	if err != nil {
		return 0, err
	}
	n, err := write(ctx, f, db, names)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(a.archive)
		return 0, err
	}
	return n, nil
}

func write(ctx context.Context, w io.Writer, db *mongo.Database, names []string) (int, error) {
	bw := bufio.NewWriter(w)
	zw := gzip.NewWriter(bw)
	n := 0
	for _, name := range names {
		header, err := bson.Marshal(bson.D{{Key: "collection", Value: name}})
		if err != nil {
			return n, err
		}
		if _, err := zw.Write(header); err != nil {
			return n, err
		}
		cur, err := db.Collection(name).Find(ctx, bson.D{})
		if err != nil {
			return n, fmt.Errorf("reading %s: %w", name, err)
		}
		for cur.Next(ctx) {
			if _, err := zw.Write(cur.Current); err != nil {
				cur.Close(ctx)
				return n, err
			}
			n++
		}
		err = cur.Err()
		cur.Close(ctx)
		if err != nil {
			return n, fmt.Errorf("reading %s: %w", name, err)
		}
	}
	if err := zw.Close(); err != nil {
		return n, err
	}
	return n, bw.Flush()
}
