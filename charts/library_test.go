package charts

import (
	"errors"
	"io/fs"
	"maps"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"text/template/parse"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
)

// library is the library chart of the helpers every chart shares.
const library = "common"

// includedCommon matches a call of a library helper: include "common.x".
var includedCommon = regexp.MustCompile(`(?:include|template) "(` + library + `\.[A-Za-z0-9_.]+)"`)

// templateTexts returns the text of every file in chart's templates/.
func templateTexts(t *testing.T, chart string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(FS, path.Join(chart, "templates"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(FS, p)
		out[p] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// helper is one {{ define }} of a chart's templates.
type helper struct {
	chart, file, name string
	// body is the parsed body, printed back: comments and the layout
	// of the source left out.
	body string
}

// helpers parses every define of every chart's .tpl files.
func helpers(t *testing.T) []helper {
	t.Helper()
	all, err := NamesIn(FS)
	if err != nil {
		t.Fatal(err)
	}
	var out []helper
	for _, chart := range all {
		files := templateTexts(t, chart)
		for _, file := range slices.Sorted(maps.Keys(files)) {
			if path.Ext(file) != ".tpl" {
				continue
			}
			trees := map[string]*parse.Tree{}
			tr := parse.New(file)
			// Functions are Helm's and sprig's: not checked here, only
			// the structure.
			tr.Mode = parse.SkipFuncCheck
			if _, err := tr.Parse(files[file], "{{", "}}", trees); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			for name, tree := range trees {
				if name == file || tree.Root == nil {
					continue
				}
				out = append(out, helper{chart: chart, file: file, name: name, body: tree.Root.String()})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].file+out[i].name < out[j].file+out[j].name })
	return out
}

// sameModuloChart is a helper's body with its chart's own name and
// template prefix ("mongodb", "mongodb.", "dbprovision.", "common.")
// replaced by one placeholder, so that copies that differ only there
// compare equal.
func sameModuloChart(h helper) string {
	b := h.body
	if prefix, _, ok := strings.Cut(h.name, "."); ok {
		b = strings.ReplaceAll(b, `"`+prefix+`.`, `"§.`)
	}
	b = strings.ReplaceAll(b, `"`+library+`.`, `"§.`)
	return strings.ReplaceAll(b, h.chart, "§")
}

// TestNoHelperDefinedTwice: a template helper shared by charts lives once,
// in the library chart (charts/common); no chart keeps a copy of one
// (same body but for the chart's name) of another chart's or of the
// library's. And no chart defines a helper in the library's namespace,
// which would silently replace the library's own.
func TestNoHelperDefinedTwice(t *testing.T) {
	hs := helpers(t)
	if len(hs) == 0 {
		t.Fatal("no helpers found")
	}
	byBody := map[string][]helper{}
	for _, h := range hs {
		if h.chart != library && strings.HasPrefix(h.name, library+".") {
			t.Errorf("%s defines %q: the library's names are the library's", h.file, h.name)
		}
		key := sameModuloChart(h)
		byBody[key] = append(byBody[key], h)
	}
	for _, same := range byBody {
		charts := map[string]bool{}
		for _, h := range same {
			charts[h.chart] = true
		}
		if len(charts) < 2 {
			continue
		}
		var where []string
		for _, h := range same {
			where = append(where, h.name+" ("+h.file+")")
		}
		t.Errorf("one helper defined %d times, in %d charts: %s; keep it once, in charts/%s, and call it there", len(same), len(charts), strings.Join(where, ", "), library)
	}
}

// The guard itself finds a copy: the library's labels defined again in a
// chart with its own prefix, and a copy that differs only by the chart's
// name.
func TestNoHelperDefinedTwiceFindsCopies(t *testing.T) {
	lib := helper{chart: "common", name: "common.labels", body: `{{include "common.selectorLabels" .}}` + "\nrole: x"}
	copied := helper{chart: "redis", name: "redis.labels", body: `{{include "redis.selectorLabels" .}}` + "\nrole: x"}
	if sameModuloChart(lib) != sameModuloChart(copied) {
		t.Error("a chart's copy of a library helper is not found")
	}
	a := helper{chart: "nats", name: "nats.replicas", body: `{{fail "nats: no"}}`}
	b := helper{chart: "consul", name: "consul.replicas", body: `{{fail "consul: no"}}`}
	if sameModuloChart(a) != sameModuloChart(b) {
		t.Error("two charts' copies that differ by the chart's name are not found")
	}
	c := helper{chart: "consul", name: "consul.replicas", body: `{{fail "consul: other"}}`}
	if sameModuloChart(a) == sameModuloChart(c) {
		t.Error("two different helpers compare equal")
	}
}

// TestChartsUsingTheLibraryRenderWithIt: every chart whose templates call
// a library helper declares the library (repository file://../common),
// loads with it attached, names only helpers the library defines, and
// renders with its own values; without the library Helm would refuse it.
// A chart that calls none does not declare it.
func TestChartsUsingTheLibraryRenderWithIt(t *testing.T) {
	defined := map[string]bool{}
	for _, h := range helpers(t) {
		if h.chart == library {
			defined[h.name] = true
		}
	}
	if len(defined) == 0 {
		t.Fatalf("charts/%s defines no helper", library)
	}
	names, err := Names()
	if err != nil {
		t.Fatal(err)
	}
	var users int
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			used := map[string]bool{}
			for file, text := range templateTexts(t, name) {
				for _, m := range includedCommon.FindAllStringSubmatch(text, -1) {
					used[m[1]] = true
					if !defined[m[1]] {
						t.Errorf("%s calls %q, which charts/%s does not define", file, m[1], library)
					}
				}
			}
			c, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			declared := slices.ContainsFunc(c.Metadata.Dependencies, func(d *chartv2.Dependency) bool {
				return d.Name == library && d.Repository == "file://../"+library
			})
			if len(used) == 0 {
				if declared {
					t.Errorf("declares the library %s but calls none of its helpers", library)
				}
				return
			}
			users++
			if !declared {
				t.Fatalf("calls %v but Chart.yaml does not declare the dependency %s (repository file://../%s)", slices.Sorted(maps.Keys(used)), library, library)
			}
			i := slices.IndexFunc(c.Dependencies(), func(d *chartv2.Chart) bool { return d.Name() == library })
			if i < 0 || !isLibrary(c.Dependencies()[i]) {
				t.Fatalf("loaded without the library chart %s attached: %v", library, c.Dependencies())
			}
			if _, err := Template(c, name, "onprem", nil); err != nil {
				t.Fatalf("rendering with the library: %v", err)
			}
			without := Clone(c)
			without.SetDependencies(slices.DeleteFunc(slices.Clone(without.Dependencies()), func(d *chartv2.Chart) bool { return d.Name() == library })...)
			var missing *MissingDependencyError
			if _, err := Template(without, name, "onprem", nil); !errors.As(err, &missing) {
				t.Errorf("without the library: err = %v, want a missing dependency", err)
			}
		})
	}
	if users == 0 {
		t.Errorf("no chart calls the library %s", library)
	}
}

// Names lists the charts that render; NamesIn every chart folder, so that a
// bundle carries the library too.
func TestNamesLeavesTheLibraryOut(t *testing.T) {
	names, err := Names()
	if err != nil {
		t.Fatal(err)
	}
	all, err := NamesIn(FS)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(names, "common") || !slices.Contains(all, "common") {
		t.Errorf("Names() = %v, NamesIn(FS) = %v: want common in the second only", names, all)
	}
	if len(all) != len(names)+1 {
		t.Errorf("Names() = %v, NamesIn(FS) = %v: only the library differs", names, all)
	}
}
