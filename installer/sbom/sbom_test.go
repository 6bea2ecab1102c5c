package sbom

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"onprem.dev/onprem/installer/sbom/sbomtest"
)

type entry struct {
	name string
	data []byte
	mode int64
}

// layerTar is an uncompressed layer holding entries.
func layerTar(t *testing.T, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: mode, Size: int64(len(e.data)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.data)
	}
	tw.Close()
	return buf.Bytes()
}

const status = `Package: base-files
Status: install ok installed
Priority: required
Architecture: amd64
Version: 12.4+deb12u9
Description: Debian base system miscellaneous files

Package: libssl3
Status: install ok installed
Architecture: amd64
Source: openssl (3.0.15-1~deb12u1)
Version: 3.0.15-1~deb12u1
Description: Secure Sockets Layer toolkit

Package: gone
Status: deinstall ok config-files
Architecture: amd64
Version: 1.0
Description: removed, its configuration kept
`

const osReleaseText = "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nID=debian\nVERSION_ID=\"12\"\n"

// goProgram builds testdata/gobin (a Go program with two dependencies)
// and returns its bytes and the modules 'go version -m' says it holds
// (path: version; the main module and "stdlib" included).
func goProgram(t *testing.T) ([]byte, map[string]string) {
	t.Helper()
	exe := filepath.Join(t.TempDir(), "gobin")
	if out, err := exec.Command("go", "build", "-o", exe, "./testdata/gobin").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mods := sbomtest.GoVersionM(t, exe)
	if len(mods) != 4 {
		t.Fatalf("go version -m lists %v, want the main module, two dependencies and stdlib", mods)
	}
	bin, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	return bin, mods
}

func TestLayersMergeWithWhiteouts(t *testing.T) {
	bin, wantMods := goProgram(t)
	base := layerTar(t,
		entry{name: "etc/os-release", data: []byte(osReleaseText)},
		entry{name: "./var/lib/dpkg/status", data: []byte(status)},
		entry{name: "usr/local/bin/tool", data: bin, mode: 0o755},
		entry{name: "usr/local/bin/old", data: bin, mode: 0o755},
		entry{name: "opt/app/server", data: bin, mode: 0o755},
	)
	top := layerTar(t,
		entry{name: "usr/local/bin/.wh.old"}, // deleted
		entry{name: "opt/app/.wh..wh..opq"},  // folder emptied
		entry{name: "usr/local/bin/script", data: []byte("#!/bin/sh\necho hi\n"), mode: 0o755},
		entry{name: "usr/share/doc/readme", data: bin}, // not executable: not read
	)
	var layers []*Layer
	for _, raw := range [][]byte{base, top} {
		// Gzipped, as registries store layers.
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(raw)
		zw.Close()
		r, err := Uncompress(&gz)
		if err != nil {
			t.Fatal(err)
		}
		l, err := ScanLayer(r)
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
	}
	inv := Merge("tool", "registry.example/tool:1.0", "sha256:abc", layers)
	if inv.OS != "debian 12" {
		t.Errorf("OS %q", inv.OS)
	}
	debs := map[string]Package{}
	gos := map[string]Package{}
	for _, p := range inv.Packages {
		switch p.Type {
		case TypeDeb:
			debs[p.Name] = p
		case TypeGolang:
			if p.Location != "/usr/local/bin/tool" {
				t.Errorf("Go package %s found in %s: deleted or emptied files must not count", p.Name, p.Location)
			}
			gos[p.Name] = p
		}
	}
	if len(debs) != 2 || debs["gone"].Name != "" {
		t.Errorf("deb packages %v: want the two installed ones", debs)
	}
	if p := debs["libssl3"]; p.Source != "openssl" || p.PURL != "pkg:deb/debian/libssl3@3.0.15-1~deb12u1?arch=amd64&distro=debian-12&upstream=openssl" {
		t.Errorf("libssl3: %+v", p)
	}
	// Every module 'go version -m' names, and no other.
	for path, version := range wantMods {
		if p := gos[path]; p.Version != version || !strings.HasPrefix(p.PURL, "pkg:golang/") {
			t.Errorf("module %s %s: found %+v", path, version, p)
		}
	}
	if len(gos) != len(wantMods) {
		t.Errorf("Go packages %v, want %v", gos, wantMods)
	}
	if p := gos["github.com/package-url/packageurl-go"]; p.PURL != "pkg:golang/github.com/package-url/packageurl-go@v0.1.3" {
		t.Errorf("purl %s", p.PURL)
	}
}

// An SPDX document written and read back gives the same inventories; the
// CycloneDX BOM holds every package with its purl.
func TestSPDXRoundTripAndCycloneDX(t *testing.T) {
	inv := &Inventory{Image: "redis", Reference: "docker.io/library/redis:7.2.7", Digest: "sha256:0123", OS: "debian 12",
		Notes: []string{"a note"},
		Packages: []Package{
			{Type: TypeDeb, Name: "libssl3", Version: "3.0.15-1", Arch: "amd64", Source: "openssl", Location: "/var/lib/dpkg/status", PURL: "pkg:deb/debian/libssl3@3.0.15-1?arch=amd64&upstream=openssl"},
			{Type: TypeGolang, Name: "stdlib", Version: "1.26.8", Location: "/usr/bin/x", PURL: "pkg:golang/stdlib@1.26.8"},
		}}
	other := &Inventory{Image: "empty", Reference: "x/empty:1", Digest: "sha256:4567"}
	d := Document{Name: "platform 2.8.0", Namespace: "https://onprem.dev/spdx/test", Tool: "onprem-test", Root: &Root{Name: "platform", Version: "2.8.0"}}
	var buf bytes.Buffer
	if err := WriteSPDX(&buf, d, inv, other); err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(buf.Bytes(), &raw); err != nil || raw["spdxVersion"] != "SPDX-2.3" {
		t.Fatalf("not SPDX 2.3 JSON: %v %v", err, raw["spdxVersion"])
	}
	back, err := ReadSPDX(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 2 || back[0].Image != "redis" || back[0].Reference != inv.Reference || back[0].OS != "debian 12" || len(back[0].Packages) != 2 || len(back[1].Packages) != 0 {
		t.Fatalf("read back: %+v", back)
	}
	for i, p := range back[0].Packages {
		if p != inv.Packages[i] {
			t.Errorf("package %d: %+v, want %+v", i, p, inv.Packages[i])
		}
	}
	buf.Reset()
	if err := WriteCycloneDX(&buf, d, inv, other); err != nil {
		t.Fatal(err)
	}
	var bom struct {
		BOMFormat, SpecVersion string
		Components             []struct {
			Type, Name string
			Components []struct{ Name, Purl string }
		}
	}
	if err := json.Unmarshal(buf.Bytes(), &bom); err != nil || bom.BOMFormat != "CycloneDX" || bom.SpecVersion != "1.6" || len(bom.Components) != 2 ||
		bom.Components[0].Type != "container" || len(bom.Components[0].Components) != 2 || bom.Components[0].Components[0].Purl != inv.Packages[0].PURL {
		t.Errorf("CycloneDX: %v %+v", err, bom)
	}
}

// Catalog reads a ggcr image's layers.
func TestCatalogImage(t *testing.T) {
	raw := layerTar(t, entry{name: "var/lib/dpkg/status", data: []byte(status)})
	l, err := tarball.LayerFromReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := Catalog(context.Background(), "x", "x:1", img)
	if err != nil {
		t.Fatal(err)
	}
	if c := inv.Count(); c[TypeDeb] != 2 || !strings.HasPrefix(inv.Digest, "sha256:") {
		t.Errorf("%+v", inv)
	}
}
