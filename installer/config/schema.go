package config

import (
	"encoding/json"
	"fmt"
	"reflect"
)

// SchemaID is the $id of the JSON Schema of onprem.yaml.
const SchemaID = "https://onprem.dev/schemas/v1alpha1/installation.schema.json"

// Schema returns a JSON Schema (draft 2020-12) of onprem.yaml, generated from
// the Go types: json names, descriptions from the doc tags, enums from the
// enum tags, required fields (json tags without omitempty), no unknown fields
// in any object, and free-form objects for Helm values. Editors use it to
// complete and check the file (yaml-language-server: $schema=...).
func Schema() ([]byte, error) {
	root, err := schemaFor(installationType, "")
	if err != nil {
		return nil, fmt.Errorf("generating the JSON Schema: %w", err)
	}
	root["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	root["$id"] = SchemaID
	root["title"] = "onprem Installation"
	root["description"] = "onprem.yaml: what the platform installation should be (apiVersion " + APIVersion + ", kind " + Kind + ")."
	out, err := json.MarshalIndent(root, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the JSON Schema: %w", err)
	}
	return append(out, '\n'), nil
}

// schemaConst pins the fields that have exactly one valid value.
var schemaConst = map[string]string{
	"apiVersion": APIVersion,
	"kind":       Kind,
}

// schemaFor returns the schema of a value of type t found at path.
func schemaFor(t reflect.Type, path string) (map[string]any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct:
		props := map[string]any{}
		required := []string{}
		for _, f := range structFields(t) {
			fpath := fieldPath(path, f.name)
			s, err := schemaFor(f.typ, fpath)
			if err != nil {
				return nil, err
			}
			if f.doc != "" {
				s["description"] = f.doc
			}
			if len(f.enum) > 0 {
				s["enum"] = f.enum
			}
			if c, ok := schemaConst[fpath]; ok {
				s["const"] = c
			}
			props[f.name] = s
			if !f.omitEmpty {
				required = append(required, f.name)
			}
		}
		s := map[string]any{
			"type":                 "object",
			"properties":           props,
			"additionalProperties": false,
		}
		if len(required) > 0 {
			s["required"] = required
		}
		return s, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: map keys must be strings, not %s", path, t.Key())
		}
		if t.Elem().Kind() == reflect.Interface {
			return map[string]any{"type": "object"}, nil
		}
		elem, err := schemaFor(t.Elem(), path+".*")
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "object", "additionalProperties": elem}, nil
	case reflect.Slice:
		items, err := schemaFor(t.Elem(), path+"[]")
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "array", "items": items}, nil
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Interface:
		return map[string]any{}, nil
	}
	return nil, fmt.Errorf("%s: no JSON Schema for Go type %s", path, t)
}
