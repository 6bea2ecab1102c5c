package config

import (
	"errors"
	"fmt"
	"testing"
)

func TestFieldErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		err  FieldError
		want string
	}{
		{FieldError{File: "onprem.yaml", Line: 12, Path: "spec.profile", Message: `"xl" is not valid (valid: small, medium, large)`},
			`onprem.yaml:12: spec.profile: "xl" is not valid (valid: small, medium, large)`},
		{FieldError{File: "onprem.yaml", Line: 7, Path: "spec.databases.mongodb.mdoe", Message: "unknown field", Hint: `did you mean "mode"?`},
			`onprem.yaml:7: spec.databases.mongodb.mdoe: unknown field; did you mean "mode"?`},
		{FieldError{File: "onprem.yaml", Path: "spec.domain", Message: "required"},
			`onprem.yaml: spec.domain: required`},
		{FieldError{Path: "spec.profile", Message: "bad", Hint: "set by a command-line flag"},
			`spec.profile: bad; set by a command-line flag`},
		{FieldError{File: "onprem.yaml", Line: 3, Message: "invalid YAML: x"},
			`onprem.yaml:3: invalid YAML: x`},
		{FieldError{Line: 3, Message: "m"}, `line 3: m`},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("got  %s\nwant %s", got, tc.want)
		}
	}
}

func TestErrorsSortedOneLinePerProblem(t *testing.T) {
	c := newCollector(NewSource("onprem.yaml"))
	c.addAt(9, "spec.b", "", "second")
	c.addAt(3, "spec.z", "", "first")
	c.addAt(9, "spec.a", "", "also second")
	c.addAt(9, "spec.a", "", "also second") // recorded once
	err := c.err()
	want := "onprem.yaml:3: spec.z: first\n" +
		"onprem.yaml:9: spec.a: also second\n" +
		"onprem.yaml:9: spec.b: second"
	if err == nil || err.Error() != want {
		t.Fatalf("got\n%v\nwant\n%s", err, want)
	}

	wrapped := fmt.Errorf("loading: %w", err)
	var es Errors
	if !errors.As(wrapped, &es) || len(es) != 3 {
		t.Fatalf("errors.As(Errors) = %v, %d problems", errors.As(wrapped, &es), len(es))
	}
	if !errors.As(err, &Errors{}) {
		t.Fatal("errors.As(err, &Errors{}) is false")
	}
}

func TestCollectorWithoutProblemsIsNil(t *testing.T) {
	if err := newCollector(nil).err(); err != nil {
		t.Fatalf("err() = %#v, want a nil error interface", err)
	}
}

func TestCollectorNamesOrigin(t *testing.T) {
	src := NewSource("onprem.yaml")
	src.setLine("spec.profile", 5)
	src.setLine("spec.tls", 8)
	src.setOrigin("spec.profile", "environment variable ONPREM_PROFILE")
	c := newCollector(src)
	c.add("spec.profile", "", `"xl" is not valid`)
	c.add("spec.tls.secretName", "", "required")
	want := "spec.profile: \"xl\" is not valid; set by environment variable ONPREM_PROFILE\n" +
		"onprem.yaml:8: spec.tls.secretName: required"
	if got := c.err().Error(); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
