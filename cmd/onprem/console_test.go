package main

import (
	"strings"
	"testing"
)

// Bad flags exit 2 before anything listens; an unreachable cluster exits
// 3 before the console starts.
func TestConsoleCommand(t *testing.T) {
	dir := t.TempDir()
	kc := goneKubeconfig(t, dir)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"console", "--listen", "0.0.0.0:8800"}, exitInput, "reachable from other machines"},
		{[]string{"console", "--listen", "0.0.0.0:8800", "--tls-cert", "c.pem"}, exitInput, "go together"},
		{[]string{"console", "--listen", "8800"}, exitInput, "give host:port"},
		{[]string{"console", "extra"}, exitInput, "extra"},
		{[]string{"console", "--kubeconfig", kc}, exitCluster, kc},
	} {
		code, stdout, stderr := cli(t, dir, c.args...)
		if code != c.code || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d (want %d), stdout %q, stderr %s", c.args, code, c.code, stdout, stderr)
		}
	}
	code, stdout, _ := cli(t, dir, "console", "--help")
	for _, want := range []string{"--listen", "--tls-cert", "--insecure", "HttpOnly", "ssh -L"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("console --help lacks %q", want)
		}
	}
}
