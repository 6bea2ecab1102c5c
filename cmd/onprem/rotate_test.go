package main

import (
	"strings"
	"testing"
)

// Bad input exits 2 and an unreachable cluster 3, before anything is
// touched; --help teaches the three certificate steps.
func TestRotateCommands(t *testing.T) {
	dir := t.TempDir()
	kc := goneKubeconfig(t, dir)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"rotate"}, exitInput, "onprem rotate --list"},
		{[]string{"rotate", "--list", "-o", "xml"}, exitInput, "xml"},
		{[]string{"rotate", "--list", "--kubeconfig", kc}, exitCluster, kc},
		{[]string{"rotate", "certificates", "--ca", "--retire-ca"}, exitInput, "two steps"},
		{[]string{"rotate", "certificates", "--kubeconfig", kc}, exitCluster, kc},
		{[]string{"rotate", "certificates", "extra"}, exitInput, "extra"},
		{[]string{"rotate", "credentials"}, exitInput, "--all, --database postgresql|mongodb|rabbitmq|redis, --component NAME or --admin"},
		{[]string{"rotate", "credentials", "--all", "--component", "audit-manager"}, exitInput, "--all rotates every login"},
		{[]string{"rotate", "credentials", "--all", "-o", "xml"}, exitInput, "xml"},
		{[]string{"rotate", "credentials", "--admin", "--component", "audit-manager"}, exitInput, "run them one after the other"},
		{[]string{"rotate", "credentials", "--all", "--kubeconfig", kc}, exitCluster, kc},
	} {
		code, stdout, stderr := cli(t, dir, c.args...)
		if code != c.code || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d (want %d), stdout %q, stderr %s", c.args, code, c.code, stdout, stderr)
		}
	}
	code, stdout, _ := cli(t, dir, "rotate", "certificates", "--help")
	for _, want := range []string{"--ca", "--retire-ca", "--dry-run", "overlap", "Exit code"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("rotate certificates --help lacks %q", want)
		}
	}
	code, stdout, _ = cli(t, dir, "rotate", "credentials", "--help")
	for _, want := range []string{"--database", "--component", "--all", "--admin", "root_2", "one round of restarts", "--dry-run", "revoked", "finishes what the first one started", "external", "Exit code"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("rotate credentials --help lacks %q", want)
		}
	}
}
