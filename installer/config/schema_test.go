package config

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"
)

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	data, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(SchemaID, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(SchemaID)
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	return sch
}

// yamlValue reads YAML the way an editor hands it to a JSON Schema.
func yamlValue(t *testing.T, data []byte) any {
	t.Helper()
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSchemaAcceptsGoodConfigs(t *testing.T) {
	sch := compileSchema(t)
	docs := map[string][]byte{"starter": Starter("2.9.0")}
	for _, name := range []string{"minimal.yaml", "external-databases.yaml", "private-registry-large.yaml", "full.yaml"} {
		data, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		docs[name] = data
	}
	for name, data := range docs {
		if err := sch.Validate(yamlValue(t, data)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestSchemaRejectsBadConfigs(t *testing.T) {
	sch := compileSchema(t)
	const head = "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: '2.9.0'\n  domain: ci.example.com\n"
	for name, tc := range map[string]struct{ yaml, want string }{
		"unknown field":        {head + "  databases:\n    mongodb:\n      mdoe: external\n", "mdoe"},
		"bad enum":             {head + "  profile: xl\n", "/spec/profile"},
		"wrong type":           {head + "  runners: {name: a}\n", "/spec/runners"},
		"bool as string":       {head + "  modules: {gitops: {enabled: 'yes'}}\n", "/spec/modules/gitops/enabled"},
		"missing required":     {"apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  domain: ci.example.com\n", "version"},
		"wrong kind":           {strings.Replace(head, "kind: Installation", "kind: Deployment", 1), "/kind"},
		"runner without name":  {head + "  runners: [{concurrency: 2}]\n", "name"},
		"unknown in component": {head + "  components: {a: {valuez: {}}}\n", "valuez"},
	} {
		err := sch.Validate(yamlValue(t, []byte(tc.yaml)))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error does not mention %q:\n%v", name, tc.want, err)
		}
	}
	// Helm values are free-form.
	if err := sch.Validate(yamlValue(t, []byte(head+"  components: {a: {values: {anything: [1, {b: null}]}}}\n"))); err != nil {
		t.Errorf("free-form values rejected: %v", err)
	}
}

func TestSchemaShape(t *testing.T) {
	data, err := Schema()
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(data, &root); err != nil {
		t.Fatal(err)
	}
	if root["$schema"] != "https://json-schema.org/draft/2020-12/schema" || root["$id"] != SchemaID || root["title"] == nil {
		t.Fatalf("header: %v %v %v", root["$schema"], root["$id"], root["title"])
	}
	if got := root["required"]; !reflect.DeepEqual(got, []any{"apiVersion", "kind", "spec"}) {
		t.Errorf("required = %v", got)
	}
	spec := root["properties"].(map[string]any)["spec"].(map[string]any)
	if got := spec["required"]; !reflect.DeepEqual(got, []any{"version", "domain"}) {
		t.Errorf("spec.required = %v", got)
	}
	profile := spec["properties"].(map[string]any)["profile"].(map[string]any)
	if !reflect.DeepEqual(profile["enum"], []any{"small", "medium", "large"}) || !strings.Contains(profile["description"].(string), "Default: small") {
		t.Errorf("profile = %v", profile)
	}

	// Every object with properties forbids others, and every property is
	// described.
	var walk func(path string, s map[string]any)
	walk = func(path string, s map[string]any) {
		if props, ok := s["properties"].(map[string]any); ok {
			if s["additionalProperties"] != false {
				t.Errorf("%s: additionalProperties = %v", path, s["additionalProperties"])
			}
			for name, p := range props {
				p := p.(map[string]any)
				if d, _ := p["description"].(string); d == "" {
					t.Errorf("%s.%s has no description", path, name)
				}
				walk(path+"."+name, p)
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(path+"[]", items)
		}
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			walk(path+".*", ap)
		}
	}
	walk("", root)
}
