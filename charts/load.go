package charts

import (
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
)

// Names lists the embedded charts, sorted.
func Names() ([]string, error) {
	return NamesIn(FS)
}

// NamesIn lists the charts (folders holding a Chart.yaml) at the top of fsys.
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
func LoadFrom(fsys fs.FS, name string) (*chartv2.Chart, error) {
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
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("chart %q: %w", name, err)
	}
	return c, nil
}
