package config

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// An overlay whose kustomization holds nothing (empty, blank, comments,
// null, a lone document marker) is refused with its folder's line, never
// taken for an overlay that changes nothing (issue 33, item 1).
func TestEmptyOverlayKustomizationIsRefused(t *testing.T) {
	for _, c := range []struct{ name, content string }{
		{"empty", ""},
		{"whitespace", "  \n\t\n\n"},
		{"comment only", "# patches to come\n"},
		{"null", "null\n"},
		{"document marker", "---\n# nothing\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			kfile := writeFile(t, filepath.Join(dir, "ov"), "kustomization.yaml", c.content)
			path := writeFile(t, dir, "onprem.yaml", layered+"  overlays:\n    - ov\n")
			_, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(nil), Validate: testValidateOptions})
			var errs Errors
			if !errors.As(err, &errs) {
				t.Fatalf("want configuration errors, got %v", err)
			}
			want := path + ":12: spec.overlays[0]: " + kfile + " is empty: write kind: Component"
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error lacks %q:\n%v", want, err)
			}
		})
	}
	// A Component that only names its kind is not empty.
	dir := t.TempDir()
	writeFile(t, dir, "kustomization.yaml", "kind: Component\n")
	if msg := OverlayProblem(dir); msg != "" {
		t.Errorf("kind: Component alone refused: %s", msg)
	}
}
