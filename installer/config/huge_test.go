package config

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeBench(path, content string) error { return os.WriteFile(path, []byte(content), 0o600) }

// maxMessage is the most a configuration error may say about one huge
// value.
const maxMessage = 1024

// A huge value (in the file, an environment variable or a flag) is never
// echoed whole: the message quotes a short prefix, one line per field; a
// file too large to be a configuration is refused before it is parsed
// (issue 33, item 8).
func TestHugeValuesAreNotEchoed(t *testing.T) {
	const head = "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: \"2.8.0\"\n"
	big := strings.Repeat("a", MaxFileSize-1024)
	long := strings.Repeat("b", 128<<10) // as long as Linux lets one argument or variable be
	key := strings.Repeat("c", 1000)
	for _, c := range []struct {
		name    string
		content string
		env     map[string]string
		flag    *string
		paths   []string
		says    string
	}{
		{"domain in the file", head + "  domain: " + big + "\n", nil, nil, []string{"spec.domain"}, "bytes"},
		{"namespace in the file", head + "  domain: ci.example.com\n  namespace: " + big + "\n", nil, nil, []string{"spec.namespace"}, "bytes"},
		{"profile in the file", head + "  domain: ci.example.com\n  profile: " + big + "\n", nil, nil, []string{"spec.profile"}, "bytes"},
		// YAML keys are at most 1024 characters long.
		{"unknown key", head + "  domain: ci.example.com\n  " + key + ": 1\n", nil, nil, []string{`spec["cccc`}, "unknown field"},
		{"a whole number", head + "  domain: ci.example.com\n  rotation: {keysMaxAgeDays: " + strings.Repeat("9", 1<<20) + "}\n", nil, nil, []string{"spec.rotation.keysMaxAgeDays"}, "..."},
		{"environment", head + "  domain: ci.example.com\n", map[string]string{"ONPREM_DOMAIN": long, "ONPREM_PROFILE": long, "ONPREM_LEGACY_NATS_ENABLED": long}, nil,
			[]string{"spec.domain", "spec.legacy.nats.enabled", "spec.profile"}, "bytes"},
		{"flag", head + "  domain: ci.example.com\n", nil, &long, []string{"spec.namespace"}, "bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeFile(t, t.TempDir(), "onprem.yaml", c.content)
			_, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(c.env), Overrides: Overrides{Namespace: c.flag}, Validate: testValidateOptions})
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("got %T %.300v", err, err)
			}
			if len(es) != len(c.paths) {
				t.Errorf("%d problems, want %d: %.2000v", len(es), len(c.paths), err)
			}
			for i, e := range es {
				if len(e.Error()) > maxMessage {
					t.Errorf("problem %d is %d bytes: %.300s", i, len(e.Error()), e.Error())
				}
				if i < len(c.paths) && !strings.HasPrefix(e.Path, c.paths[i]) {
					t.Errorf("problem %d is about %.100s, want %s", i, e.Path, c.paths[i])
				}
				if !strings.Contains(e.Message, c.says) {
					t.Errorf("problem %d lacks %q: %.300s", i, c.says, e.Error())
				}
			}
		})
	}
}

func TestTooLargeFileIsRefusedUnread(t *testing.T) {
	path := writeFile(t, t.TempDir(), "onprem.yaml", "spec:\n  domain: "+strings.Repeat("a", 50<<20)+"\n")
	_, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(nil)})
	var es Errors
	if !errors.As(err, &es) || len(err.Error()) > maxMessage || !strings.Contains(err.Error(), "is larger than 4 MiB") {
		t.Fatalf("got %.300v", err)
	}
	if _, _, err := Decode("x.yaml", []byte(strings.Repeat("#", MaxFileSize+1))); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Decode: %.300v", err)
	}
}

// BenchmarkLoadHugeValue is what a value as large as the file may hold
// costs, in time and memory, in each of the fields the issue names.
func BenchmarkLoadHugeValue(b *testing.B) {
	big := strings.Repeat("a", MaxFileSize-1024)
	for _, field := range []string{"domain", "namespace", "profile"} {
		b.Run(field, func(b *testing.B) {
			content := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: \"2.8.0\"\n  " + field + ": " + big + "\n"
			dir := b.TempDir()
			path := dir + "/onprem.yaml"
			if err := writeBench(path, content); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(nil)}); err == nil {
					b.Fatal("accepted")
				}
			}
		})
	}
}

// A path that cannot be opened is the operator's to fix (exit 2), as a
// missing file or a folder is.
func TestUnopenablePathIsAConfigurationError(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "file", "x")
	for _, path := range []string{strings.Repeat("0", 300), filepath.Join(file, "onprem.yaml"), dir} {
		_, _, err := Load(context.Background(), LoadOptions{Path: path, Lookup: mapLookup(nil)})
		var es Errors
		if !errors.As(err, &es) {
			t.Errorf("%.40s: %T %v, want configuration errors", path, err, err)
		}
	}
}
