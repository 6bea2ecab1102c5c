package release

import (
	"onprem.dev/onprem/installer/signing"

	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"
	"sigs.k8s.io/yaml"
)

// embedded holds the release manifests shipped in the binary, one file per
// version (releases/<version>.yaml).
//
//go:embed releases/*.yaml
var embedded embed.FS

// Set is a collection of releases, sorted by version (oldest first).
type Set struct {
	releases []*Release
}

// Embedded returns the releases shipped in this binary. They are checked by
// the package tests, so an error here means a broken build.
func Embedded() (*Set, error) {
	sub, err := fs.Sub(embedded, "releases")
	if err != nil {
		return nil, fmt.Errorf("embedded releases: %w", err)
	}
	return LoadFS(sub)
}

// LoadFS reads every *.yaml file at the top of fsys as a release manifest
// (a bundle's releases/ folder, or the embedded one).
func LoadFS(fsys fs.FS) (*Set, error) {
	files, err := fs.Glob(fsys, "*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing release manifests: %w", err)
	}
	if len(files) == 0 {
		return nil, errors.New("no release manifests found")
	}
	set := &Set{}
	seen := map[string]string{}
	for _, f := range files {
		data, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("reading release manifest %s: %w", f, err)
		}
		r, err := Parse(data)
		if err != nil {
			return nil, fmt.Errorf("release manifest %s: %w", f, err)
		}
		if other, dup := seen[r.Version]; dup {
			return nil, fmt.Errorf("release manifest %s: version %s is also defined in %s", f, r.Version, other)
		}
		if want := strings.TrimSuffix(path.Base(f), ".yaml"); want != r.Version {
			return nil, fmt.Errorf("release manifest %s: holds version %s; the file must be named %s.yaml", f, r.Version, r.Version)
		}
		seen[r.Version] = f
		set.releases = append(set.releases, r)
	}
	sort.Slice(set.releases, func(i, j int) bool {
		return semver.MustParse(set.releases[i].Version).LessThan(semver.MustParse(set.releases[j].Version))
	})
	return set, nil
}

// Parse decodes one release manifest strictly (unknown fields are errors)
// and validates it.
func Parse(data []byte) (*Release, error) {
	var r Release
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return &r, nil
}

// All returns the releases, oldest first.
func (s *Set) All() []*Release {
	return append([]*Release(nil), s.releases...)
}

// Versions lists the versions, oldest first.
func (s *Set) Versions() []string {
	out := make([]string, 0, len(s.releases))
	for _, r := range s.releases {
		out = append(out, r.Version)
	}
	return out
}

// Latest returns the newest release.
func (s *Set) Latest() *Release {
	return s.releases[len(s.releases)-1]
}

// UnknownVersionError says that a version has no release manifest.
type UnknownVersionError struct {
	Version string
	Known   []string
}

func (e *UnknownVersionError) Error() string {
	return fmt.Sprintf("platform version %q is not known; versions: %s", e.Version, strings.Join(e.Known, ", "))
}

// Get returns the release of version v (a leading "v" is accepted).
func (s *Set) Get(v string) (*Release, error) {
	want := strings.TrimPrefix(strings.TrimSpace(v), "v")
	for _, r := range s.releases {
		if r.Version == want {
			return r, nil
		}
	}
	return nil, &UnknownVersionError{Version: v, Known: s.Versions()}
}

// With returns a new set holding s's releases with rels added; a release of
// rels replaces the one of the same version in s (a bundle's manifest, with
// every image pinned by digest, takes the place of the embedded one).
func (s *Set) With(rels ...*Release) *Set {
	out := &Set{}
	replaced := map[string]bool{}
	for _, r := range rels {
		replaced[r.Version] = true
	}
	for _, r := range s.releases {
		if !replaced[r.Version] {
			out.releases = append(out.releases, r)
		}
	}
	out.releases = append(out.releases, rels...)
	sort.Slice(out.releases, func(i, j int) bool {
		return semver.MustParse(out.releases[i].Version).LessThan(semver.MustParse(out.releases[j].Version))
	})
	return out
}

// Keyring is the public keys s's releases trust to sign bundles (each
// once), named "release VERSION". Call it on the embedded set, before
// bundles' releases are added: a bundle's manifest cannot vouch for
// itself.
func (s *Set) Keyring() (signing.Keyring, error) {
	var ring signing.Keyring
	for _, r := range s.releases {
		for i, k := range r.Trust {
			key, err := signing.ParseKey(k.Name, "release "+r.Version, k.PublicKey)
			if err != nil {
				return nil, fmt.Errorf("release %s: trust[%d]: %w", r.Version, i, err)
			}
			ring = ring.With(key)
		}
	}
	return ring, nil
}
