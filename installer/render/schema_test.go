package render

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
)

// loadText loads a configuration the way action.Source.Load does, with
// the component values checked against the charts' schemas.
func loadText(t *testing.T, content string) (*config.Installation, *release.Release, error) {
	t.Helper()
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "onprem.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	var comps []string
	for _, r := range set.All() {
		comps = append(comps, r.ComponentNames()...)
	}
	in, _, err := config.Load(context.Background(), config.LoadOptions{
		Path:   path,
		Lookup: envconfig.MapLookuper(map[string]string{}),
		Validate: config.ValidateOptions{KnownVersions: set.Versions(), KnownComponents: comps,
			CheckValues: func(in *config.Installation) []config.ValuesProblem {
				rel, err := set.Get(in.Spec.Version)
				if err != nil {
					return nil
				}
				return CheckValues(in, rel, nil)
			}},
	})
	if err != nil {
		return nil, nil, err
	}
	rel, _ := set.Get(in.Spec.Version)
	return in, rel, nil
}

const valuesHead = "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n  components:\n"

// A component's values are checked against its chart's values.schema.json,
// each problem at its line with what would be valid; values that match
// pass (issue 33, item 5).
func TestComponentValuesAreCheckedAgainstTheChartsSchema(t *testing.T) {
	for _, c := range []struct {
		name, values string
		want         []string
	}{
		{"a string for a number", "    pipelines-api:\n      values: {replicas: \"three\"}\n",
			[]string{`onprem.yaml:8: spec.components.pipelines-api.values.replicas: expected a whole number, got the string "three"; Replicas of the service`}},
		{"a misspelt key", "    pipelines-api:\n      values:\n        replicsa: 3\n",
			[]string{`onprem.yaml:9: spec.components.pipelines-api.values.replicsa: unknown value: the chart has no such key; did you mean "replicas"?`}},
		{"a misspelt nested key", "    gitops-api:\n      values:\n        resources:\n          requets: {cpu: 1}\n",
			[]string{`onprem.yaml:10: spec.components.gitops-api.values.resources.requets: unknown value: the chart has no such key; did you mean "requests"?`}},
		{"a standalone server scaled", "    mongodb:\n      values: {replicas: 3}\n",
			[]string{`spec.components.mongodb.values.replicas: the number 3 is too large (at most 1); This chart runs one standalone MongoDB server`}},
		{"an enum", "    ingress:\n      values: {serviceType: External}\n",
			[]string{`spec.components.ingress.values.serviceType: the string "External" is not valid (valid: LoadBalancer, NodePort, ClusterIP)`}},
		{"a list item", "    mongodb:\n      values:\n        args: [--port, 27017]\n",
			[]string{`onprem.yaml:9: spec.components.mongodb.values.args[1]: expected a string, got the number 27017`}},
		{"every problem at once", "    pipelines-api:\n      values: {replicas: -1, port: 0}\n    mongodb:\n      values: {replicsa: 1}\n",
			[]string{"pipelines-api.values.replicas: the number -1 is too small (at least 0)", "pipelines-api.values.port: the number 0 is too small (at least 1)", "mongodb.values.replicsa: unknown value"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := loadText(t, valuesHead+c.values)
			var es config.Errors
			if !errors.As(err, &es) {
				t.Fatalf("err = %v, want configuration errors", err)
			}
			if len(es) != len(c.want) {
				t.Errorf("%d problems, want %d:\n%v", len(es), len(c.want), err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the errors lack %q:\n%v", w, err)
				}
			}
		})
	}
	// Values that match the schemas pass, and render.
	in, rel, err := loadText(t, valuesHead+"    pipelines-api:\n      values: {replicas: 2, env: {A: \"1\", B: 2, C: true}, resources: {limits: {memory: 1Gi}}}\n    ingress:\n      values: {nodePorts: {http: 30080}}\n")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Render(context.Background(), Options{Installation: in, Release: rel}); err != nil {
		t.Fatal(err)
	}
}

// --set values go through the same schema and are named as --set's; a
// library caller that skips config.Load gets the configuration's values
// named as spec.components' (issue 33, item 5).
func TestSetValuesAreCheckedAgainstTheChartsSchema(t *testing.T) {
	in, rel := load(t, "minimal")
	for set, want := range map[string]string{
		"pipelines-api.replicas=three":   `--set pipelines-api.replicas: expected a whole number, got the string "three"`,
		"pipelines-api.replicsa=3":       `--set pipelines-api.replicsa: unknown value: the chart has no such key; did you mean "replicas"?`,
		"mongodb.replicas=2":             `--set mongodb.replicas: the number 2 is too large (at most 1)`,
		"gitops-api.uses.mongodb=please": `--set gitops-api.uses.mongodb: expected true or false, got the string "please"`,
	} {
		_, err := Render(context.Background(), Options{Installation: in, Release: rel, Set: []string{set}})
		var se *SetError
		if !errors.As(err, &se) || !IsInputError(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: err = %v, want %q", set, err, want)
		}
	}
	in.Spec.Components = map[string]config.ComponentOverride{"pipelines-api": {Values: map[string]any{"replicas": "three"}}}
	_, err := Render(context.Background(), Options{Installation: in, Release: rel})
	if !IsInputError(err) || !strings.Contains(err.Error(), `spec.components.pipelines-api.values.replicas: expected a whole number`) {
		t.Errorf("values of a configuration that was not loaded: %v", err)
	}
}
