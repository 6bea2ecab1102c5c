package charts

import (
	"io/fs"
	"path"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestEveryChartRenders renders every embedded chart with its own
// values.yaml alone and with each ci/*.yaml values file, and checks that
// every document is a named Kubernetes object.
func TestEveryChartRenders(t *testing.T) {
	names, err := Names()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) == 0 {
		t.Fatal("no charts embedded")
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			c, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			cases := map[string]map[string]any{"defaults": nil}
			ciFiles, _ := fs.Glob(FS, path.Join(name, "ci", "*.yaml"))
			for _, f := range ciFiles {
				data, err := fs.ReadFile(FS, f)
				if err != nil {
					t.Fatal(err)
				}
				var v map[string]any
				if err := yaml.Unmarshal(data, &v); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				cases[path.Base(f)] = v
			}
			for cname, vals := range cases {
				ms, err := Template(c, name, "onprem", vals)
				if err != nil {
					t.Fatalf("%s: %v", cname, err)
				}
				if len(ms) == 0 {
					t.Fatalf("%s: rendered nothing", cname)
				}
				for _, m := range ms {
					for _, doc := range strings.Split(m.Content, "\n---") {
						if strings.TrimSpace(strings.TrimPrefix(doc, "---")) == "" {
							continue
						}
						var obj struct {
							APIVersion string `json:"apiVersion"`
							Kind       string `json:"kind"`
							Metadata   struct {
								Name string `json:"name"`
							} `json:"metadata"`
						}
						if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
							t.Fatalf("%s: %s: not YAML: %v\n%s", cname, m.Template, err, doc)
						}
						if obj.APIVersion == "" || obj.Kind == "" || obj.Metadata.Name == "" {
							t.Errorf("%s: %s: document without apiVersion, kind or name:\n%s", cname, m.Template, doc)
						}
					}
				}
			}
		})
	}
}

// valuesOf parses a YAML snippet of chart values (merged by the chart over
// its values.yaml, as the render pipeline does).
func valuesOf(t *testing.T, doc string) map[string]any {
	t.Helper()
	var v map[string]any
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("values: %v", err)
	}
	return v
}

// Every chart has a values.schema.json, and Helm refuses values that do
// not match it: a misspelt key, a value of the wrong type (issue 33,
// item 5). The chart's own values.yaml and ci/*.yaml match it
// (TestEveryChartRenders renders them through the same validation).
func TestEveryChartHasASchemaHelmEnforces(t *testing.T) {
	names, err := Names()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			c, err := Load(name)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Schema) == 0 {
				t.Fatal("no values.schema.json")
			}
			var schema struct {
				Properties           map[string]any `json:"properties"`
				AdditionalProperties *bool          `json:"additionalProperties"`
			}
			if err := yaml.Unmarshal(c.Schema, &schema); err != nil {
				t.Fatal(err)
			}
			if schema.AdditionalProperties == nil || *schema.AdditionalProperties {
				t.Error("the schema lets unknown keys through: set additionalProperties: false")
			}
			for key := range c.Values {
				if _, ok := schema.Properties[key]; !ok {
					t.Errorf("values.yaml key %s is not in the schema", key)
				}
			}
			cases := map[string]string{"a misspelt key": "replicsa: 3"}
			if _, ok := schema.Properties["replicas"]; ok {
				cases["a string for a number"] = `replicas: "three"`
				cases["a negative number"] = "replicas: -1"
			}
			if _, ok := schema.Properties["resources"]; ok {
				cases["a misspelt nested key"] = "resources: {requets: {cpu: 1}}"
			}
			for what, doc := range cases {
				_, err := Template(c, name, "onprem", valuesOf(t, doc))
				if err == nil || !strings.Contains(err.Error(), "schema") {
					t.Errorf("%s (%s): err = %v, want a schema error", what, doc, err)
				}
			}
		})
	}
}
