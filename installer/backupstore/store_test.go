//go:build linux

package backupstore

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"onprem.dev/onprem/e2e/testservers"
)

func put(t *testing.T, s Store, name string, data []byte) {
	t.Helper()
	u, err := s.Create(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := u.Commit(); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, s Store, name string) []byte {
	t.Helper()
	r, size, err := s.Open(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(data)) != size {
		t.Fatalf("%s: read %d bytes, size says %d", name, len(data), size)
	}
	return data
}

func listNames(t *testing.T, s Store) string {
	t.Helper()
	objs, err := s.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(names(objs), ",")
}

// exercise runs what every destination must do.
func exercise(t *testing.T, s Store) {
	ctx := context.Background()
	t0 := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	var made []string
	for i := range 3 {
		n := Name("onprem", t0.Add(time.Duration(i)*time.Hour))
		put(t, s, n, []byte("backup "+n))
		made = append(made, n)
	}
	put(t, s, Name("other", t0), []byte("another installation's"))
	if got := string(get(t, s, made[1])); got != "backup "+made[1] {
		t.Fatalf("read back %q", got)
	}
	if _, err := s.Create(ctx, made[0]); !errors.As(err, new(*ExistsError)) {
		t.Fatalf("creating an existing name: %v", err)
	}
	if _, _, err := s.Open(ctx, "onprem-20200101T000000Z.onprem-backup"); !errors.As(err, new(*NotFoundError)) || !strings.Contains(err.Error(), made[2]) {
		t.Fatalf("opening a missing backup: %v", err)
	}
	for _, bad := range []string{"../x.onprem-backup", "x.tar", ".hidden.onprem-backup", ""} {
		if _, err := s.Create(ctx, bad); err == nil {
			t.Fatalf("name %q was accepted", bad)
		}
	}

	// An aborted backup leaves nothing; neither does one never committed.
	u, err := s.Create(ctx, Name("onprem", t0.Add(5*time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, S3PartSize+1<<20) // more than one part
	_, _ = rand.Read(big)
	if _, err := u.Write(big); err != nil {
		t.Fatal(err)
	}
	u.Abort()
	u.Abort()
	want := strings.Join(append(append([]string{}, made...), Name("other", t0)), ",")
	if got := listNames(t, s); got != want {
		t.Fatalf("after an abort the destination holds %s, want %s", got, want)
	}

	latest, err := Latest(ctx, s, "onprem")
	if err != nil || latest.Name != made[2] {
		t.Fatalf("latest: %v %v", latest, err)
	}
	put(t, s, Name("zeta", t0.Add(-time.Hour)), []byte("an older backup of another installation"))
	if latest, err := Latest(ctx, s, ""); err != nil || latest.Name != made[2] {
		t.Fatalf("latest of all installations: %v %v (the newest by time, not by name)", latest, err)
	}
	if err := s.Delete(ctx, Name("zeta", t0.Add(-time.Hour))); err != nil {
		t.Fatal(err)
	}
	if _, err := Latest(ctx, s, "nobody"); !errors.As(err, new(*NotFoundError)) {
		t.Fatalf("latest of an installation with no backup: %v", err)
	}
	deleted, err := Prune(ctx, s, "onprem", 2, "")
	if err != nil || strings.Join(deleted, ",") != made[0] {
		t.Fatalf("prune to 2: deleted %v, %v", deleted, err)
	}
	if deleted, _ := Prune(ctx, s, "onprem", 1, made[1]); strings.Join(deleted, ",") != "" {
		t.Fatalf("prune deleted the protected backup: %v", deleted)
	}
	if err := s.Delete(ctx, made[1]); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, made[1]); err != nil {
		t.Fatalf("deleting a missing backup: %v", err)
	}
	if got := listNames(t, s); got != made[2]+","+Name("other", t0) {
		t.Fatalf("at the end: %s", got)
	}
}

func TestDir(t *testing.T) {
	d := Dir{Path: filepath.Join(t.TempDir(), "backups")}
	exercise(t, d)
	ents, _ := os.ReadDir(d.Path)
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), partialSuffix) {
			t.Fatalf("a partial file is left: %s", e.Name())
		}
	}
	st, _ := os.Stat(d.Path)
	if st.Mode().Perm() != 0o700 {
		t.Fatalf("the folder is %v, want 0700", st.Mode().Perm())
	}
}

// TestDirFull writes to a 2 MiB tmpfs: the error says the destination is
// full and nothing is left.
func TestDirFull(t *testing.T) {
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mounting a small tmpfs (the test needs root, as CI runs it): %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	d := Dir{Path: mnt}
	u, err := d.Create(context.Background(), Name("onprem", time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(u, io.LimitReader(rand.Reader, 4<<20))
	if err == nil || !strings.Contains(err.Error(), "destination is full") {
		t.Fatalf("writing 4 MiB into 2 MiB: %v", err)
	}
	u.Abort()
	ents, _ := os.ReadDir(mnt)
	if len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

func TestS3(t *testing.T) {
	srv := testservers.StartS3(t, testservers.S3Options{TLS: true})
	ctx := context.Background()
	s, err := NewS3(srv.Bucket, "team/prod", S3Options{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, CAFile: srv.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.String(), "s3://"+srv.Bucket+"/team/prod") || strings.Contains(s.String(), srv.SecretKey) {
		t.Fatalf("String: %s", s)
	}
	exercise(t, s)
	c := srv.Client(t)
	for up := range c.ListIncompleteUploads(ctx, srv.Bucket, "", true) {
		t.Fatalf("an incomplete upload is left after an abort: %+v", up)
	}
	// The objects are under the prefix.
	n := 0
	for o := range c.ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if !strings.HasPrefix(o.Key, "team/prod/") {
			t.Fatalf("object %s is outside the prefix", o.Key)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("%d objects in the bucket, want 2", n)
	}

	t.Run("refused credentials", func(t *testing.T) {
		bad, _ := NewS3(srv.Bucket, "", S3Options{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: "wrong-secret", CAFile: srv.CAFile})
		_, err := bad.List(ctx)
		if err == nil || !strings.Contains(err.Error(), "refused the credentials") || !strings.Contains(err.Error(), srv.Endpoint) || strings.Contains(err.Error(), "wrong-secret") {
			t.Fatalf("wrong credentials: %v", err)
		}
		if _, err := bad.Create(ctx, Name("onprem", time.Now())); err == nil {
			t.Fatal("wrong credentials: create succeeded")
		}
	})
	t.Run("missing bucket", func(t *testing.T) {
		nb, _ := NewS3("no-such-bucket", "", S3Options{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey, CAFile: srv.CAFile})
		u, err := nb.Create(ctx, Name("onprem", time.Now()))
		if err == nil {
			_, err = u.Write([]byte("x"))
			if err == nil {
				err = u.Commit()
			}
		}
		if err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("a missing bucket: %v", err)
		}
	})
	t.Run("untrusted certificate", func(t *testing.T) {
		nc, _ := NewS3(srv.Bucket, "", S3Options{Endpoint: srv.Endpoint, AccessKey: srv.AccessKey, SecretKey: srv.SecretKey})
		if _, err := nc.List(ctx); err == nil || !strings.Contains(err.Error(), "--s3-ca-file") {
			t.Fatalf("without the CA: %v", err)
		}
	})
	t.Run("credentials from the environment", func(t *testing.T) {
		t.Setenv(EnvAccessKey, srv.AccessKey)
		t.Setenv(EnvSecretKey, srv.SecretKey)
		env, err := NewS3(srv.Bucket, "team/prod", S3Options{Endpoint: srv.Endpoint, CAFile: srv.CAFile})
		if err != nil {
			t.Fatal(err)
		}
		if got := listNames(t, env); !strings.Contains(got, "other-") {
			t.Fatalf("list with the environment's credentials: %s", got)
		}
		t.Setenv(EnvAccessKey, "")
		if _, err := NewS3(srv.Bucket, "", S3Options{Endpoint: srv.Endpoint}); err == nil || !strings.Contains(err.Error(), EnvAccessKey) {
			t.Fatalf("no credentials: %v", err)
		}
	})
}

func TestParseS3(t *testing.T) {
	for in, want := range map[string][2]string{
		"s3://b":        {"b", ""},
		"s3://b/":       {"b", ""},
		"s3://b/x/y/":   {"b", "x/y"},
		"s3://b/prefix": {"b", "prefix"},
	} {
		b, p, err := ParseS3(in)
		if err != nil || b != want[0] || p != want[1] {
			t.Errorf("%s: %q %q %v", in, b, p, err)
		}
	}
	for _, bad := range []string{"s3://", "http://b", "b/x"} {
		if _, _, err := ParseS3(bad); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	if _, err := NewS3("b", "", S3Options{Endpoint: "s3.example.com"}); err == nil {
		t.Error("an endpoint without a scheme was accepted")
	}
	if _, err := NewS3("b", "", S3Options{}); err == nil {
		t.Error("no endpoint was accepted")
	}
}
