package config

import "testing"

func TestPaths(t *testing.T) {
	for _, tc := range []struct{ path, parent string }{
		{"spec", ""},
		{"spec.tls.mode", "spec.tls"},
		{"spec.runners[0]", "spec.runners"},
		{"spec.runners[0].name", "spec.runners[0]"},
		{`spec.placement.nodeSelector["kubernetes.io/os"]`, "spec.placement.nodeSelector"},
		{`spec.components.x.values["a.b[c]"].d`, `spec.components.x.values["a.b[c]"]`},
		{`spec.components.x.values["a.b[c]"]`, "spec.components.x.values"},
	} {
		if got := parentPath(tc.path); got != tc.parent {
			t.Errorf("parentPath(%s) = %q, want %q", tc.path, got, tc.parent)
		}
	}
	if got := keyPath("spec.components", "pipelines-api"); got != "spec.components.pipelines-api" {
		t.Errorf("keyPath = %s", got)
	}
	if got := keyPath("spec.placement.nodeSelector", "kubernetes.io/os"); got != `spec.placement.nodeSelector["kubernetes.io/os"]` {
		t.Errorf("keyPath = %s", got)
	}
	if got := keyPath("a", ""); got != `a[""]` {
		t.Errorf("keyPath = %s", got)
	}
}

func TestNilSource(t *testing.T) {
	var s *Source
	if s.Line("spec") != 0 || s.Has("spec") || s.Filename() != "" || s.Origin("spec") != "" || s.Paths() != nil {
		t.Fatal("a nil Source must know nothing")
	}
}
