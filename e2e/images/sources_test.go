//go:build linux

package images

import (
	"slices"
	"testing"
)

func TestAptEntries(t *testing.T) {
	oneLine := `# comment
deb http://deb.example.com/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://mirror.local/debian bookworm-updates main contrib
deb-src http://deb.example.com/debian bookworm main
deb http://security.example.com/debian-security bookworm-security main # trailing
`
	got := aptEntries(oneLine, false)
	want := []aptEntry{
		{"http://deb.example.com/debian", "bookworm"},
		{"http://mirror.local/debian", "bookworm-updates"},
		{"http://security.example.com/debian-security", "bookworm-security"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("one-line: %v, want %v", got, want)
	}
	deb822 := `Types: deb
# http://snapshot.example.com/archive/debian/20250520T000000Z
URIs: http://deb.example.com/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://src.local/debian
Suites: bookworm

Types: deb
URIs: http://disabled.local/debian
Suites: bookworm
Enabled: no

Types: deb
URIs: http://deb.example.com/debian-security
Suites: bookworm-security
Components: main
`
	got = aptEntries(deb822, true)
	want = []aptEntry{
		{"http://deb.example.com/debian", "bookworm"},
		{"http://deb.example.com/debian", "bookworm-updates"},
		{"http://deb.example.com/debian-security", "bookworm-security"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("deb822: %v, want %v", got, want)
	}
}

func TestDebianMirrorOverride(t *testing.T) {
	t.Setenv("ONPREM_DEBIAN_MIRROR", "http://mirror.example/debian")
	m, err := debianMirror()
	if err != nil || m != "http://mirror.example/debian" {
		t.Errorf("mirror = %q, %v", m, err)
	}
	s, err := debianSources()
	if err != nil {
		t.Fatal(err)
	}
	if first := firstLine(s); first != "deb http://mirror.example/debian bookworm main" {
		t.Errorf("sources start with %q", first)
	}
}
