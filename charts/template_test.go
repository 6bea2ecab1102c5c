package charts

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"sigs.k8s.io/yaml"
)

// sub is a subchart: a ConfigMap named after it, holding what it was told
// (.Values.say) and what it exports, and a CRD in its crds/ folder.
func sub(name string) *chartv2.Chart {
	return &chartv2.Chart{
		Metadata: &chartv2.Metadata{APIVersion: chartv2.APIVersionV2, Name: name, Version: "1.0.0"},
		Values:   map[string]any{"say": "default", "exports": map[string]any{"data": map[string]any{"from": name}}},
		Templates: []*common.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Chart.Name }}\ndata:\n  say: {{ .Values.say | quote }}\n")}},
		Files: []*common.File{{Name: "crds/" + name + ".yaml", Data: []byte(
			"apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: " + name + "s.example.com\n")}},
	}
}

// parent declares four dependencies on three packaged subcharts: one
// behind a condition, one behind a tag, one under two aliases, one whose
// exported values it imports.
func parent() *chartv2.Chart {
	p := &chartv2.Chart{
		Metadata: &chartv2.Metadata{APIVersion: chartv2.APIVersionV2, Name: "parent", Version: "2.0.0",
			Dependencies: []*chartv2.Dependency{
				{Name: "cond", Version: "1.0.0", Condition: "cond.enabled"},
				{Name: "tagged", Version: "1.0.0", Tags: []string{"extras"}},
				{Name: "shared", Version: "1.0.0", Alias: "first"},
				{Name: "shared", Version: "1.0.0", Alias: "second", ImportValues: []any{"data"}},
			}},
		Values: map[string]any{"cond": map[string]any{"enabled": false}, "tags": map[string]any{"extras": false}},
		Templates: []*common.File{
			{Name: "templates/imported.yaml", Data: []byte(
				"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: imported\ndata:\n  from: {{ .Values.from | default \"nothing\" | quote }}\n")},
			{Name: "templates/hook.yaml", Data: []byte(
				"apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: hook\n  annotations:\n    helm.sh/hook: pre-install\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers: [{name: x, image: x:1}]\n")},
			{Name: "templates/NOTES.txt", Data: []byte("thanks")},
			{Name: "templates/_helpers.tpl", Data: []byte(`{{- define "x" }}x{{ end }}`)},
		},
	}
	p.AddDependency(sub("cond"), sub("tagged"), sub("shared"))
	return p
}

func names(ms []Manifest, pick func(Manifest) bool) []string {
	var out []string
	for _, m := range ms {
		if !pick(m) {
			continue
		}
		var o struct {
			Metadata struct{ Name string } `json:"metadata"`
			Data     map[string]string     `json:"data"`
		}
		if err := yaml.Unmarshal([]byte(m.Content), &o); err == nil {
			out = append(out, o.Metadata.Name)
		}
	}
	slices.Sort(out)
	return out
}

// Template renders dependencies the way Helm does: conditions and tags
// leave subcharts out, aliases render one chart twice under its two
// names, import-values reach the parent, the enabled subcharts' crds/
// come first and marked, hooks are marked, NOTES.txt and partials are
// left out; the chart given is left as it was, so that it renders again
// with other values.
func TestTemplateProcessesDependencies(t *testing.T) {
	c := parent()
	ms, err := Template(c, "r", "ns", map[string]any{"first": map[string]any{"say": "hello"}})
	if err != nil {
		t.Fatal(err)
	}
	all := func(Manifest) bool { return true }
	if got, want := names(ms, func(m Manifest) bool { return !m.CRD && !m.Hook }), []string{"first", "imported", "second"}; !slices.Equal(got, want) {
		t.Errorf("objects %v, want %v (cond and tagged left out, shared twice under its aliases)", got, want)
	}
	if got, want := names(ms, func(m Manifest) bool { return m.CRD }), []string{"shareds.example.com", "shareds.example.com"}; !slices.Equal(got, want) {
		t.Errorf("crds/ %v, want %v (the enabled subcharts' only)", got, want)
	}
	if got := names(ms, func(m Manifest) bool { return m.Hook }); !slices.Equal(got, []string{"hook"}) {
		t.Errorf("hooks %v, want [hook]", got)
	}
	if len(ms) > 0 && !ms[0].CRD {
		t.Errorf("the crds/ documents do not come first: %s", ms[0].Template)
	}
	for _, m := range ms {
		if strings.Contains(m.Template, "NOTES.txt") || strings.Contains(m.Template, "_helpers") {
			t.Errorf("%s rendered", m.Template)
		}
		switch {
		case strings.Contains(m.Content, "name: first"):
			if !strings.Contains(m.Content, `say: "hello"`) {
				t.Errorf("alias first did not get its values: %s", m.Content)
			}
		case strings.Contains(m.Content, "name: imported"):
			if !strings.Contains(m.Content, `from: "shared"`) {
				t.Errorf("import-values did not reach the parent: %s", m.Content)
			}
		}
	}

	// Again with the condition and the tag on: the chart is as it was.
	ms, err = Template(c, "r", "ns", map[string]any{"cond": map[string]any{"enabled": true}, "tags": map[string]any{"extras": true}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(ms, func(m Manifest) bool { return !m.CRD && !m.Hook }), []string{"cond", "first", "imported", "second", "tagged"}; !slices.Equal(got, want) {
		t.Errorf("second render: objects %v, want %v", got, want)
	}
	if got := len(names(ms, all)); got != 10 {
		t.Errorf("second render: %d documents, want 10", got)
	}
	if len(c.Dependencies()) != 3 || c.Metadata.Dependencies[2].Name != "shared" {
		t.Errorf("the chart given was changed: %d subcharts, dependency 2 named %s", len(c.Dependencies()), c.Metadata.Dependencies[2].Name)
	}
}

// A package without a subchart its Chart.yaml declares is refused, as
// `helm install` refuses it, naming the chart and the subchart; so is one
// deeper down.
func TestTemplateRefusesMissingSubchart(t *testing.T) {
	c := parent()
	c.SetDependencies(sub("cond"), sub("shared"))
	_, err := Template(c, "r", "ns", nil)
	var me *MissingDependencyError
	if !errors.As(err, &me) || !slices.Equal(me.Missing, []string{"tagged 1.0.0"}) || me.Chart != "parent-2.0.0" {
		t.Fatalf("err = %v", err)
	}
	if !strings.Contains(err.Error(), "tagged 1.0.0") || !strings.Contains(err.Error(), "parent/charts/") {
		t.Errorf("the error does not name the subchart and where it belongs: %v", err)
	}

	c = parent()
	deep := sub("shared")
	deep.Metadata.Dependencies = []*chartv2.Dependency{{Name: "redis", Version: "4.0.0"}}
	c.SetDependencies(sub("cond"), sub("tagged"), deep)
	_, err = Template(c, "r", "ns", nil)
	if !errors.As(err, &me) || me.Path != "parent/charts/shared" || !slices.Equal(me.Missing, []string{"redis 4.0.0"}) {
		t.Fatalf("deeper: err = %v", err)
	}
}
