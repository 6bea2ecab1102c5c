package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"onprem.dev/onprem/installer/backupfile"
)

// A backup file made without a cluster, as 'backup create' writes them.
func writeBackup(t *testing.T, dir, recipientFile string) string {
	t.Helper()
	rcp, err := backupfile.Keys{RecipientFiles: []string{recipientFile}}.EncryptTo()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "onprem-20261124T020000Z.onprem-backup")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w, err := backupfile.NewWriter(f, rcp, backupfile.Header{Installation: "onprem", Namespace: "onprem", Version: "2.8.0", Installer: "0.1.0", Trigger: "manual"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []struct{ name, kind, content string }{
		{"config/onprem.yaml", backupfile.KindConfig, "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n"},
		{"state.json", backupfile.KindState, `{"version":"2.8.0"}`},
		{"secrets.json", backupfile.KindSecrets, `[{"namespace":"onprem","name":"onprem-redis","type":"Opaque","data":{"password":"c2VjcmV0LXZhbHVlLTEyMzQ1Njc4OTA="}}]`},
		{"registrations.json", backupfile.KindRegistrations, "{}"},
	} {
		if _, err := w.Add(backupfile.Entry{Name: e.name, Kind: e.kind}, []byte(e.content)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.AddStream(backupfile.Entry{Name: "databases/postgresql/audit_manager.pgdump", Kind: backupfile.KindDatabase, Engine: "postgresql", Database: "audit_manager"},
		strings.NewReader(strings.Repeat("dump ", 1000))); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// The backup commands' bad input, and what they do without a cluster:
// keygen, list, inspect, delete; restore refuses a bad backup before it
// connects to anything.
func TestBackupCommands(t *testing.T) {
	dir := t.TempDir()
	code, stdout, stderr := cli(t, dir, "backup", "keygen", "--out", "keys", "-o", "json")
	var kg backupfile.KeygenResult
	if code != exitOK || json.Unmarshal([]byte(stdout), &kg) != nil || !strings.HasPrefix(kg.Recipient, "age1pq1") {
		t.Fatalf("keygen: %d %s %s", code, stdout, stderr)
	}
	secretKey, _ := os.ReadFile(kg.IdentityFile)
	if strings.Contains(stdout, strings.TrimSpace(string(secretKey[strings.LastIndex(string(secretKey[:len(secretKey)-1]), "\n")+1:]))) {
		t.Fatal("keygen printed the private key")
	}
	if code, _, stderr := cli(t, dir, "backup", "keygen", "--out", "keys"); code != exitInput || !strings.Contains(stderr, "never overwrites") {
		t.Errorf("keygen over existing keys: %d %s", code, stderr)
	}
	if code, _, stderr := cli(t, dir, "backup", "create", "--to", "backups"); code != exitInput || !strings.Contains(stderr, "--recipient") {
		t.Errorf("create without a key: %d %s", code, stderr)
	}
	if code, _, stderr := cli(t, dir, "backup", "create", "--recipient-file", kg.RecipientFile); code != exitInput || !strings.Contains(stderr, "--to") {
		t.Errorf("create without a destination: %d %s", code, stderr)
	}
	if code, _, stderr := cli(t, dir, "backup", "create", "--to", "s3://bucket", "--recipient-file", kg.RecipientFile); code != exitInput || !strings.Contains(stderr, "--s3-endpoint") {
		t.Errorf("create to a bucket without an endpoint: %d %s", code, stderr)
	}

	backups := filepath.Join(dir, "backups")
	os.MkdirAll(backups, 0o700)
	file := writeBackup(t, backups, kg.RecipientFile)
	code, stdout, _ = cli(t, dir, "backup", "list", "--from", backups, "-o", "json")
	if code != exitOK || !strings.Contains(stdout, `"name": "onprem-20261124T020000Z.onprem-backup"`) {
		t.Errorf("list: %d %s", code, stdout)
	}
	code, stdout, stderr = cli(t, dir, "backup", "inspect", file, "--identity", kg.IdentityFile)
	if code != exitOK || !strings.Contains(stdout, "whole") || !strings.Contains(stdout, "databases/postgresql/audit_manager.pgdump") || !strings.Contains(stdout, "onprem/onprem-redis") {
		t.Errorf("inspect: %d %s %s", code, stdout, stderr)
	}
	if strings.Contains(stdout, "secret-value") || strings.Contains(stdout, "c2VjcmV0LXZhbHVl") {
		t.Error("inspect printed a secret value")
	}

	other, _ := age.GenerateX25519Identity()
	otherKey := filepath.Join(dir, "other.key")
	os.WriteFile(otherKey, []byte(other.String()+"\n"), 0o600)
	data, _ := os.ReadFile(file)
	truncated := filepath.Join(dir, "cut", filepath.Base(file))
	os.MkdirAll(filepath.Dir(truncated), 0o700)
	os.WriteFile(truncated, data[:len(data)-100], 0o600)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"inspect with another key", []string{"backup", "inspect", file, "--identity", otherKey}, "another key"},
		{"inspect a truncated file", []string{"backup", "inspect", truncated, "--identity", kg.IdentityFile}, "truncated"},
		{"inspect without a key", []string{"backup", "inspect", file}, "--identity"},
		{"inspect a missing backup", []string{"backup", "inspect", filepath.Join(backups, "onprem-20200101T000000Z.onprem-backup"), "--identity", kg.IdentityFile}, "onprem-20261124T020000Z"},
		{"restore with another key", []string{"restore", "--from", file, "--identity", otherKey, "--kubeconfig", filepath.Join(dir, "none")}, "another key"},
		{"restore a truncated file", []string{"restore", "--from", truncated, "--identity", kg.IdentityFile, "--kubeconfig", filepath.Join(dir, "none")}, "truncated"},
		{"restore without a backup", []string{"restore", "--identity", kg.IdentityFile}, "--from"},
		{"restore with a malformed token file", []string{"restore", "--from", file, "--identity", kg.IdentityFile, "--git-token-file", "tokenfile"}, "RUNTIME=FILE"},
		{"delete a missing backup", []string{"backup", "delete", filepath.Join(backups, "onprem-20200101T000000Z.onprem-backup"), "--yes"}, "is not at"},
		{"delete without confirmation", []string{"backup", "delete", file}, "--yes"},
	} {
		code, stdout, stderr := cli(t, dir, c.args...)
		if code != exitInput || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, want %d saying %q\n%s%s", c.name, code, exitInput, c.want, stderr, stdout)
		}
	}
	if code, stdout, stderr := cli(t, dir, "backup", "delete", file, "--yes"); code != exitOK || !strings.Contains(stdout, "deleted") {
		t.Errorf("delete: %d %s %s", code, stdout, stderr)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Error("the deleted backup is still there")
	}
}
