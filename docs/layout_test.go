// Package docs holds the operator's documentation; its one test holds
// layout.md's map of the code against the tree.
package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// mappedPaths reads the folders layout.md's map names: each line's first
// words ending in "/" (several separated by ", "), nested under the line
// above them that is indented less.
func mappedPaths(t *testing.T, text string) map[string]bool {
	t.Helper()
	_, block, ok := strings.Cut(text, "```\n")
	if !ok {
		t.Fatal("layout.md has no map (a ``` block)")
	}
	block, _, _ = strings.Cut(block, "```")
	type level struct {
		indent int
		path   string
	}
	var stack []level
	out := map[string]bool{}
	for _, line := range strings.Split(block, "\n") {
		trimmed := strings.TrimLeft(line, " ")
		if trimmed == "" {
			continue
		}
		indent := len(line) - len(trimmed)
		for len(stack) > 0 && stack[len(stack)-1].indent >= indent {
			stack = stack[:len(stack)-1]
		}
		parent := ""
		if len(stack) > 0 {
			parent = stack[len(stack)-1].path
		}
		var first string
		for _, word := range strings.Split(trimmed, ", ") {
			name, _, _ := strings.Cut(word, " ")
			if !strings.HasSuffix(name, "/") {
				break
			}
			p := parent + name
			out[strings.TrimSuffix(p, "/")] = true
			if first == "" {
				first = p
			}
		}
		if first != "" {
			stack = append(stack, level{indent, first})
		}
	}
	return out
}

// TestLayoutListsEveryPackage: every folder of the module that holds Go
// code is on layout.md's map, and the map names no folder that is gone.
func TestLayoutListsEveryPackage(t *testing.T) {
	text, err := os.ReadFile("layout.md")
	if err != nil {
		t.Fatal(err)
	}
	mapped := mappedPaths(t, string(text))
	root := ".."
	var missing []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !mapped[rel] && !slices.Contains(missing, rel) {
			missing = append(missing, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Errorf("package %s is not on docs/layout.md's map: add a line for it", m)
	}
	for p := range mapped {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("docs/layout.md names %s/, which is not in the tree", p)
		}
	}
}
