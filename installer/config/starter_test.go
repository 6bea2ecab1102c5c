package config

import (
	"regexp"
	"strings"
	"testing"
)

func TestStarterIsValid(t *testing.T) {
	data := Starter("2.9.0")
	in, src, err := Decode("onprem.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	if in.Spec.Version != "2.9.0" || in.Spec.Domain != "ci.example.com" || in.Spec.Profile != "small" {
		t.Fatalf("starter essentials: %+v", in.Spec)
	}
	SetDefaults(in)
	if err := Validate(in, src, testValidateOptions); err != nil {
		t.Fatal(err)
	}
}

func TestStarterQuotesTheVersion(t *testing.T) {
	in, _, err := Decode("onprem.yaml", Starter(`1.0 "odd"`))
	if err != nil {
		t.Fatal(err)
	}
	if in.Spec.Version != `1.0 "odd"` {
		t.Fatalf("version = %q", in.Spec.Version)
	}
}

// exampleLine matches a commented-out example line (a key or a list item),
// as opposed to a line of prose.
var exampleLine = regexp.MustCompile(`^(\s*)# ( *)([a-zA-Z][a-zA-Z0-9./-]*:(\s|$)|- )`)

// TestStarterExamplesAreValid uncomments every example of the starter file:
// together they must form a valid configuration, so that an operator can
// uncomment any of them and only change the values.
func TestStarterExamplesAreValid(t *testing.T) {
	var lines []string
	uncommented := 0
	for line := range strings.Lines(string(Starter("2.9.0"))) {
		if m := exampleLine.FindStringSubmatch(line); m != nil {
			line = m[1] + strings.TrimPrefix(line[len(m[1]):], "# ")
			uncommented++
		}
		lines = append(lines, line)
	}
	full := strings.Join(lines, "")
	in, src, err := Decode("onprem.yaml", []byte(full))
	if err != nil {
		t.Fatalf("%v\n%s", err, full)
	}
	SetDefaults(in)
	if err := Validate(in, src, ValidateOptions{KnownVersions: []string{"2.9.0"}}); err != nil {
		t.Fatalf("%v\n%s", err, full)
	}

	// Every section of the spec has an example.
	spec, _ := findField(installationType, "spec")
	for _, name := range fieldNames(spec.typ) {
		if !src.Has("spec." + name) {
			t.Errorf("the starter file has no example of spec.%s", name)
		}
	}
	if !src.Has("metadata.name") {
		t.Error("the starter file has no example of metadata.name")
	}
	if uncommented < 50 {
		t.Errorf("only %d example lines found", uncommented)
	}
}
