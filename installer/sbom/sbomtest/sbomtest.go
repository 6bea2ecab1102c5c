// Package sbomtest holds what tests of SBOMs share: the modules of a Go
// executable as the go command itself reads them, to hold an SBOM against.
package sbomtest

import (
	"os/exec"
	"strings"
	"testing"
)

// GoVersionM is the modules 'go version -m' reads from a Go executable:
// path to version, a replaced module by its replacement, the main module
// and "stdlib" (the Go version) included.
func GoVersionM(t testing.TB, exe string) map[string]string {
	t.Helper()
	out, err := exec.Command("go", "version", "-m", exe).Output()
	if err != nil {
		t.Fatalf("go version -m %s: %v", exe, err)
	}
	mods := map[string]string{}
	last := ""
	for i, line := range strings.Split(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(line), "\t")
		switch {
		case i == 0:
			_, v, _ := strings.Cut(line, ": go")
			mods["stdlib"] = strings.TrimSpace(v)
		case len(f) >= 3 && (f[0] == "mod" || f[0] == "dep"):
			mods[f[1]], last = f[2], f[1]
		case len(f) >= 3 && f[0] == "=>":
			delete(mods, last)
			mods[f[1]] = f[2]
		}
	}
	return mods
}
