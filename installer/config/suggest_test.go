package config

import "testing"

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"mode", "mode", 0},
		{"mdoe", "mode", 1}, // transposition
		{"mod", "mode", 1},
		{"kitten", "sitting", 3},
		{"", "abc", 3},
		{"héllo", "hello", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestClosest(t *testing.T) {
	fields := []string{"mode", "persistence", "external"}
	for _, tc := range []struct{ in, want string }{
		{"mdoe", "mode"},
		{"Mode", "mode"},
		{"persistense", "persistence"},
		{"extrenal", "external"},
		{"size", ""},
		{"colour", ""},
		{"x", ""},
	} {
		if got := closest(tc.in, fields); got != tc.want {
			t.Errorf("closest(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := didYouMean("registy", []string{"registry", "storage"}); got != `did you mean "registry"?` {
		t.Errorf("didYouMean = %q", got)
	}
	if got := didYouMean("zzz", []string{"registry"}); got != "" {
		t.Errorf("didYouMean = %q, want nothing", got)
	}
}
