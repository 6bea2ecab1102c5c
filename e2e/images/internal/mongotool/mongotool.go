// Package mongotool is what the e2e MongoDB image's mongodump and
// mongorestore stand-ins share: the command-line forms onprem runs (and
// nothing else), the password file, the connection, and the archive.
//
// The archive is NOT MongoDB's archive format: it is a gzip stream of BSON
// documents, a header {"$collection": NAME} (a key no stored document can
// have) before each collection's documents. Indexes are not kept: the
// stand-ins prove that onprem runs the tools, authenticates, and moves a
// database's documents out and back whole; the real tools also keep
// indexes, options and users when asked.
package mongotool

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Args are a parsed command line.
type Args struct {
	Host, Port, Username, AuthDB, Config string
	// DB is --db (mongodump); NSInclude is --nsInclude DB.* (mongorestore).
	DB, NSInclude string
	// Archive is --archive=FILE; empty with ToStdio: --archive alone
	// (standard output or input).
	Archive string
	ToStdio bool
	Drop    bool
	Quiet   bool
}

// Parse reads argv. valued are the flags that take a value besides the
// connection's; booleans the flags without one (--gzip is required).
func Parse(argv []string, valued, booleans []string) (Args, error) {
	var a Args
	targets := map[string]*string{"--host": &a.Host, "--port": &a.Port, "--username": &a.Username,
		"--authenticationDatabase": &a.AuthDB, "--config": &a.Config}
	extra := map[string]*string{"--db": &a.DB, "--nsInclude": &a.NSInclude}
	for _, v := range valued {
		if p, ok := extra[v]; ok {
			targets[v] = p
		}
	}
	flags := map[string]*bool{"--drop": &a.Drop, "--quiet": &a.Quiet}
	allowed := map[string]bool{"--gzip": true}
	for _, b := range booleans {
		allowed[b] = true
	}
	gz := false
	for i := 0; i < len(argv); i++ {
		name, value, inline := strings.Cut(argv[i], "=")
		switch {
		case name == "--gzip" && !inline:
			gz = true
			continue
		case name == "--archive":
			if inline {
				a.Archive = value
			} else {
				a.ToStdio = true
			}
			continue
		}
		if b, ok := flags[name]; ok && allowed[name] && !inline {
			*b = true
			continue
		}
		p, ok := targets[name]
		if !ok {
			return a, fmt.Errorf("unsupported argument %q (this stand-in implements onprem's forms only)", argv[i])
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
	if a.Archive == "" && !a.ToStdio {
		return a, errors.New("--archive is required")
	}
	return a, nil
}

// Password reads the --config file: one line `password: "..."`.
func Password(path string) (string, error) {
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

// Connect connects as the arguments say.
func Connect(a Args) (*mongo.Client, error) {
	pw, err := Password(a.Config)
	if err != nil {
		return nil, err
	}
	return mongo.Connect(options.Client().SetHosts([]string{net.JoinHostPort(a.Host, a.Port)}).
		SetServerSelectionTimeout(30 * time.Second).
		SetAuth(options.Credential{Username: a.Username, Password: pw, AuthSource: a.AuthDB}))
}

// headerKey starts the header document of each collection.
const headerKey = "$collection"

// Write dumps every collection of db to w and returns how many documents
// it wrote.
func Write(ctx context.Context, w io.Writer, db *mongo.Database) (int, error) {
	names, err := db.ListCollectionNames(ctx, bson.D{})
	if err != nil {
		return 0, fmt.Errorf("listing the collections of %s: %w", db.Name(), err)
	}
	bw := bufio.NewWriter(w)
	zw := gzip.NewWriter(bw)
	n := 0
	for _, name := range names {
		header, err := bson.Marshal(bson.D{{Key: headerKey, Value: name}})
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

// Read calls collection for each collection header and doc for each
// document of the archive read from r, in order.
func Read(r io.Reader, collection func(string) error, doc func(bson.Raw) error) error {
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("not an archive of this stand-in: %w", err)
	}
	br := bufio.NewReader(zr)
	current := ""
	for {
		var size [4]byte
		if _, err := io.ReadFull(br, size[:]); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		n := binary.LittleEndian.Uint32(size[:])
		if n < 5 || n > 16<<20 {
			return fmt.Errorf("reading the archive: a document of %d bytes", n)
		}
		raw := make([]byte, n)
		copy(raw, size[:])
		if _, err := io.ReadFull(br, raw[4:]); err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		d := bson.Raw(raw)
		if err := d.Validate(); err != nil {
			return fmt.Errorf("reading the archive: %w", err)
		}
		if v, err := d.LookupErr(headerKey); err == nil {
			current = v.StringValue()
			if err := collection(current); err != nil {
				return err
			}
			continue
		}
		if current == "" {
			return errors.New("reading the archive: a document before any collection header")
		}
		if err := doc(d); err != nil {
			return err
		}
	}
}

// Fail prints a stand-in's error and exits with code.
func Fail(tool string, code int, err error) {
	fmt.Fprintf(os.Stderr, "%s (e2e stand-in): %v\n", tool, err)
	os.Exit(code)
}
