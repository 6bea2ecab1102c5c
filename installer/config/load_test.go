package config

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const layered = `apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: "2.8.0"
  domain: file.example.com
  profile: medium
  namespace: from-file
  registry:
    host: file-registry.internal
    pathPrefix: file
`

func TestLoadPrecedence(t *testing.T) {
	path := writeFile(t, t.TempDir(), "onprem.yaml", layered)
	large, flagNS := "large", "from-flag"
	in, src, err := Load(context.Background(), LoadOptions{
		Path: path,
		Lookup: mapLookup(map[string]string{
			"ONPREM_VERSION":         "2.9.0",         // env over file
			"ONPREM_PROFILE":         "small",         // flag over env over file
			"ONPREM_NAMESPACE":       "from-env",      // flag over env
			"ONPREM_TLS_MODE":        "selfSigned",    // env over default
			"ONPREM_DOMAIN":          "",              // empty: the file wins
			"OTHER_DOMAIN":           "x.example.com", // not ours
			"ONPREM_IMAGES_PLATFORM": "quay.io/env",   // env over default
		}),
		Overrides: Overrides{Profile: &large, Namespace: &flagNS},
		Validate:  testValidateOptions,
	})
	if err != nil {
		t.Fatal(err)
	}
	s := in.Spec
	for _, c := range []struct{ name, got, want string }{
		{"version (env > file)", s.Version, "2.9.0"},
		{"profile (flag > env > file)", s.Profile, "large"},
		{"namespace (flag > env > file)", s.Namespace, "from-flag"},
		{"domain (file, empty env)", s.Domain, "file.example.com"},
		{"registry host (file)", s.Registry.Host, "file-registry.internal"},
		{"images (env > default)", s.Images.Platform, "quay.io/env"},
		{"ingress class (default)", s.Ingress.ClassName, "onprem"},
		{"name (default)", in.Metadata.Name, "onprem"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
	for path, want := range map[string]string{
		"spec.version":   "environment variable ONPREM_VERSION",
		"spec.profile":   FlagOrigin,
		"spec.namespace": FlagOrigin,
		"spec.domain":    "",
	} {
		if got := src.Origin(path); got != want {
			t.Errorf("Origin(%s) = %q, want %q", path, got, want)
		}
	}
	if src.Line("spec.domain") != 5 {
		t.Errorf("Line(spec.domain) = %d", src.Line("spec.domain"))
	}
}

func TestLoadErrorsNameTheirOrigin(t *testing.T) {
	path := writeFile(t, t.TempDir(), "onprem.yaml", layered)
	bad := "ci.example.com/"
	_, _, err := Load(context.Background(), LoadOptions{
		Path:      path,
		Lookup:    mapLookup(map[string]string{"ONPREM_PROFILE": "xl", "ONPREM_REGISTRY_PATH_PREFIX": "Bad"}),
		Overrides: Overrides{Domain: &bad},
		Validate:  testValidateOptions,
	})
	assertErrors(t, err,
		`spec.domain: "ci.example.com/" must not include a path (valid: a lowercase DNS name such as ci.example.com); did you mean "ci.example.com"?; set by a command-line flag`,
		`spec.profile: "xl" is not valid (valid: small, medium, large); set by environment variable ONPREM_PROFILE`,
		`spec.registry.pathPrefix: "Bad" is not a valid repository path: component "Bad" must be lowercase letters and digits, separated by '.', '_', '__' or '-' (e.g. onprem or team/onprem), with no leading, trailing or double '/'; set by environment variable ONPREM_REGISTRY_PATH_PREFIX`,
	)
}

func TestLoadFlagsCanClearAValue(t *testing.T) {
	path := writeFile(t, t.TempDir(), "onprem.yaml", layered)
	none := ""
	in, _, err := Load(context.Background(), LoadOptions{
		Path:      path,
		Lookup:    mapLookup(nil),
		Overrides: Overrides{RegistryHost: &none, RegistryPathPrefix: &none},
		Validate:  testValidateOptions,
	})
	if err != nil {
		t.Fatal(err)
	}
	if in.Spec.Registry != (Registry{}) {
		t.Fatalf("registry = %+v, want it cleared by the flags", in.Spec.Registry)
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope", "onprem.yaml")
	_, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(nil)})
	if err == nil {
		t.Fatal("no error")
	}
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error does not wrap fs.ErrNotExist: %v", err)
	}
	if errors.As(err, &Errors{}) {
		t.Errorf("a missing file is not a configuration error: %v", err)
	}
	for _, want := range []string{path, "onprem config init"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestLoadDefaultPath(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, DefaultPath, layered)
	t.Chdir(dir)
	in, src, err := Load(context.Background(), LoadOptions{Lookup: mapLookup(nil)})
	if err != nil {
		t.Fatal(err)
	}
	if in.Spec.Domain != "file.example.com" || src.Filename() != DefaultPath {
		t.Fatalf("loaded %q from %q", in.Spec.Domain, src.Filename())
	}
}

func TestLoadReturnsErrorsForBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct {
		content string
		env     map[string]string
		want    string
	}{
		"decode":   {"spec: []\n", nil, "onprem.yaml:1: spec: expected a mapping"},
		"env":      {layered, map[string]string{"ONPREM_LEGACY_NATS_ENABLED": "sometimes"}, `ONPREM_LEGACY_NATS_ENABLED="sometimes"`},
		"validate": {strings.Replace(layered, "profile: medium", "profile: huge", 1), nil, `onprem.yaml:6: spec.profile: "huge" is not valid`},
	} {
		t.Run(name, func(t *testing.T) {
			path := writeFile(t, dir, "onprem.yaml", tc.content)
			in, src, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(tc.env), Validate: testValidateOptions})
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("got %T %v, want Errors", err, err)
			}
			if in != nil || src != nil {
				t.Error("a result came back with the error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestLoadResolvesOverlaysAgainstTheFile(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "site")
	abs := filepath.Join(root, "abs", "overlay")
	want := []string{filepath.Join(dir, "overlays", "labels"), filepath.Join(root, "shared", "policies"), abs}
	for _, d := range want {
		writeFile(t, d, "kustomization.yaml", "kind: Component\n")
	}
	content := layered + "  overlays:\n    - overlays/labels\n    - ../shared/./policies\n    - " + abs + "/\n"
	path := writeFile(t, dir, "onprem.yaml", content)
	in, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(nil), Validate: testValidateOptions})
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range in.Spec.Overlays {
		if o != want[i] {
			t.Errorf("overlays[%d] = %q, want %q", i, o, want[i])
		}
	}
}

// An overlay folder that is missing, not a folder, without a
// kustomization, of the wrong kind, or naming a file it does not hold is a
// configuration error naming spec.overlays[i] and its line.
func TestLoadChecksOverlayFolders(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "empty"), "README", "nothing here\n")
	writeFile(t, dir, "file-not-folder", "x\n")
	writeFile(t, filepath.Join(dir, "with-resources"), "kustomization.yaml", "kind: Kustomization\nresources: [a.yaml]\n")
	writeFile(t, filepath.Join(dir, "wrong-kind"), "kustomization.yaml", "kind: Deployment\n")
	writeFile(t, filepath.Join(dir, "missing-patch"), "kustomization.yaml", "kind: Component\npatches:\n  - path: replicas.yaml\n")
	writeFile(t, filepath.Join(dir, "broken-yaml"), "kustomization.yaml", "kind: [Component\n")
	writeFile(t, filepath.Join(dir, "good"), "kustomization.yaml", "kind: Component\npatches:\n  - path: p.yaml\n")
	writeFile(t, filepath.Join(dir, "good"), "p.yaml", "kind: Deployment\n")
	content := layered + "  overlays:\n    - missing\n    - empty\n    - file-not-folder\n    - with-resources\n    - wrong-kind\n    - missing-patch\n    - broken-yaml\n    - good\n"
	path := writeFile(t, dir, "onprem.yaml", content)
	_, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(nil), Validate: testValidateOptions})
	var errs Errors
	if !errors.As(err, &errs) {
		t.Fatalf("want configuration errors, got %v", err)
	}
	text := err.Error()
	for _, want := range []string{
		"spec.overlays[0]: folder " + filepath.Join(dir, "missing") + " does not exist",
		"spec.overlays[1]: " + filepath.Join(dir, "empty") + " has no kustomization.yaml",
		"spec.overlays[2]: " + filepath.Join(dir, "file-not-folder") + " is not a folder",
		"spec.overlays[3]: ", "is a Kustomization with resources",
		"spec.overlays[4]: ", "kind Deployment is not a kustomize Component",
		"spec.overlays[5]: ", "names replicas.yaml, which is not in",
		"spec.overlays[6]: ", "not a kustomization",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the errors lack %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "spec.overlays[7]") {
		t.Errorf("the good overlay is reported:\n%s", text)
	}
}

func TestOverridesApply(t *testing.T) {
	v, ns, d, p, h, pp := "2.9.0", "ns", "d.example.com", "large", "r.internal", ""
	in := &Installation{Spec: Spec{Registry: Registry{PathPrefix: "keep-me-not"}}}
	Overrides{Version: &v, Namespace: &ns, Domain: &d, Profile: &p, RegistryHost: &h, RegistryPathPrefix: &pp}.Apply(in)
	want := Spec{Version: v, Namespace: ns, Domain: d, Profile: p, Registry: Registry{Host: h}}
	if in.Spec.Version != want.Version || in.Spec.Namespace != want.Namespace || in.Spec.Domain != want.Domain ||
		in.Spec.Profile != want.Profile || in.Spec.Registry != want.Registry {
		t.Fatalf("applied %+v", in.Spec)
	}
	before := clone(t, in)
	Overrides{}.Apply(in)
	if got := changedPaths(t, before, in); len(got) != 0 {
		t.Fatalf("empty overrides changed %q", got)
	}
	Overrides{}.Apply(nil) // must not panic
}

// Decoding problems (unknown fields, wrong types) do not hide validation
// problems elsewhere in the file: every problem is reported at once, and a
// field that failed to decode is not reported a second time as missing.
func TestLoadReportsDecodeAndValidationProblemsTogether(t *testing.T) {
	dir := t.TempDir()
	content := `apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: 2.8
  domain: https://ci.example.com
  profile: xl
  databses: {}
  modules:
    pipelines: {enabled: maybe}
`
	path := writeFile(t, dir, "onprem.yaml", content)
	_, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(nil), Validate: testValidateOptions})
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("got %T %v, want Errors", err, err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Path)
	}
	want := []string{"spec.version", "spec.domain", "spec.profile", "spec.databses", "spec.modules.pipelines.enabled"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("paths = %v\nwant    %v\n%v", got, want, err)
	}
	if strings.Contains(err.Error(), "spec.version: required") {
		t.Errorf("a field that failed to decode is reported again as missing:\n%v", err)
	}
}
