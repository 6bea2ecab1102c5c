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

// readArchive returns the documents of each collection in the archive.
func readArchive(t *testing.T, data []byte) map[string][]bson.Raw {
	t.Helper()
	out := map[string][]bson.Raw{}
	current := ""
	err := mongotool.Read(bytes.NewReader(data), func(c string) error {
		current = c
		out[c] = out[c]
		return nil
	}, func(d bson.Raw) error {
		out[current] = append(out[current], d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDumpWritesTheServicesDocuments(t *testing.T) {
	ctx := context.Background()
	addr := testservers.MongoDB(t, "root", "root-Secret-1")
	admin, err := mongo.Connect(options.Client().SetHosts([]string{addr}).
		SetAuth(options.Credential{Username: "root", Password: "root-Secret-1", AuthSource: "admin"}))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Disconnect(ctx)
	if err := admin.Database("svc").RunCommand(ctx, bson.D{{Key: "createUser", Value: "svc"}, {Key: "pwd", Value: "svc-Secret-1"}, {Key: "roles", Value: bson.A{}}}).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Database("svc").Collection("records").InsertMany(ctx, []any{bson.D{{Key: "k", Value: "a"}}, bson.D{{Key: "k", Value: "b"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Database("svc").Collection("other").InsertOne(ctx, bson.D{{Key: "k", Value: "c"}}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	cfg := filepath.Join(dir, "cfg")
	if err := os.WriteFile(cfg, []byte("password: \"svc-Secret-1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(addr)
	archive := filepath.Join(dir, "svc.archive.gz")
	// The upgrade backup Job's form: to a file.
	a, err := parseArgs([]string{"--host", host, "--port", port, "--username", "svc", "--authenticationDatabase", "svc",
		"--db", "svc", "--config", cfg, "--gzip", "--archive=" + archive})
	if err != nil {
		t.Fatal(err)
	}
	n, err := dump(ctx, a, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Errorf("dumped %d documents, want 3", n)
	}
	data, _ := os.ReadFile(archive)
	got := readArchive(t, data)
	if len(got["records"]) != 2 || len(got["other"]) != 1 {
		t.Fatalf("archive holds %v", got)
	}
	if v := got["other"][0].Lookup("k").StringValue(); v != "c" {
		t.Errorf("other[0].k = %q", v)
	}

	// A platform backup's form: to standard output, as the admin.
	if err := os.WriteFile(cfg, []byte("password: \"root-Secret-1\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a, err = parseArgs([]string{"--host", host, "--port", port, "--username", "root", "--authenticationDatabase", "admin",
		"--config", cfg, "--db", "svc", "--gzip", "--archive", "--quiet"})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if _, err := dump(ctx, a, &out); err != nil {
		t.Fatal(err)
	}
	if got := readArchive(t, out.Bytes()); len(got["records"]) != 2 {
		t.Fatalf("stdout archive holds %v", got)
	}

	// A wrong password fails and leaves no file.
	if err := os.WriteFile(cfg, []byte("password: \"wrong\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.archive.gz")
	a.Archive, a.ToStdio = bad, false
	if _, err := dump(ctx, a, nil); err == nil {
		t.Fatal("a wrong password dumped")
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Errorf("a failed dump left %s", bad)
	}
}

func TestOtherFormsAreRefused(t *testing.T) {
	full := []string{"--host", "h", "--port", "1", "--username", "u", "--authenticationDatabase", "d", "--db", "d", "--config", "c", "--gzip", "--archive=x"}
	if _, err := parseArgs(full); err != nil {
		t.Fatalf("the backup Job's form: %v", err)
	}
	for _, argv := range [][]string{
		nil,
		full[:len(full)-1], // no archive
		full[2:],           // no host
		append(append([]string{}, full...), "--out", "dir"),
		append(append([]string{}, full...), "--drop"),
		{"--uri", "mongodb://x", "--gzip"},
	} {
		if _, err := parseArgs(argv); err == nil {
			t.Errorf("%q accepted", argv)
		}
	}
}
