// Command mongorestore stands in for MongoDB's restore tool in the e2e
// MongoDB image (installed as /usr/local/bin/mongorestore), for the one
// form a platform restore runs (installer/dbdump):
//
//	mongorestore --host H --port P --username U --authenticationDatabase admin \
//	  --config FILE --nsInclude 'DB.*' --drop --gzip --archive --quiet
//
// It reads the mongodump stand-in's archive (e2e/images/internal/mongotool)
// on standard input and, like the real tool with --drop, drops each
// collection of the archive before inserting its documents (collections
// not in the archive are left alone). Any other form exits 2.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"onprem.dev/onprem/e2e/images/internal/mongotool"
)

const tool = "mongorestore"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a, db, err := parseArgs(os.Args[1:])
	if err != nil {
		mongotool.Fail(tool, 2, err)
	}
	n, err := restore(ctx, a, db, os.Stdin)
	if err != nil {
		mongotool.Fail(tool, 1, err)
	}
	if !a.Quiet {
		fmt.Fprintf(os.Stderr, "mongorestore (e2e stand-in): %d document(s) restored into database %s\n", n, db)
	}
}

// parseArgs accepts the restore's form and returns the database it names.
func parseArgs(argv []string) (mongotool.Args, string, error) {
	a, err := mongotool.Parse(argv, []string{"--nsInclude"}, []string{"--drop", "--quiet"})
	if err != nil {
		return a, "", err
	}
	db, ok := strings.CutSuffix(a.NSInclude, ".*")
	if !ok || db == "" || strings.ContainsAny(db, ".*") {
		return a, "", fmt.Errorf("--nsInclude %q: this stand-in restores one whole database, DB.*", a.NSInclude)
	}
	if !a.ToStdio || !a.Drop {
		return a, "", errors.New("this stand-in reads --archive from standard input, with --drop")
	}
	return a, db, nil
}

// batch is how many documents are inserted at once.
const batch = 500

func restore(ctx context.Context, a mongotool.Args, name string, r io.Reader) (int, error) {
	client, err := mongotool.Connect(a)
	if err != nil {
		return 0, err
	}
	defer client.Disconnect(context.WithoutCancel(ctx))
	db := client.Database(name)
	var coll *mongo.Collection
	var pending []any
	n := 0
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		if _, err := coll.InsertMany(ctx, pending); err != nil {
			return fmt.Errorf("inserting into %s.%s: %w", name, coll.Name(), err)
		}
		n += len(pending)
		pending = pending[:0]
		return nil
	}
	err = mongotool.Read(r, func(c string) error {
		if coll != nil {
			if err := flush(); err != nil {
				return err
			}
		}
		coll = db.Collection(c)
		if err := coll.Drop(ctx); err != nil {
			return fmt.Errorf("dropping %s.%s: %w", name, c, err)
		}
		// An empty collection exists after the restore as it did before.
		if err := db.CreateCollection(ctx, c); err != nil && !isExists(err) {
			return fmt.Errorf("creating %s.%s: %w", name, c, err)
		}
		return nil
	}, func(d bson.Raw) error {
		pending = append(pending, d)
		if len(pending) >= batch {
			return flush()
		}
		return nil
	})
	if err != nil {
		return n, err
	}
	if coll != nil {
		if err := flush(); err != nil {
			return n, err
		}
	}
	return n, nil
}

func isExists(err error) bool {
	var ce mongo.CommandError
	return errors.As(err, &ce) && (ce.Code == 48 || ce.Name == "NamespaceExists")
}
