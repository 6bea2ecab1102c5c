package sbom

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/package-url/packageurl-go"
	"pault.ag/go/debian/control"
)

// Package types.
const (
	TypeDeb    = "deb"
	TypeGolang = "golang"
)

// Package is one package found in an image.
type Package struct {
	// Type is deb or golang (the package URL's type).
	Type    string `json:"type"`
	Name    string `json:"name"`
	Version string `json:"version"`
	// Arch is a Debian package's architecture.
	Arch string `json:"arch,omitempty"`
	// Source is a Debian package's source package.
	Source string `json:"source,omitempty"`
	// Location is where it was found: the dpkg database, or the Go
	// executable whose build info names it.
	Location string `json:"location"`
	// PURL is its package URL (purl-spec), which scanners match against
	// vulnerability databases.
	PURL string `json:"purl"`
}

// Inventory is the packages of one image.
type Inventory struct {
	// Image is the image's name in the release; Reference its source
	// reference; Digest its manifest digest.
	Image     string `json:"image"`
	Reference string `json:"reference"`
	Digest    string `json:"digest"`
	// OS is the distribution (os-release ID and VERSION_ID), if any.
	OS       string    `json:"os,omitempty"`
	Packages []Package `json:"packages"`
	// Notes say what was not catalogued.
	Notes []string `json:"notes,omitempty"`
}

// Count returns the number of packages of each type.
func (inv *Inventory) Count() map[string]int {
	c := map[string]int{}
	for _, p := range inv.Packages {
		c[p.Type]++
	}
	return c
}

// Merge makes the inventory of an image from its layers, lowest first:
// each layer's whiteouts remove what the layers below had, then its files
// replace theirs. A database that cannot be read is noted, not fatal.
func Merge(image, reference, digest string, layers []*Layer) *Inventory {
	files := map[string]*File{}
	inv := &Inventory{Image: image, Reference: reference, Digest: digest}
	for _, l := range layers {
		for _, d := range l.Opaque {
			for p := range files {
				if d == "" || strings.HasPrefix(p, d+"/") {
					delete(files, p)
				}
			}
		}
		for _, d := range l.Deleted {
			for p := range files {
				if p == d || strings.HasPrefix(p, d+"/") {
					delete(files, p)
				}
			}
		}
		maps.Copy(files, l.Files)
		inv.Notes = append(inv.Notes, l.Notes...)
	}
	osID, osVersion := "", ""
	for _, p := range []string{osReleaseLib, osRelease} {
		if f, ok := files[p]; ok {
			osID, osVersion = parseOSRelease(f.Data)
		}
	}
	if osID != "" {
		inv.OS = strings.TrimSpace(osID + " " + osVersion)
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		f := files[p]
		switch {
		case p == dpkgStatus || strings.HasPrefix(p, dpkgStatusDir):
			pkgs, err := debPackages(p, f.Data, osID, osVersion)
			if err != nil {
				inv.Notes = append(inv.Notes, fmt.Sprintf("/%s: %v", p, err))
			}
			inv.Packages = append(inv.Packages, pkgs...)
		case f.Go != nil:
			inv.Packages = append(inv.Packages, goPackages(p, f)...)
		}
	}
	slices.SortStableFunc(inv.Packages, func(a, b Package) int {
		return strings.Compare(a.Type+"\x00"+a.Name+"\x00"+a.Version+"\x00"+a.Location, b.Type+"\x00"+b.Name+"\x00"+b.Version+"\x00"+b.Location)
	})
	return inv
}

// dpkgEntry is the part of a dpkg database paragraph an inventory uses.
type dpkgEntry struct {
	Package      string
	Status       string
	Version      string
	Architecture string
	Source       string
}

// debPackages lists the installed packages of a dpkg database.
func debPackages(location string, data []byte, osID, osVersion string) ([]Package, error) {
	var entries []dpkgEntry
	if err := control.Unmarshal(&entries, bytes.NewReader(data)); err != nil {
		return nil, fmt.Errorf("reading the dpkg database: %w", err)
	}
	ns := osID
	if ns == "" {
		ns = "debian"
	}
	var out []Package
	for _, e := range entries {
		if e.Package == "" {
			continue
		}
		// status.d entries of distroless images carry no Status.
		if e.Status != "" && !strings.HasSuffix(e.Status, " installed") {
			continue
		}
		src, _, _ := strings.Cut(e.Source, " ")
		q := map[string]string{}
		if e.Architecture != "" {
			q["arch"] = e.Architecture
		}
		if src != "" && src != e.Package {
			q["upstream"] = src
		}
		if osVersion != "" {
			q["distro"] = ns + "-" + osVersion
		}
		purl := packageurl.NewPackageURL(packageurl.TypeDebian, ns, e.Package, e.Version, packageurl.QualifiersFromMap(q), "")
		out = append(out, Package{Type: TypeDeb, Name: e.Package, Version: e.Version, Arch: e.Architecture, Source: src,
			Location: "/" + location, PURL: purl.ToString()})
	}
	return out, nil
}

// goPackages lists a Go executable's modules: its main module, every
// dependency (a replaced module by its replacement) and the standard
// library of its Go version.
func goPackages(location string, f *File) []Package {
	bi := f.Go
	loc := "/" + location
	var out []Package
	add := func(path, version string) {
		if path == "" {
			return
		}
		ns, name := "", path
		if i := strings.LastIndex(path, "/"); i >= 0 {
			ns, name = path[:i], path[i+1:]
		}
		purl := packageurl.NewPackageURL(packageurl.TypeGolang, ns, name, version, nil, "")
		out = append(out, Package{Type: TypeGolang, Name: path, Version: version, Location: loc, PURL: purl.ToString()})
	}
	add(bi.Main.Path, bi.Main.Version)
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		add(d.Path, d.Version)
	}
	add("stdlib", strings.TrimPrefix(bi.GoVersion, "go"))
	return out
}

// parseOSRelease reads ID and VERSION_ID of an os-release file (KEY=VALUE
// lines, values optionally quoted).
func parseOSRelease(data []byte) (id, version string) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			id = v
		case "VERSION_ID":
			version = v
		}
	}
	return id, version
}
