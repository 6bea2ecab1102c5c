package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Exit codes keep the README's promise: 2 for a bad command, argument,
// flag or configuration, with nothing done; 0 for help asked for
// (issue 33, item 6).
func TestExitCodesKeepTheREADMEsPromise(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "folder"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args   []string
		code   int
		stderr []string
		stdout string
	}{
		{[]string{"creat"}, exitInput, []string{`unknown command "creat" for "onprem"`}, ""},
		{[]string{"instal"}, exitInput, []string{`unknown command "instal" for "onprem"`, `did you mean "install"?`, "'onprem --help' lists the commands"}, ""},
		{[]string{"config", "valdate"}, exitInput, []string{`unknown command "valdate" for "onprem config"`, `did you mean "validate"?`}, ""},
		{[]string{"runner", "lst"}, exitInput, []string{`unknown command "lst" for "onprem runner"`}, ""},
		{[]string{"runtime", "nope"}, exitInput, []string{`unknown command "nope" for "onprem runtime"`}, ""},
		{[]string{"runtime", "git-source", "nope"}, exitInput, []string{`unknown command "nope" for "onprem runtime git-source"`}, ""},
		{[]string{"runtime", "cluster", "nope"}, exitInput, []string{`unknown command "nope" for "onprem runtime cluster"`}, ""},
		{[]string{"bundle", "pusj"}, exitInput, []string{`unknown command "pusj" for "onprem bundle"`, `did you mean "push"?`}, ""},
		{[]string{"backup", "creat"}, exitInput, []string{`unknown command "creat" for "onprem backup"`, `did you mean "create"?`}, ""},
		{[]string{"upgrade", "aply"}, exitInput, []string{`unknown command "aply" for "onprem upgrade"`, `did you mean "apply"?`}, ""},
		{[]string{"local", "start"}, exitInput, []string{`unknown command "start" for "onprem local"`}, ""},
		{[]string{"rotate", "passwords"}, exitInput, []string{`unknown command "passwords" for "onprem rotate"`}, ""},
		{[]string{"completion", "tcsh"}, exitInput, []string{`unknown command "tcsh" for "onprem completion"`}, ""},
		{[]string{"help", "nope"}, exitInput, []string{`unknown command "nope" for "onprem"`}, ""},
		{[]string{"help", "backup", "creat"}, exitInput, []string{`unknown command "creat" for "onprem backup"`}, ""},
		{[]string{"config", "validate", "-c", filepath.Join(dir, "folder")}, exitInput, []string{filepath.Join(dir, "folder") + ": is a folder: give the path of the configuration file itself"}, ""},
		{[]string{"render", "-c", filepath.Join(dir, "folder")}, exitInput, []string{"is a folder"}, ""},
		{[]string{"status", "-c", filepath.Join(dir, "folder")}, exitInput, []string{"is a folder"}, ""},
		{[]string{"config", "validate", "-c", filepath.Join(dir, "missing.yaml")}, exitInput, []string{"does not exist"}, ""},
		// Found by FuzzCLI: a name too long for the file system.
		{[]string{"config", "validate", "-c", strings.Repeat("0", 300)}, exitInput, []string{"cannot be opened (file name too long)"}, ""},
		{[]string{"config", "validate", "extra"}, exitInput, []string{`unknown command "extra" for "onprem config validate"`}, ""},
		{[]string{"backup", "--bogus"}, exitInput, []string{"unknown flag: --bogus"}, ""},
		// Help asked for, or a group alone: its help, exit 0.
		{[]string{"backup"}, exitOK, nil, "onprem backup [command]"},
		{[]string{}, exitOK, nil, "onprem [command]"},
		{[]string{"help", "backup"}, exitOK, nil, "onprem backup [command]"},
		{[]string{"help"}, exitOK, nil, "onprem [command]"},
		{[]string{"runtime", "git-source"}, exitOK, nil, "onprem runtime git-source [command]"},
		{[]string{"completion", "bash"}, exitOK, nil, "bash completion"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, stdout, stderr := cli(t, dir, c.args...)
			if code != c.code {
				t.Errorf("exit %d, want %d\nstdout: %.300s\nstderr: %s", code, c.code, stdout, stderr)
			}
			for _, w := range c.stderr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if !strings.Contains(stdout, c.stdout) {
				t.Errorf("stdout lacks %q:\n%.500s", c.stdout, stdout)
			}
		})
	}
}
