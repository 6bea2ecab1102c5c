//go:build linux

package images

import (
	"context"
	"maps"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"onprem.dev/onprem/installer/sbom"
	"onprem.dev/onprem/installer/sbom/sbomtest"
)

// The SBOM onprem makes of a stand-in image from its layers lists exactly
// the Debian packages the image's own dpkg database reports as installed
// (dpkg-query, run in the image), and for its Go program exactly the
// modules 'go version -m' reads from that executable.
func TestSBOMOfAnImageMatchesItsOwnDatabases(t *testing.T) {
	img := build(t, GitopsRuntime)
	inv, err := sbom.Catalog(context.Background(), img.Name, img.Ref, img.Image)
	if err != nil {
		t.Fatal(err)
	}
	root := unpack(t, img)

	out, err := exec.Command("chroot", root, "dpkg-query", "-W", "-f", "${db:Status-Status} ${Package} ${Version}\n").Output()
	if err != nil {
		t.Fatalf("dpkg-query in the image: %v", err)
	}
	wantDeb := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "installed" {
			wantDeb[f[1]] = f[2]
		}
	}
	gotDeb, gotGo := map[string]string{}, map[string]map[string]string{}
	for _, p := range inv.Packages {
		switch p.Type {
		case sbom.TypeDeb:
			gotDeb[p.Name] = p.Version
		case sbom.TypeGolang:
			if gotGo[p.Location] == nil {
				gotGo[p.Location] = map[string]string{}
			}
			gotGo[p.Location][p.Name] = p.Version
		}
	}
	if len(wantDeb) < 50 || !maps.Equal(gotDeb, wantDeb) {
		t.Errorf("Debian packages: the SBOM has %d, dpkg-query %d; differences: %v", len(gotDeb), len(wantDeb), diffMaps(gotDeb, wantDeb))
	}
	for _, name := range []string{"curl", "jq", "kubernetes-client"} {
		if gotDeb[name] == "" {
			t.Errorf("the SBOM misses %s, which the image installs", name)
		}
	}
	if inv.OS != "debian 12" {
		t.Errorf("OS %q", inv.OS)
	}

	// Its Go programs: the stand-in, and kubectl of Debian's
	// kubernetes-client.
	if gotGo[entrypointPath] == nil || gotGo["/usr/bin/kubectl"] == nil {
		t.Errorf("Go programs in the SBOM: %v, want the stand-in and kubectl", keysOf(gotGo))
	}
	for loc, mods := range gotGo {
		want := sbomtest.GoVersionM(t, filepath.Join(root, loc))
		if !maps.Equal(mods, want) {
			t.Errorf("%s: differences from go version -m: %v", loc, diffMaps(mods, want))
		}
	}
	// The stand-in is built in module mode: its dependencies are there.
	if n := len(gotGo[entrypointPath]); n < 3 {
		t.Errorf("the stand-in's SBOM lists %d modules, want its dependencies too", n)
	}
}

func diffMaps(got, want map[string]string) []string {
	var d []string
	for k, v := range want {
		if got[k] != v {
			d = append(d, "want "+k+" "+v+", got "+got[k])
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			d = append(d, "extra "+k+" "+v)
		}
	}
	return d
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
