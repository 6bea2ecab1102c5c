package config

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestEnvVars(t *testing.T) {
	want := []string{
		"ONPREM_NAME",
		"ONPREM_VERSION",
		"ONPREM_NAMESPACE",
		"ONPREM_DOMAIN",
		"ONPREM_PROFILE",
		"ONPREM_AVAILABILITY",
		"ONPREM_TLS_MODE",
		"ONPREM_TLS_SECRET_NAME",
		"ONPREM_INGRESS_MODE",
		"ONPREM_INGRESS_CLASS_NAME",
		"ONPREM_INGRESS_SERVICE_TYPE",
		"ONPREM_INGRESS_GATEWAY_API_ENABLED",
		"ONPREM_INGRESS_GATEWAY_API_GATEWAY_NAME",
		"ONPREM_INGRESS_GATEWAY_API_GATEWAY_NAMESPACE",
		"ONPREM_INGRESS_GATEWAY_API_SECTION_NAME",
		"ONPREM_IMAGES_PLATFORM",
		"ONPREM_REGISTRY_HOST",
		"ONPREM_REGISTRY_PATH_PREFIX",
		"ONPREM_REGISTRY_PULL_SECRET",
		"ONPREM_REGISTRY_INSECURE", "ONPREM_REGISTRY_REQUIRE_SIGNATURES",
		"ONPREM_STORAGE_CLASS_NAME",
		"ONPREM_MODULES_PIPELINES_ENABLED",
		"ONPREM_MODULES_GITOPS_ENABLED",
		"ONPREM_LEGACY_NATS_ENABLED",
		"ONPREM_LEGACY_CONSUL_ENABLED",
		"ONPREM_MONGODB_MODE",
		"ONPREM_MONGODB_PERSISTENCE_SIZE",
		"ONPREM_MONGODB_PERSISTENCE_STORAGE_CLASS",
		"ONPREM_MONGODB_EXTERNAL_SECRET_NAME",
		"ONPREM_REDIS_MODE",
		"ONPREM_REDIS_PERSISTENCE_SIZE",
		"ONPREM_REDIS_PERSISTENCE_STORAGE_CLASS",
		"ONPREM_REDIS_EXTERNAL_SECRET_NAME",
		"ONPREM_RABBITMQ_MODE",
		"ONPREM_RABBITMQ_PERSISTENCE_SIZE",
		"ONPREM_RABBITMQ_PERSISTENCE_STORAGE_CLASS",
		"ONPREM_RABBITMQ_EXTERNAL_SECRET_NAME",
		"ONPREM_POSTGRESQL_MODE",
		"ONPREM_POSTGRESQL_PERSISTENCE_SIZE",
		"ONPREM_POSTGRESQL_PERSISTENCE_STORAGE_CLASS",
		"ONPREM_POSTGRESQL_EXTERNAL_SECRET_NAME",
		"ONPREM_PROXY_HTTP_PROXY",
		"ONPREM_PROXY_HTTPS_PROXY",
		"ONPREM_PROXY_NO_PROXY",
	}
	if got := EnvVars(); !slices.Equal(got, want) {
		t.Fatalf("EnvVars() =\n%q\nwant\n%q", got, want)
	}
}

// flatten lists the leaves of an installation's JSON form by field path.
func flatten(t *testing.T, in *Installation) map[string]any {
	t.Helper()
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var tree any
	if err := json.Unmarshal(data, &tree); err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(keyPath(path, k), x)
			}
		case []any:
			for i, x := range v {
				walk(indexPath(path, i), x)
			}
		default:
			out[path] = v
		}
	}
	walk("", tree)
	return out
}

// changedPaths lists the leaves that differ between two installations.
func changedPaths(t *testing.T, a, b *Installation) []string {
	fa, fb := flatten(t, a), flatten(t, b)
	var out []string
	for k, v := range fa {
		if w, ok := fb[k]; !ok || !reflect.DeepEqual(v, w) {
			out = append(out, k)
		}
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func TestEachEnvVarSetsItsField(t *testing.T) {
	for _, v := range envVarList() {
		t.Run(v.name, func(t *testing.T) {
			for _, base := range []string{"minimal.yaml", "full.yaml"} {
				before, _, err := decodeFile(t, base)
				if err != nil {
					t.Fatal(err)
				}
				after := clone(t, before)
				value := "env-value"
				if v.typ.Kind() == reflect.Bool {
					// Flip what the file says; unset reads as false.
					value = "true"
					if flatten(t, before)[v.path] == true {
						value = "false"
					}
				}
				if err := ApplyEnv(t.Context(), after, mapLookup(map[string]string{v.name: value})); err != nil {
					t.Fatal(err)
				}
				if got := changedPaths(t, before, after); !slices.Equal(got, []string{v.path}) {
					t.Errorf("%s: %s=%s changed %q, want only %s", base, v.name, value, got, v.path)
				}
			}
		})
	}
}

func TestEnvUnsetOrEmptyNeverClears(t *testing.T) {
	before, _, err := decodeFile(t, "full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	empty := map[string]string{}
	for _, name := range EnvVars() {
		empty[name] = ""
	}
	for name, lookup := range map[string]map[string]string{"unset": nil, "empty": empty} {
		after := clone(t, before)
		if err := ApplyEnv(t.Context(), after, mapLookup(lookup)); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(before, after) {
			t.Errorf("%s variables changed %q", name, changedPaths(t, before, after))
		}
	}

	// Unset module switches stay unset (nil, not false), so that the
	// defaults can still turn them on.
	in := &Installation{}
	if err := ApplyEnv(t.Context(), in, mapLookup(nil)); err != nil {
		t.Fatal(err)
	}
	if in.Spec.Modules.GitOps.Enabled != nil || in.Spec.Legacy.NATS.Enabled != nil {
		t.Fatal("an unset variable materialised a module switch")
	}
}

func TestEnvOverridesBooleans(t *testing.T) {
	in := &Installation{Spec: Spec{Modules: Modules{GitOps: Module{Enabled: ptr(true)}}, Registry: Registry{Insecure: true}}}
	err := ApplyEnv(t.Context(), in, mapLookup(map[string]string{
		"ONPREM_MODULES_GITOPS_ENABLED":    "false",
		"ONPREM_MODULES_PIPELINES_ENABLED": "1",
		"ONPREM_REGISTRY_INSECURE":         "FALSE",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if in.Spec.Modules.GitOps.IsEnabled(true) || !in.Spec.Modules.Pipelines.IsEnabled(false) || in.Spec.Registry.Insecure {
		t.Fatalf("booleans not overridden: %+v %+v", in.Spec.Modules, in.Spec.Registry)
	}
}

func TestEnvBadValuesNameTheVariable(t *testing.T) {
	in := &Installation{Spec: Spec{Domain: "ci.example.com"}}
	err := ApplyEnv(t.Context(), in, mapLookup(map[string]string{
		"ONPREM_MODULES_GITOPS_ENABLED": "maybe",
		"ONPREM_REGISTRY_INSECURE":      "yes please",
		"ONPREM_DOMAIN":                 "other.example.com",
	}))
	assertErrors(t, err,
		`spec.modules.gitops.enabled: environment variable ONPREM_MODULES_GITOPS_ENABLED="maybe" is not a boolean (valid: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)`,
		`spec.registry.insecure: environment variable ONPREM_REGISTRY_INSECURE="yes please" is not a boolean (valid: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)`,
	)
	if in.Spec.Domain != "ci.example.com" {
		t.Error("a rejected environment was partly applied")
	}
}

func TestEnvDefaultsToProcessEnvironment(t *testing.T) {
	t.Setenv("ONPREM_PROFILE", "large")
	in := &Installation{}
	if err := ApplyEnv(t.Context(), in, nil); err != nil {
		t.Fatal(err)
	}
	if in.Spec.Profile != "large" {
		t.Fatalf("profile = %q", in.Spec.Profile)
	}
	if err := ApplyEnv(t.Context(), nil, nil); err == nil {
		t.Fatal("ApplyEnv(nil) must fail")
	}
}

// A variable that cannot be parsed is reported with every other problem of
// the configuration, never instead of them; the variables that parse are
// applied (so the file's problems they fix are not reported), and the
// message lists every spelling strconv.ParseBool accepts (issue 33, item 7).
func TestLoadReportsBadEnvironmentWithTheFilesProblems(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want []string
		not  []string
	}{
		{"bad boolean and the file's problems",
			map[string]string{"ONPREM_LEGACY_NATS_ENABLED": "maybe"},
			[]string{
				`spec.legacy.nats.enabled: environment variable ONPREM_LEGACY_NATS_ENABLED="maybe" is not a boolean (valid: 1, t, T, TRUE, true, True, 0, f, F, FALSE, false, False)`,
				`onprem.yaml:5: spec.domain: "https://ci.example.com" must not include a scheme`,
				`onprem.yaml:6: spec.profile: "xl" is not valid`,
			}, nil},
		{"two bad variables, one good that fixes the domain",
			map[string]string{"ONPREM_LEGACY_NATS_ENABLED": "maybe", "ONPREM_REGISTRY_INSECURE": "yes", "ONPREM_DOMAIN": "ci.example.com"},
			[]string{`ONPREM_LEGACY_NATS_ENABLED="maybe" is not a boolean`, `ONPREM_REGISTRY_INSECURE="yes" is not a boolean`, `spec.profile: "xl" is not valid`},
			[]string{"spec.domain"}},
		{"True is a boolean",
			map[string]string{"ONPREM_LEGACY_NATS_ENABLED": "True"},
			[]string{`spec.profile: "xl" is not valid`}, []string{"ONPREM_LEGACY_NATS_ENABLED"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			content := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: \"2.8.0\"\n  domain: https://ci.example.com\n  profile: xl\n"
			path := writeFile(t, t.TempDir(), "onprem.yaml", content)
			_, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(c.env), Validate: testValidateOptions})
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("got %T %v, want Errors", err, err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the errors lack %q:\n%v", w, err)
				}
			}
			for _, n := range c.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("the errors hold %q:\n%v", n, err)
				}
			}
		})
	}
	for _, v := range strings.Split(BoolSpellings, ", ") {
		if _, err := strconv.ParseBool(v); err != nil {
			t.Errorf("BoolSpellings lists %q, which strconv.ParseBool refuses", v)
		}
	}
}
