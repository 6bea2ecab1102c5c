package diff

import (
	"sort"

	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/render"
)

// Rendered compares two rendered platforms without a cluster: per
// component, the objects added, removed and changed from one to the other
// (an upgrade plan's later steps, whose starting point is not live yet).
// Components present in only one of them show every object as added or
// removed. Secret values are never shown.
func Rendered(from, to *render.Result) []Component {
	var out []Component
	var names []string
	seen := map[string]bool{}
	for _, r := range []*render.Result{from, to} {
		for _, c := range r.Components {
			if !seen[c.Name] {
				seen[c.Name] = true
				names = append(names, c.Name)
			}
		}
	}
	for _, name := range names {
		dc := Component{Name: name}
		before, after := objectsOf(from.Component(name)), objectsOf(to.Component(name))
		for _, k := range sortedKeys(before, after) {
			b, a := before[k], after[k]
			var by, ay string
			var kind, oname string
			if b != nil {
				by, kind, oname = toYAML(clean(b)), b.GetKind(), b.GetName()
			}
			if a != nil {
				ay, kind, oname = toYAML(clean(a)), a.GetKind(), a.GetName()
			}
			if by == ay {
				continue
			}
			change := Changed
			switch {
			case b == nil:
				change = Added
			case a == nil:
				change = Removed
			}
			dc.Objects = append(dc.Objects, Object{Kind: kind, Name: oname, Change: change, Diff: unifiedAs(kind+"/"+oname, by, ay, from.Version, to.Version)})
		}
		if len(dc.Objects) > 0 {
			out = append(out, dc)
		}
	}
	return out
}

func objectsOf(c *render.Component) map[string]*unstructured.Unstructured {
	m := map[string]*unstructured.Unstructured{}
	if c != nil {
		for _, o := range c.Objects {
			m[key(o)] = o
		}
	}
	return m
}

func sortedKeys(ms ...map[string]*unstructured.Unstructured) []string {
	var out []string
	seen := map[string]bool{}
	for _, m := range ms {
		for k := range m {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}

func unifiedAs(name, before, after, fromLabel, toLabel string) string {
	d := difflib.UnifiedDiff{
		A: difflib.SplitLines(before), B: difflib.SplitLines(after),
		FromFile: fromLabel + "/" + name, ToFile: toLabel + "/" + name, Context: 3,
	}
	s, err := difflib.GetUnifiedDiffString(d)
	if err != nil {
		return "<cannot diff: " + err.Error() + ">\n"
	}
	return s
}
