package action

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/backup/backuptest"
	"onprem.dev/onprem/installer/backupfile"
)

// The benchmark's dataset: about 290 MB across two PostgreSQL and two
// MongoDB databases of the platform (about 170 MB of compressed dumps):
// random text and random base64, which compress little.
const (
	benchPGRows    = 100000 // per PostgreSQL database, 1 KiB of hex each
	benchMongoDocs = 2500   // per MongoDB database, 16 KiB of base64 each
)

// BenchmarkBackupAndRestore backs up and restores that dataset with onprem
// (BackupCreate to a folder, encrypted; Restore into the installed
// platform) and with the engines' own tools run by hand on the same
// servers in the same run (pg_dump --format=custom and mongodump --gzip
// into files; pg_restore and mongorestore from them), and reports each
// time per operation and onprem's overhead: onprem-backup/tools-dump and
// onprem-restore/tools-restore (goal: at most 1.25), and the restore's data
// phase alone (onprem's restore also runs the preflight checks, stops the
// services and provisions the users again, and starts the services: a
// fixed cost of a few seconds). The integration ring
// runs the databases on this machine (backuptest), so the overhead is
// onprem's own (encryption, checksums, the archive, the lock and the
// record, stopping and starting the services for a restore), not the API
// server's streaming.
func BenchmarkBackupAndRestore(b *testing.B) {
	a := benchPlatform(b)
	ctx := context.Background()
	var dumpT, backupT, restoreToolsT, restoreT, dataT time.Duration
	var dataset, backupSize int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		t0 := time.Now()
		dataset = bareDump(b, a, dir)
		dumpT += time.Since(t0)

		t0 = time.Now()
		res, err := (&BackupCreate{Target: Target{Cluster: a.cl, Namespace: "onprem"}, Destination: BackupDestination{To: filepath.Join(dir, "onprem")},
			Keys: backupfile.Keys{RecipientFiles: []string{a.keys.RecipientFile}}, Exec: a.exec}).Run(ctx)
		if err != nil {
			b.Fatal(err)
		}
		backupT += time.Since(t0)
		backupSize = res.Size

		// The two restores alternate which goes first: the second replaces
		// data the first has just written, which costs the database more.
		toolsRestore := func() {
			t0 := time.Now()
			bareRestore(b, a, dir)
			restoreToolsT += time.Since(t0)
		}
		if i%2 == 0 {
			toolsRestore()
		}
		t0 = time.Now()
		last := t0
		phases := map[string]time.Duration{}
		phase := "open and verify"
		if _, err := (&Restore{Cluster: a.cl, From: filepath.Join(dir, "onprem", res.Name), Keys: backupfile.Keys{IdentityFiles: []string{a.keys.IdentityFile}},
			Force: true, Confirmed: true, Exec: a.exec, Timeout: 3 * time.Minute,
			Progress: func(p backup.Progress) {
				if p.Phase == backup.PhaseDone && i == 0 {
					b.Logf("restored %-40s %6.2f s", p.Item, p.Elapsed.Seconds())
				}
				if p.Phase == backup.PhaseProgress {
					phases[phase] += time.Since(last)
					phase, last = p.Message, time.Now()
				}
			}}).Run(ctx); err != nil {
			b.Fatal(err)
		}
		phases[phase] += time.Since(last)
		restoreT += time.Since(t0)
		for p, d := range phases {
			b.Logf("restore phase %-60s %6.2f s", p, d.Seconds())
		}
		dataT += phases["restoring the databases"]
		if i%2 == 1 {
			toolsRestore()
		}
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(float64(dataset)/(1<<20), "MB-dumps")
	b.ReportMetric(float64(backupSize)/(1<<20), "MB-backup")
	b.ReportMetric(dumpT.Seconds()/n, "s-tools-dump")
	b.ReportMetric(backupT.Seconds()/n, "s-onprem-backup")
	b.ReportMetric(restoreToolsT.Seconds()/n, "s-tools-restore")
	b.ReportMetric(restoreT.Seconds()/n, "s-onprem-restore")
	b.ReportMetric(dataT.Seconds()/n, "s-onprem-restore-data")
	b.ReportMetric(backupT.Seconds()/dumpT.Seconds(), "x-backup-overhead")
	b.ReportMetric(restoreT.Seconds()/restoreToolsT.Seconds(), "x-restore-overhead")
	b.ReportMetric(dataT.Seconds()/restoreToolsT.Seconds(), "x-restore-data-overhead")
}

// benchPlatform installs the platform on the integration ring and fills
// its databases (real servers on loopback) with the dataset.
func benchPlatform(b *testing.B) *backedUp {
	b.Helper()
	ctx := context.Background()
	a := &backedUp{c: testcluster.Start(b), servers: backuptest.Start(b)}
	a.exec = backuptest.NewExec(b, a.servers)
	a.src, a.cl = clusterConfig(b, a.c, smallPlatform)
	if _, err := (&Install{Source: a.src, Cluster: a.cl, Timeout: 3 * time.Minute}).Run(ctx); err != nil {
		b.Fatal(err)
	}
	a.pg, a.mg = []string{"analytics_reporter", "audit_manager"}, []string{"cron_executor", "gitops_api"}
	a.servers.Provision(b, a.pg, a.mg)
	for _, db := range a.pg {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s:%s@%s/%s?sslmode=disable", a.servers.PGUser, a.servers.PGPass, a.servers.PostgreSQL, db))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, `CREATE TABLE builds (id int PRIMARY KEY, log text NOT NULL)`); err != nil {
			b.Fatal(err)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(`INSERT INTO builds SELECT g,
			(SELECT string_agg(md5(random()::text || g::text || s::text), '') FROM generate_series(1, 32) s)
			FROM generate_series(1, %d) g`, benchPGRows)); err != nil {
			b.Fatal(err)
		}
		conn.Close(ctx)
	}
	mc, err := mongo.Connect(options.Client().SetHosts([]string{a.servers.MongoDB}).SetDirect(true).
		SetAuth(options.Credential{Username: a.servers.MongoUser, Password: a.servers.MongoPass, AuthSource: "admin"}))
	if err != nil {
		b.Fatal(err)
	}
	defer mc.Disconnect(ctx)
	random := make([]byte, 12<<10)
	for _, db := range a.mg {
		coll := mc.Database(db).Collection("builds")
		var docs []any
		for i := range benchMongoDocs {
			_, _ = rand.Read(random)
			log := base64.StdEncoding.EncodeToString(random)
			docs = append(docs, bson.D{{Key: "_id", Value: i}, {Key: "log", Value: log}})
			if len(docs) == 250 {
				if _, err := coll.InsertMany(ctx, docs); err != nil {
					b.Fatal(err)
				}
				docs = docs[:0]
			}
		}
	}
	if a.keys, err = backupfile.Keygen(b.TempDir()); err != nil {
		b.Fatal(err)
	}
	return a
}

// bareDump runs the engines' tools by hand into files of dir, one database
// after the other, and returns the dumps' total size.
func bareDump(b *testing.B, a *backedUp, dir string) int64 {
	b.Helper()
	pgHost, pgPort, _ := net.SplitHostPort(a.servers.PostgreSQL)
	mHost, mPort, _ := net.SplitHostPort(a.servers.MongoDB)
	cfg := mongoConfig(b, a, dir)
	var total int64
	for _, db := range a.pg {
		out := filepath.Join(dir, db+".pgdump")
		tool(b, a, nil, "pg_dump", "--host="+pgHost, "--port="+pgPort, "--username="+a.servers.PGUser, "--no-password",
			"--dbname="+db, "--format=custom", "--file="+out)
		total += size(b, out)
	}
	for _, db := range a.mg {
		out := filepath.Join(dir, db+".archive.gz")
		tool(b, a, nil, "mongodump", "--host", mHost, "--port", mPort, "--username", a.servers.MongoUser, "--authenticationDatabase", "admin",
			"--config", cfg, "--db", db, "--gzip", "--archive="+out)
		total += size(b, out)
	}
	return total
}

// bareRestore restores bareDump's files with the engines' tools by hand.
func bareRestore(b *testing.B, a *backedUp, dir string) {
	b.Helper()
	pgHost, pgPort, _ := net.SplitHostPort(a.servers.PostgreSQL)
	mHost, mPort, _ := net.SplitHostPort(a.servers.MongoDB)
	cfg := mongoConfig(b, a, dir)
	for _, db := range a.pg {
		tool(b, a, nil, "pg_restore", "--host="+pgHost, "--port="+pgPort, "--username="+a.servers.PGUser, "--no-password",
			"--dbname="+db, "--clean", "--if-exists", "--single-transaction", "--exit-on-error", filepath.Join(dir, db+".pgdump"))
	}
	for _, db := range a.mg {
		f, err := os.Open(filepath.Join(dir, db+".archive.gz"))
		if err != nil {
			b.Fatal(err)
		}
		tool(b, a, f, "mongorestore", "--host", mHost, "--port", mPort, "--username", a.servers.MongoUser, "--authenticationDatabase", "admin",
			"--config", cfg, "--nsInclude", db+".*", "--drop", "--gzip", "--archive", "--quiet")
		f.Close()
	}
}

func mongoConfig(b *testing.B, a *backedUp, dir string) string {
	b.Helper()
	cfg := filepath.Join(dir, "mongo.cfg")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "password: %q\n", a.servers.MongoPass), 0o600); err != nil {
		b.Fatal(err)
	}
	return cfg
}

func tool(b *testing.B, a *backedUp, stdin io.Reader, name string, args ...string) {
	b.Helper()
	cmd := a.exec.Command(context.Background(), name, args...)
	cmd.Env = append(cmd.Env, "PGPASSWORD="+a.servers.PGPass)
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("%s: %v\n%s", name, err, stderr.String())
	}
}

func size(b *testing.B, path string) int64 {
	b.Helper()
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}
