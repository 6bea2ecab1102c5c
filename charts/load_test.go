package charts

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

// A tree of charts as charts.FS lays them out: app declares the library lib
// from the folder beside it.
func libraryTree(libChart string) fstest.MapFS {
	return fstest.MapFS{
		"app/Chart.yaml": {Data: []byte("apiVersion: v2\nname: app\nversion: 1.0.0\n" +
			"dependencies:\n  - name: lib\n    version: 1.0.0\n    repository: file://../lib\n")},
		"app/templates/cm.yaml": {Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ include \"lib.name\" . }}\n")},
		"lib/Chart.yaml":           {Data: []byte(libChart)},
		"lib/templates/_names.tpl": {Data: []byte(`{{- define "lib.name" -}}{{ .Chart.Name }}-from-lib{{- end -}}`)},
	}
}

const libChart = "apiVersion: v2\nname: lib\nversion: 1.0.0\ntype: library\n"

// LoadFrom attaches a library chart that Chart.yaml declares from the
// folder beside the chart (what `helm dependency build` would package),
// and the chart renders with the library's helpers, called with the
// chart's own context.
func TestLoadFromAttachesTheLibraryBesideIt(t *testing.T) {
	c, err := LoadFrom(libraryTree(libChart), "app")
	if err != nil {
		t.Fatal(err)
	}
	deps := c.Dependencies()
	if len(deps) != 1 || deps[0].Name() != "lib" || !isLibrary(deps[0]) {
		t.Fatalf("dependencies %v, want the library lib", deps)
	}
	ms, err := Template(c, "r", "ns", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 1 || !strings.Contains(ms[0].Content, "name: app-from-lib") {
		t.Errorf("rendered %+v", ms)
	}
	// The library itself loads, renders nothing and is no chart to list.
	if lib, err := LoadFrom(libraryTree(libChart), "lib"); err != nil || !isLibrary(lib) {
		t.Errorf("loading the library: %v", err)
	}
}

// A library the chart already packages in charts/ is the one kept.
func TestLoadFromKeepsAPackagedLibrary(t *testing.T) {
	tree := libraryTree(libChart)
	tree["app/charts/lib/Chart.yaml"] = &fstest.MapFile{Data: []byte(libChart)}
	tree["app/charts/lib/templates/_names.tpl"] = &fstest.MapFile{Data: []byte(`{{- define "lib.name" -}}packaged{{- end -}}`)}
	c, err := LoadFrom(tree, "app")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Dependencies()); n != 1 {
		t.Fatalf("%d dependencies, want the packaged one", n)
	}
	ms, err := Template(c, "r", "ns", nil)
	if err != nil || len(ms) != 1 || !strings.Contains(ms[0].Content, "name: packaged") {
		t.Errorf("rendered %+v, %v", ms, err)
	}
}

// Without the folder beside it the dependency stays missing, and rendering
// refuses the chart as Helm would.
func TestLoadFromWithoutTheLibrary(t *testing.T) {
	tree := libraryTree(libChart)
	delete(tree, "lib/Chart.yaml")
	delete(tree, "lib/templates/_names.tpl")
	c, err := LoadFrom(tree, "app")
	if err != nil {
		t.Fatal(err)
	}
	_, err = Template(c, "r", "ns", nil)
	var missing *MissingDependencyError
	if !errors.As(err, &missing) || !slices.Equal(missing.Missing, []string{"lib 1.0.0"}) {
		t.Errorf("err = %v, want the missing dependency lib", err)
	}
}

// Only a library chart of the declared name and version is attached.
func TestLoadFromRefusesAWrongLibrary(t *testing.T) {
	for what, chart := range map[string]string{
		"an application chart": "apiVersion: v2\nname: lib\nversion: 1.0.0\n",
		"another name":         "apiVersion: v2\nname: other\nversion: 1.0.0\ntype: library\n",
		"another version":      "apiVersion: v2\nname: lib\nversion: 2.0.0\ntype: library\n",
	} {
		if _, err := LoadFrom(libraryTree(chart), "app"); err == nil {
			t.Errorf("%s: loaded", what)
		}
	}
}
