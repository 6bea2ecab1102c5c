//go:build linux

package images

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// aptEntry is one repository line: a URI serving a suite.
type aptEntry struct{ uri, suite string }

// aptEntries reads the repositories of an apt sources file: one-line
// ("deb [opts] URI SUITE COMPONENTS...") or deb822 ("Types:", "URIs:",
// "Suites:", "Enabled:") format.
func aptEntries(data string, deb822 bool) []aptEntry {
	var out []aptEntry
	if !deb822 {
		for _, line := range strings.Split(data, "\n") {
			if i := strings.IndexByte(line, '#'); i >= 0 {
				line = line[:i]
			}
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "deb" {
				continue
			}
			f = f[1:]
			if strings.HasPrefix(f[0], "[") {
				for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
					f = f[1:]
				}
				if len(f) > 0 {
					f = f[1:]
				}
			}
			if len(f) >= 2 {
				out = append(out, aptEntry{uri: f[0], suite: f[1]})
			}
		}
		return out
	}
	for _, block := range strings.Split(data, "\n\n") {
		fields := map[string][]string{}
		for _, line := range strings.Split(block, "\n") {
			if strings.HasPrefix(line, "#") {
				continue
			}
			k, v, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			fields[strings.ToLower(strings.TrimSpace(k))] = strings.Fields(v)
		}
		if en := fields["enabled"]; len(en) > 0 && strings.EqualFold(en[0], "no") {
			continue
		}
		deb := false
		for _, t := range fields["types"] {
			deb = deb || t == "deb"
		}
		if !deb || len(fields["uris"]) == 0 {
			continue
		}
		for _, s := range fields["suites"] {
			out = append(out, aptEntry{uri: fields["uris"][0], suite: s})
		}
	}
	return out
}

// hostAptEntries reads this machine's apt sources.
func hostAptEntries() []aptEntry {
	files := []string{"/etc/apt/sources.list"}
	more, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append(files, more...)
	var out []aptEntry
	for _, f := range files {
		deb822 := strings.HasSuffix(f, ".sources")
		if !deb822 && !strings.HasSuffix(f, ".list") {
			continue // disabled or backup files
		}
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		out = append(out, aptEntries(string(data), deb822)...)
	}
	return out
}

// debianMirror is $ONPREM_DEBIAN_MIRROR, else the URI this machine's apt
// uses for DebianSuite; there is no built-in host (a machine behind a
// firewall reaches only its own mirror).
func debianMirror() (string, error) {
	if m := os.Getenv("ONPREM_DEBIAN_MIRROR"); m != "" {
		return m, nil
	}
	for _, e := range hostAptEntries() {
		if e.suite == DebianSuite {
			return e.uri, nil
		}
	}
	return "", errNoMirror
}

// errNoMirror says how to name the Debian mirror when apt names none.
var errNoMirror = fmt.Errorf("no Debian mirror: this machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d) name none for %s; set ONPREM_DEBIAN_MIRROR to the mirror's URL (the one apt would use for %s)", DebianSuite, DebianSuite)

// debianSources is the sources.list of the images' root filesystems: the
// suite and its updates from the mirror, and the security updates from
// wherever this machine's apt takes them (if it does).
func debianSources() (string, error) {
	mirror, err := debianMirror()
	if err != nil {
		return "", err
	}
	lines := []string{
		fmt.Sprintf("deb %s %s main", mirror, DebianSuite),
		fmt.Sprintf("deb %s %s-updates main", mirror, DebianSuite),
	}
	for _, e := range hostAptEntries() {
		if e.suite == DebianSuite+"-security" {
			lines = append(lines, fmt.Sprintf("deb %s %s main", e.uri, e.suite))
			break
		}
	}
	return strings.Join(lines, "\n"), nil
}
