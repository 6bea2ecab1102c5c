package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"onprem.dev/onprem/installer/config"
)

// fuzzCommands are where a fuzzed command line starts: every group, the
// commands that work offline, and words that name no command.
var fuzzCommands = [][]string{
	{}, {"config"}, {"config", "validate"}, {"config", "schema"}, {"render"}, {"versions"}, {"help"},
	{"runner"}, {"runtime"}, {"runtime", "git-source"}, {"runtime", "cluster"}, {"bundle"}, {"backup"},
	{"upgrade"}, {"local"}, {"rotate"}, {"completion"}, {"support-bundle"},
	{"creat"}, {"config", "valdate"}, {"backup", "creat"}, {"nope", "render"},
}

// offline are the commands that run for real under the fuzzer: they touch
// no cluster, network or file but read onprem.yaml. Any other command is
// asked for its --help.
var offline = []string{"onprem", "onprem config validate", "onprem config schema", "onprem render", "onprem versions", "onprem help"}

// maxArg is the longest argument or environment value Linux passes to a
// program (MAX_ARG_STRLEN).
const maxArg = 128 << 10

// grow repeats s up to about n bytes (at most maxArg), so that the fuzzer
// reaches huge values.
func grow(s string, n uint16) string {
	if s == "" || n < 2 {
		return s
	}
	want := min(int(n)*64, maxArg)
	if len(s) >= want {
		return s
	}
	return strings.Repeat(s, want/len(s)+1)[:want]
}

// FuzzCLI drives the command tree with random commands, arguments, flags
// and environment, and checks what the README promises of every run: no
// panic, an exit code of 0 to 3 (0 without an error, an error with any
// other), 2 and never 1 or 3 for the offline commands that only read the
// configuration, and output of bounded size that never echoes a huge
// value whole (issue 33).
func FuzzCLI(f *testing.F) {
	dir := f.TempDir()
	valid := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n"
	if err := os.WriteFile(filepath.Join(dir, "onprem.yaml"), []byte(valid), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.yaml"), []byte(valid+"  profle: small\n  namespace: kube-system\n  components:\n    mongodb: {values: {replicas: three}}\n"), 0o644); err != nil {
		f.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "folder"), 0o755); err != nil {
		f.Fatal(err)
	}
	vars := append(config.EnvVars(), "ONPREM_NOT_A_FIELD")

	f.Add(uint8(0), "", uint8(0), "", uint8(0), "", uint16(0))
	f.Add(uint8(2), "-c bad.yaml", uint8(0), "", uint8(0), "", uint16(0))
	f.Add(uint8(2), "-c folder", uint8(0), "", uint8(0), "", uint16(0))
	f.Add(uint8(2), "", uint8(3), "x", uint8(0), "", uint16(2000))
	f.Add(uint8(2), "", uint8(0), "", uint8(23), "maybe", uint16(0))
	f.Add(uint8(2), "", uint8(0), "", uint8(3), "d", uint16(2048))
	f.Add(uint8(12), "creat", uint8(0), "", uint8(0), "", uint16(0))
	f.Add(uint8(18), "", uint8(0), "", uint8(0), "", uint16(0))
	f.Add(uint8(5), "", uint8(1), "xml", uint8(0), "", uint16(0))
	f.Add(uint8(4), "--set pipelines-api.replicas=three", uint8(0), "", uint8(0), "", uint16(0))
	f.Add(uint8(1), "--log-level", uint8(0), "", uint8(0), "", uint16(0))

	f.Fuzz(func(t *testing.T, which uint8, words string, flag uint8, flagValue string, env uint8, envValue string, size uint16) {
		t.Chdir(dir)
		// A process's arguments and environment hold no NUL.
		words, flagValue, envValue = noNUL(words), noNUL(flagValue), noNUL(envValue)
		args := slices.Clone(fuzzCommands[int(which)%len(fuzzCommands)])
		for _, w := range strings.Fields(words) {
			args = append(args, safePath(w))
		}
		found, _, err := newRoot(io.Discard, io.Discard).Find(args)
		if err != nil {
			found = nil
		}
		if name := flagOf(found, flag); name != "" && (flagValue != "" || flag > 0) {
			args = append(args, "--"+name+"="+safePath(grow(flagValue, size)))
		}
		if envValue != "" {
			t.Setenv(vars[int(env)%len(vars)], grow(envValue, size))
		}
		if !runsOffline(found) {
			args = append(args, "--help")
		}

		var stdout, stderr bytes.Buffer
		code := run(context.Background(), args, &stdout, &stderr)

		if code < 0 || code > 3 {
			t.Fatalf("%.300q: exit %d, not one the README lists", args, code)
		}
		if (code == 0) == strings.Contains(stderr.String(), "Error:") {
			t.Fatalf("%.300q: exit %d with stderr %.500q", args, code, stderr.String())
		}
		if path := commandPath(found); (path == "onprem config validate" || path == "onprem config schema" || path == "onprem versions") && code != 0 && code != exitInput {
			t.Fatalf("%.300q: exit %d from a command that only reads the configuration: %.500s", args, code, stderr.String())
		}
		if stderr.Len() > 64<<10 || stdout.Len() > 8<<20 {
			t.Fatalf("%.300q: %d bytes on stderr, %d on stdout", args, stderr.Len(), stdout.Len())
		}
		// Messages never quote a huge value whole (results on stdout may
		// hold what was asked for, a --set value say).
		for _, v := range append(slices.Clone(args), grow(flagValue, size), grow(envValue, size)) {
			if len(v) > config.MaxValueLength && bytes.Contains(stderr.Bytes(), []byte(v)) {
				t.Fatalf("%.300q: a value of %d bytes is echoed whole on stderr", args, len(v))
			}
		}
	})
}

func noNUL(s string) string { return strings.ReplaceAll(s, "\x00", "") }

// safePath keeps a fuzzed word inside the test's folder: no absolute
// path, no way up.
func safePath(w string) string {
	if strings.HasPrefix(w, "/") || strings.Contains(w, "..") || strings.HasPrefix(w, "~") {
		return "x"
	}
	return w
}

// commandPath is the command found names ("onprem render"), "" for none.
func commandPath(found *cobra.Command) string {
	if found == nil {
		return ""
	}
	return found.CommandPath()
}

// flagOf picks one of the flags of the command found (its own and its
// parents' persistent flags).
func flagOf(found *cobra.Command, i uint8) string {
	if found == nil {
		return ""
	}
	var names []string
	found.Flags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	found.InheritedFlags().VisitAll(func(f *pflag.Flag) { names = append(names, f.Name) })
	if len(names) == 0 {
		return ""
	}
	slices.Sort(names)
	return names[int(i)%len(names)]
}

// runsOffline says whether the command found may run under the fuzzer:
// it reaches no cluster or network and writes no file. Any other command
// is asked for its --help.
func runsOffline(found *cobra.Command) bool {
	return found == nil || slices.Contains(offline, found.CommandPath()) || isGroup(found) ||
		strings.HasPrefix(found.CommandPath(), "onprem completion")
}

// isGroup says whether a command only groups others (it shows its help).
func isGroup(c *cobra.Command) bool {
	return c.HasSubCommands() && c.Name() != "rotate" && c.Name() != "support-bundle"
}
