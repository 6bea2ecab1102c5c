package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func decodeFile(t *testing.T, name string) (*Installation, *Source, error) {
	t.Helper()
	path := filepath.Join("testdata", name)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return Decode(path, data)
}

func TestDecodeGoodFiles(t *testing.T) {
	for _, name := range []string{"minimal.yaml", "external-databases.yaml", "private-registry-large.yaml", "full.yaml"} {
		t.Run(name, func(t *testing.T) {
			in, src, err := decodeFile(t, name)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if in.APIVersion != APIVersion || in.Kind != Kind || in.Spec.Version != "2.9.0" {
				t.Fatalf("decoded %+v", in)
			}
			if src.Filename() != filepath.Join("testdata", name) {
				t.Fatalf("Source.Filename() = %q", src.Filename())
			}
		})
	}
}

func TestDecodeFull(t *testing.T) {
	in, src, err := decodeFile(t, "full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := in.Spec
	checks := []struct {
		name      string
		got, want any
	}{
		{"metadata.name", in.Metadata.Name, "prod"},
		{"tls.secretName", s.TLS.SecretName, "ci-example-com-tls"},
		{"gatewayAPI.enabled", s.Ingress.GatewayAPI.Enabled, true},
		{"registry.insecure", s.Registry.Insecure, true},
		{"legacy.nats", *s.Legacy.NATS.Enabled, true},
		{"legacy.consul", *s.Legacy.Consul.Enabled, false},
		{"mongodb", s.Databases.MongoDB, Database{Mode: "external", External: External{SecretName: "mongodb-connection"}}},
		{"redis size", s.Databases.Redis.Persistence.Size, "20Gi"},
		{"argo-hub", s.Components["argo-hub"].IsEnabled(), false},
		{"values", s.Components["pipelines-api"].Values, map[string]any{
			"replicaCount": float64(3),
			"resources":    map[string]any{"limits": map[string]any{"memory": "2Gi"}},
			"extraEnv":     []any{map[string]any{"name": "LOG_LEVEL", "value": "debug"}},
			"nullable":     nil,
		}},
		{"nodeSelector", s.Placement.NodeSelector, map[string]string{"node-role.example.com/ci": "true", "disktype": "ssd"}},
		{"tolerationSeconds", *s.Placement.Tolerations[1].TolerationSeconds, int64(300)},
		{"runner concurrency", s.Runners[1].Concurrency, 8},
		{"runner cluster", s.Runners[1].Cluster, ClusterRef{Kubeconfig: "/etc/onprem/gpu.kubeconfig", Context: "gpu"}},
		{"git source", s.Runtimes[0].GitSources[0].Repository.Path, "environments/prod"},
		{"managed cluster", s.Runtimes[0].ManagedClusters[0].Cluster.Context, "prod-eu"},
		{"git token", s.Runtimes[1].GitToken, SecretSource{File: "/etc/onprem/staging-git-token"}},
		{"configRuntime", s.RuntimeConfig.ConfigRuntime, "staging"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}

	lines := map[string]int{
		"apiVersion":                    2,
		"metadata.name":                 5,
		"spec.tls.mode":                 12,
		"spec.components.pipelines-api": 59,
		"spec.components.pipelines-api.values.resources.limits.memory": 64,
		`spec.placement.nodeSelector["node-role.example.com/ci"]`:      74,
		"spec.placement.tolerations[1]":                                81,
		"spec.placement.tolerations[1].tolerationSeconds":              83,
		"spec.runners[1].name":                                         90,
		"spec.runtimes[0].gitSources[0].repository.url":                104,
		"spec.runtimeConfig.configRuntime":                             122,
	}
	for path, want := range lines {
		if got := src.Line(path); got != want || !src.Has(path) {
			t.Errorf("Line(%s) = %d (Has %v), want %d", path, got, src.Has(path), want)
		}
	}
	// A path the file does not set is located at its nearest ancestor.
	if got := src.Line("spec.runners[0].namespace"); got != 89 {
		t.Errorf("Line(spec.runners[0].namespace) = %d, want 89 (the runner)", got)
	}
}

func TestDecodeBadFiles(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"bad-typos.yaml", []string{
			`testdata/bad-typos.yaml:6: spec.registy: unknown field; did you mean "registry"?`,
			`testdata/bad-typos.yaml:10: spec.databases.mongodb.mdoe: unknown field; did you mean "mode"?`,
			`testdata/bad-typos.yaml:11: spec.databases.mongodb.persistense: unknown field; did you mean "persistence"?`,
			`testdata/bad-typos.yaml:14: spec.runners[0].nmae: unknown field; did you mean "name"?`,
			`testdata/bad-typos.yaml:15: spec.colour: unknown field (valid: version, namespace, domain, profile, availability, tls, ingress, images, registry, storage, modules, legacy, databases, components, overlays, placement, proxy, trust, backup, rotation, runners, runtimes, runtimeConfig)`,
		}},
		{"bad-types.yaml", []string{
			`testdata/bad-types.yaml:4: spec.version: expected a string, got the number 2.9; quote it to make it a string: "2.9"`,
			`testdata/bad-types.yaml:6: spec.registry: expected a mapping with the fields host, pathPrefix, pullSecret, insecure, requireSignatures, got the string "registry.internal"`,
			`testdata/bad-types.yaml:9: spec.modules.gitops.enabled: expected true or false, got the string "yes"`,
			`testdata/bad-types.yaml:12: spec.overlays[1]: expected a string, got a list`,
			`testdata/bad-types.yaml:14: spec.runners: expected a list, got a mapping`,
			`testdata/bad-types.yaml:17: spec.runtimes[0].gitToken: expected a mapping with the fields file, env, got the string "GIT_TOKEN"`,
			`testdata/bad-types.yaml:21: spec.placement.tolerations[0].tolerationSeconds: expected a whole number, got the string "soon"`,
		}},
		{"bad-duplicate.yaml", []string{
			`testdata/bad-duplicate.yaml:7: spec.profile: duplicate key (first set at line 6): keep only one`,
		}},
		{"bad-syntax.yaml", []string{
			`testdata/bad-syntax.yaml:4: invalid YAML: found unexpected end of stream`,
		}},
		{"bad-multidoc.yaml", []string{
			`testdata/bad-multidoc.yaml:6: a second YAML document starts here: onprem.yaml must hold exactly one Installation document; remove the '---' separator and what follows, or move it to its own file`,
		}},
		{"bad-kind.yaml", []string{
			`testdata/bad-kind.yaml:1: apiVersion: "apps/v1" is not valid (valid: onprem.dev/v1alpha1)`,
			`testdata/bad-kind.yaml:2: kind: "Deployment" is not valid (valid: Installation)`,
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in, src, err := decodeFile(t, tc.file)
			if in != nil || src != nil {
				t.Error("a result came back with the error")
			}
			assertErrors(t, err, tc.want...)
		})
	}
}

// assertErrors checks that err is Errors with exactly these lines.
func assertErrors(t *testing.T, err error, want ...string) {
	t.Helper()
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("error %T (%v) is not Errors", err, err)
	}
	if got := err.Error(); got != strings.Join(want, "\n") {
		t.Fatalf("got:\n%s\nwant:\n%s", got, strings.Join(want, "\n"))
	}
}

func TestDecodeDocumentErrors(t *testing.T) {
	for _, tc := range []struct{ name, data, want string }{
		{"empty", "", `x.yaml:1: the file is empty: expected an Installation (apiVersion: onprem.dev/v1alpha1, kind: Installation, spec: ...); 'onprem config init' writes a starter file`},
		{"comments only", "# nothing\n\n", `x.yaml:1: the file is empty: expected an Installation (apiVersion: onprem.dev/v1alpha1, kind: Installation, spec: ...); 'onprem config init' writes a starter file`},
		{"separators only", "---\n---\n", `x.yaml:1: the file is empty: expected an Installation (apiVersion: onprem.dev/v1alpha1, kind: Installation, spec: ...); 'onprem config init' writes a starter file`},
		{"list root", "\n- a\n- b\n", `x.yaml:2: the document is a list: expected a mapping with apiVersion, kind, metadata and spec`},
		{"string root", "hello\n", `x.yaml:1: the document is the string "hello": expected a mapping with apiVersion, kind, metadata and spec`},
		{"null root", "~\n", `x.yaml:1: the document is null: expected a mapping with apiVersion, kind, metadata and spec`},
		{"tabs", "spec:\n\tversion: 1\n", `x.yaml:2: invalid YAML: found character that cannot start any token`},
		{"unknown anchor", "spec: *nope\n", `x.yaml: invalid YAML: unknown anchor 'nope' referenced`},
		{"two documents", "kind: Installation\n---\nkind: Installation\n", `x.yaml:2: a second YAML document starts here: onprem.yaml must hold exactly one Installation document; remove the '---' separator and what follows, or move it to its own file`},
		{"duplicate in values", "spec:\n  components:\n    x:\n      values:\n        a: 1\n        a: 2\n", `x.yaml:6: spec.components.x.values.a: duplicate key (first set at line 5): keep only one`},
		{"non-scalar key", "spec:\n  components:\n    x:\n      values:\n        ? [a]\n        : 1\n", `x.yaml:5: spec.components.x.values: a key here is a list: keys must be names`},
		{"infinity in values", "spec:\n  components:\n    x:\n      values: {a: .inf}\n", `x.yaml:4: spec.components.x.values.a: .inf is not a finite number (valid: a decimal number); quote it to make it a string: ".inf"`},
		{"custom tag", "spec:\n  components:\n    x:\n      values: {a: !vault secret}\n", `x.yaml:4: spec.components.x.values.a: unsupported YAML tag !vault (valid: strings, numbers, booleans, null, lists and mappings); quote it to make it a string: "secret"`},
		{"int out of range", "spec:\n  runners:\n    - concurrency: 99999999999999999999\n", `x.yaml:3: spec.runners[0].concurrency: expected a whole number, got the number 99999999999999999999`},
		{"float for int", "spec:\n  runners:\n    - concurrency: 2.5\n", `x.yaml:3: spec.runners[0].concurrency: expected a whole number, got the number 2.5`},
		{"bool for string", "spec:\n  domain: true\n", `x.yaml:2: spec.domain: expected a string, got the boolean true; quote it to make it a string: "true"`},
		{"mapping for string map value", "spec:\n  placement:\n    nodeSelector:\n      a: {b: c}\n", `x.yaml:4: spec.placement.nodeSelector.a: expected a string, got a mapping`},
		{"bad merge", "spec:\n  tls:\n    <<: 3\n", `x.yaml:3: spec.tls: the merge key << takes a mapping or a list of mappings, got the number 3`},
		{"merge of unknown field", "spec:\n  tls:\n    <<: {mdoe: secret}\n", `x.yaml:3: spec.tls.mdoe: unknown field; did you mean "mode"?`},
		{"alias cycle", "spec:\n  components: &c\n    x:\n      values: *c\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Decode("x.yaml", []byte(tc.data))
			if tc.want == "" {
				// Only the kind of error matters (no panic, Errors).
				if !errors.As(err, &Errors{}) {
					t.Fatalf("got %v, want Errors", err)
				}
				return
			}
			assertErrors(t, err, tc.want)
		})
	}
}

func TestDecodeReportsEveryProblem(t *testing.T) {
	data := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  versoin: x\n  domian: y\n  tls: []\n"
	_, _, err := Decode("x.yaml", []byte(data))
	assertErrors(t, err,
		`x.yaml:4: spec.versoin: unknown field; did you mean "version"?`,
		`x.yaml:5: spec.domian: unknown field; did you mean "domain"?`,
		`x.yaml:6: spec.tls: expected a mapping with the fields mode, secretName, got a list`,
	)
}

func TestDecodeYAMLFeatures(t *testing.T) {
	data := `apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: "2.9.0"
  domain: ci.example.com
  tls: ~
  ingress:
  databases:
    mongodb: &external
      mode: external
      external:
        secretName: shared
    redis:
      <<: *external
      external:
        secretName: redis
    rabbitmq: *external
  runners:
    - &runner {name: a, concurrency: 2}
    - <<: *runner
      name: b
  components:
    "1": {values: {1: one, true: yes, on: off}}
`
	in, src, err := Decode("x.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	s := in.Spec
	if s.TLS != (TLS{}) || s.Ingress != (Ingress{}) {
		t.Errorf("null sections must stay unset: %+v %+v", s.TLS, s.Ingress)
	}
	if want := (Database{Mode: "external", External: External{SecretName: "redis"}}); !reflect.DeepEqual(s.Databases.Redis, want) {
		t.Errorf("merged redis = %+v, want %+v", s.Databases.Redis, want)
	}
	if !reflect.DeepEqual(s.Databases.RabbitMQ, s.Databases.MongoDB) {
		t.Errorf("aliased rabbitmq = %+v", s.Databases.RabbitMQ)
	}
	if want := (Runner{Name: "b", Concurrency: 2}); s.Runners[1] != want {
		t.Errorf("merged runner = %+v, want %+v", s.Runners[1], want)
	}
	if got, want := s.Components["1"].Values, map[string]any{"1": "one", "true": "yes", "on": "off"}; !reflect.DeepEqual(got, want) {
		t.Errorf("values = %#v, want %#v", got, want)
	}
	// Merged fields point at the line they are written on.
	if got := src.Line("spec.runners[1].concurrency"); got != 19 {
		t.Errorf("Line(merged concurrency) = %d, want 19", got)
	}
}

func TestDecodeFreeFormValues(t *testing.T) {
	data := `spec:
  components:
    x:
      values:
        base: &base {a: 1, b: 2}
        other: &other {b: 3, c: 4}
        merged:
          <<: [*base, *other]
          a: 0
        scalars: [true, -7, 0x10, 1.5, ~, "s", 2001-12-14, !!binary aGk=, 18446744073709551615]
`
	in, src, err := Decode("x.yaml", []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	v := in.Spec.Components["x"].Values
	if got, want := v["merged"], map[string]any{"a": float64(0), "b": float64(2), "c": float64(4)}; !reflect.DeepEqual(got, want) {
		t.Errorf("merged = %#v, want %#v", got, want)
	}
	want := []any{true, float64(-7), float64(16), 1.5, nil, "s", "2001-12-14", "aGk=", float64(18446744073709551615)}
	if got := v["scalars"]; !reflect.DeepEqual(got, want) {
		t.Errorf("scalars = %#v, want %#v", got, want)
	}
	if !slices.Contains(src.Paths(), "spec.components.x.values.scalars[8]") {
		t.Errorf("Paths() misses the last scalar: %q", src.Paths())
	}

	_, _, err = Decode("x.yaml", []byte("spec:\n  tls:\n    <<: [{mode: secret}, 3]\n"))
	assertErrors(t, err, `x.yaml:3: spec.tls: the merge key << takes a mapping or a list of mappings, got the number 3 in the list`)
}

func TestDecodeTrailingSeparatorIsFine(t *testing.T) {
	data := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec: {version: '1', domain: a.example.com}\n---\n# nothing else\n"
	if _, _, err := Decode("x.yaml", []byte(data)); err != nil {
		t.Fatal(err)
	}
}

// FuzzDecode feeds arbitrary bytes through the whole pipeline that operator
// input goes through: no input may panic, and every rejection is Errors.
func FuzzDecode(f *testing.F) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(Starter("2.9.0"))
	for _, seed := range []string{
		"",
		"---\n",
		"~",
		"[]",
		"- a\n- b\n",
		"just a string",
		"apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec: {version: '1', domain: a.b}\n",
		"spec:\n  runners: &r [*r]\n",
		"a: &a {b: *a}\n",
		"spec: &s {<<: *s}\n",
		"base: &b {mode: external}\nspec: {databases: {mongodb: {<<: *b}}}\n",
		"spec: {databases: {mongodb: {<<: [*x]}}}\n",
		"spec: {components: {x: {values: {a: .inf, b: !!binary aGk=, c: 2001-12-14, d: !custom x, ? [k] : v}}}}\n",
		"spec: {runners: [{concurrency: 99999999999999999999999}]}\n",
		"spec: {placement: {tolerations: [{tolerationSeconds: 0x10}]}}\n",
		"spec: {modules: {gitops: {enabled: yes}}}\n",
		"spec:\n  profile: small\n  profile: large\n",
		"\t\x00\xff",
		"a: b\n---\nc: d\n",
		"? a\n: b\n",
		"spec: {version: !!str 2.9, domain: !!int x}\n",
		"spec: {overlays: [~, '', a, a]}\n",
		"{spec: {runtimes: [{}, {}], runtimeConfig: {configRuntime: x}}}",
		"spec: {placement: {nodeSelector: {\"a b\": \"c d\"}}}\n",
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		in, src, err := Decode("fuzz.yaml", data)
		if _, _, again := Decode("fuzz.yaml", data); (err == nil) != (again == nil) || (err != nil && err.Error() != again.Error()) {
			t.Fatalf("Decode is not deterministic:\n%v\n---\n%v", err, again)
		}
		if err != nil {
			if !errors.As(err, &Errors{}) {
				t.Fatalf("Decode returned %T, not Errors: %v", err, err)
			}
			if in != nil || src != nil {
				t.Fatalf("Decode returned a result with an error")
			}
			_ = err.Error()
			return
		}
		if in == nil || src == nil {
			t.Fatal("Decode returned no result and no error")
		}
		SetDefaults(in)
		if err := Validate(in, src, ValidateOptions{KnownVersions: []string{"2.9.0"}, KnownComponents: []string{"pipelines-api"}}); err != nil {
			if !errors.As(err, &Errors{}) {
				t.Fatalf("Validate returned %T, not Errors: %v", err, err)
			}
			_ = err.Error()
		}
		if _, err := in.Digest(); err != nil {
			t.Fatalf("Digest: %v", err)
		}
		if err := ApplyEnv(t.Context(), in, mapLookup(nil)); err != nil {
			t.Fatalf("ApplyEnv with no variables: %v", err)
		}
	})
}
