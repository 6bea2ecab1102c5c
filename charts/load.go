package charts

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/Masterminds/semver/v3"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// Names lists the embedded charts that render (application charts), sorted:
// the library charts they share (common) are left out.
func Names() ([]string, error) {
	all, err := NamesIn(FS)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, n := range all {
		c, err := Load(n)
		if err != nil {
			return nil, err
		}
		if !isLibrary(c) {
			names = append(names, n)
		}
	}
	return names, nil
}

// NamesIn lists the charts (folders holding a Chart.yaml) at the top of fsys,
// library charts included: a tree of charts (a bundle's) carries them all.
func NamesIn(fsys fs.FS) ([]string, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("listing charts: %w", err)
	}
	var names []string
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		if _, err := fs.Stat(fsys, path.Join(e.Name(), "Chart.yaml")); err == nil {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

// Load reads the embedded chart called name.
func Load(name string) (*chartv2.Chart, error) {
	return LoadFrom(FS, name)
}

// LoadFrom reads the chart in folder name of fsys (an embedded FS, a bundle,
// or a folder on disk through os.DirFS) with the Helm SDK's loader.
//
// A dependency that Chart.yaml declares from a library chart beside it
// (repository file://../NAME, as the charts here declare common) and that
// the folder's charts/ does not hold is the folder NAME of fsys, attached
// as the chart's subchart: what `helm dependency build` would package.
func LoadFrom(fsys fs.FS, name string) (*chartv2.Chart, error) {
	return loadFrom(fsys, name, nil)
}

func loadFrom(fsys fs.FS, name string, loading []string) (*chartv2.Chart, error) {
	var files []*archive.BufferedFile
	err := fs.WalkDir(fsys, name, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		rel := strings.TrimPrefix(p, name+"/")
		files = append(files, &archive.BufferedFile{Name: rel, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading chart %q: %w", name, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("chart %q: no files", name)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("loading chart %q: %w", name, err)
	}
	if err := attachLibraries(fsys, c, append(loading, name)); err != nil {
		return nil, fmt.Errorf("chart %q: %w", name, err)
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("chart %q: %w", name, err)
	}
	return c, nil
}

// siblingRepository is how a chart's Chart.yaml names a chart folder beside
// its own (Helm's file:// repositories are relative to the chart).
const siblingRepository = "file://../"

// attachLibraries adds to c the library charts it declares from a folder
// beside it (repository file://../NAME) that it does not carry already.
// loading is the chain of charts being loaded, against a cycle.
func attachLibraries(fsys fs.FS, c *chartv2.Chart, loading []string) error {
	for _, d := range c.Metadata.Dependencies {
		folder, ok := strings.CutPrefix(d.Repository, siblingRepository)
		if !ok || slices.ContainsFunc(c.Dependencies(), func(s *chartv2.Chart) bool { return s.Name() == d.Name }) {
			continue
		}
		if folder == "" || strings.ContainsAny(folder, `/\`) || folder == "." || folder == ".." {
			return fmt.Errorf("dependency %s: repository %s is not a chart folder beside this one", d.Name, d.Repository)
		}
		if slices.Contains(loading, folder) {
			return fmt.Errorf("dependency %s: %s depends on itself (%s)", d.Name, folder, strings.Join(append(loading, folder), " -> "))
		}
		if _, err := fs.Stat(fsys, path.Join(folder, "Chart.yaml")); err != nil {
			// Not beside it: left missing, which rendering reports
			// (MissingDependencyError) as Helm would.
			continue
		}
		lib, err := loadFrom(fsys, folder, loading)
		if err != nil {
			return fmt.Errorf("dependency %s: %w", d.Name, err)
		}
		if !isLibrary(lib) {
			return fmt.Errorf("dependency %s: %s is an application chart; only a library chart is attached from a folder beside the chart (package the others in charts/)", d.Name, folder)
		}
		if lib.Name() != d.Name {
			return fmt.Errorf("dependency %s: the chart in %s is called %s", d.Name, folder, lib.Name())
		}
		if d.Version != "" {
			want, err := semver.NewConstraint(d.Version)
			if err != nil {
				return fmt.Errorf("dependency %s: version %q: %w", d.Name, d.Version, err)
			}
			got, err := semver.NewVersion(lib.Metadata.Version)
			if err != nil || !want.Check(got) {
				return fmt.Errorf("dependency %s: wants version %s, but %s holds %s", d.Name, d.Version, folder, lib.Metadata.Version)
			}
		}
		c.AddDependency(lib)
	}
	return nil
}

// isLibrary: a library chart (type: library) only holds template helpers
// for other charts; it renders nothing and is never installed.
func isLibrary(c *chartv2.Chart) bool {
	return c.Metadata != nil && c.Metadata.Type == "library"
}
