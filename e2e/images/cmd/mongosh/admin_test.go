package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"onprem.dev/onprem/e2e/testservers"
)

// adminRun runs the admin script's stand-in as user (with password) to
// grant or revoke login.
func adminRun(t *testing.T, addr, user, password, action, login, loginPassword string) (string, int) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "username"), []byte(login), 0o600); err != nil {
		t.Fatal(err)
	}
	if loginPassword != "" {
		if err := os.WriteFile(filepath.Join(dir, "password"), []byte(loginPassword), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	host, port, _ := net.SplitHostPort(addr)
	env := map[string]string{"MONGODB_HOST": host, "MONGODB_PORT": port, "MONGODB_ADMIN_USERNAME": user, "MONGODB_ADMIN_PASSWORD": password,
		"ONPREM_ADMIN_ACTION": action, "ONPREM_LOGIN_DIR": dir}
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--nodb", "--norc", "--quiet", "--file", "/tmp/x/mongodb-admin.js"}, func(k string) string { return env[k] }, &out, &errOut)
	return out.String() + errOut.String(), code
}

// The admin alternates: root grants root_2, which then drops root; root
// is refused from then on, and no user drops itself.
func TestAdminScriptAlternatesTheRootUser(t *testing.T) {
	addr := testservers.MongoDB(t, "root", adminPassword)
	out, code := adminRun(t, addr, "root", adminPassword, "grant", "root_2", "root2-Secret-1")
	if code != 0 || !strings.Contains(out, `created admin user "root_2"`) {
		t.Fatalf("grant: exit %d\n%s", code, out)
	}
	if out, code := adminRun(t, addr, "root_2", "root2-Secret-1", "revoke", "root_2", ""); code != 1 || !strings.Contains(out, "refusing to revoke") {
		t.Fatalf("a user dropping itself: exit %d\n%s", code, out)
	}
	if out, code := adminRun(t, addr, "root_2", "root2-Secret-1", "revoke", "root", ""); code != 0 || !strings.Contains(out, `dropped admin user "root"`) {
		t.Fatalf("revoke: exit %d\n%s", code, out)
	}
	if out, code := adminRun(t, addr, "root", adminPassword, "grant", "x", "x-Secret-1"); code != 1 || !strings.Contains(out, "cannot log in") {
		t.Fatalf("the dropped admin: exit %d\n%s", code, out)
	}
	// Again (a resumed run): revoked already; the grant of an existing
	// user sets its password.
	if out, code := adminRun(t, addr, "root_2", "root2-Secret-1", "revoke", "root", ""); code != 0 || !strings.Contains(out, "revoked already") {
		t.Fatalf("revoke again: exit %d\n%s", code, out)
	}
	if out, code := adminRun(t, addr, "root_2", "root2-Secret-1", "grant", "root_2", "root2-Secret-2"); code != 0 || !strings.Contains(out, `updated admin user "root_2"`) {
		t.Fatalf("grant again: exit %d\n%s", code, out)
	}
	out, code = adminRun(t, addr, "root_2", "root2-Secret-2", "grant", "root", "root-Secret-3")
	if code != 0 {
		t.Fatalf("the new password: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "Secret") {
		t.Fatalf("a credential in the output:\n%s", out)
	}
	if out, code := adminRun(t, addr, "root_2", "root2-Secret-2", "drop", "root", ""); code != 1 || !strings.Contains(out, "not grant or revoke") {
		t.Fatalf("an unknown action: exit %d\n%s", code, out)
	}
}
