package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"onprem.dev/onprem/e2e/images/internal/mongotool"
	"onprem.dev/onprem/e2e/testservers"
)

// A dump restored drops what changed since, brings back what was deleted,
// and leaves collections the dump does not have.
func TestRestoreReplacesTheDumpedCollections(t *testing.T) {
	ctx := context.Background()
	addr := testservers.MongoDB(t, "root", "root-Secret-1")
	c, err := mongo.Connect(options.Client().SetHosts([]string{addr}).
		SetAuth(options.Credential{Username: "root", Password: "root-Secret-1", AuthSource: "admin"}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Disconnect(ctx)
	db := c.Database("svc")
	if _, err := db.Collection("records").InsertMany(ctx, []any{bson.D{{Key: "k", Value: "a"}}, bson.D{{Key: "k", Value: "b"}}}); err != nil {
		t.Fatal(err)
	}
	if err := db.CreateCollection(ctx, "empty"); err != nil {
		t.Fatal(err)
	}
	var archive bytes.Buffer
	if _, err := mongotool.Write(ctx, &archive, db); err != nil {
		t.Fatal(err)
	}
	// After the dump: one record gone, one added, the empty collection
	// dropped, a new collection made.
	if _, err := db.Collection("records").DeleteOne(ctx, bson.D{{Key: "k", Value: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("records").InsertOne(ctx, bson.D{{Key: "k", Value: "late"}}); err != nil {
		t.Fatal(err)
	}
	if err := db.Collection("empty").Drop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("newer").InsertOne(ctx, bson.D{{Key: "k", Value: "n"}}); err != nil {
		t.Fatal(err)
	}

	cfg := filepath.Join(t.TempDir(), "cfg")
	if err := os.WriteFile(cfg, []byte("password: \"root-Secret-1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	a, name, err := parseArgs([]string{"--host", host, "--port", port, "--username", "root", "--authenticationDatabase", "admin",
		"--config", cfg, "--nsInclude", "svc.*", "--drop", "--gzip", "--archive", "--quiet"})
	if err != nil {
		t.Fatal(err)
	}
	n, err := restore(ctx, a, name, &archive)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("restored %d documents, want 2", n)
	}
	var got []string
	cur, err := db.Collection("records").Find(ctx, bson.D{}, options.Find().SetSort(bson.D{{Key: "k", Value: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	for cur.Next(ctx) {
		got = append(got, cur.Current.Lookup("k").StringValue())
	}
	if len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("records after the restore: %v", got)
	}
	names, _ := db.ListCollectionNames(ctx, bson.D{})
	has := map[string]bool{}
	for _, n := range names {
		has[n] = true
	}
	if !has["empty"] || !has["newer"] {
		t.Fatalf("collections after the restore: %v", names)
	}
	if _, err := restore(ctx, a, name, bytes.NewReader([]byte("not an archive"))); err == nil {
		t.Fatal("a damaged archive was restored")
	}
}

func TestOtherFormsAreRefused(t *testing.T) {
	full := []string{"--host", "h", "--port", "1", "--username", "u", "--authenticationDatabase", "admin", "--config", "c",
		"--nsInclude", "d.*", "--drop", "--gzip", "--archive"}
	if _, _, err := parseArgs(full); err != nil {
		t.Fatalf("the restore's form: %v", err)
	}
	for _, argv := range [][]string{
		nil,
		{"--host", "h", "--port", "1", "--username", "u", "--authenticationDatabase", "admin", "--config", "c", "--nsInclude", "d.c", "--drop", "--gzip", "--archive"},
		{"--host", "h", "--port", "1", "--username", "u", "--authenticationDatabase", "admin", "--config", "c", "--nsInclude", "d.*", "--gzip", "--archive"},
		{"--host", "h", "--port", "1", "--username", "u", "--authenticationDatabase", "admin", "--config", "c", "--nsInclude", "d.*", "--drop", "--gzip", "--archive=f"},
		append(append([]string{}, full...), "--db", "x"),
	} {
		if _, _, err := parseArgs(argv); err == nil {
			t.Errorf("%q accepted", argv)
		}
	}
}
