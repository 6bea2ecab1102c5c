package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"onprem.dev/onprem/installer/quote"
)

// Limits that keep a hostile or broken file (aliases that expand
// exponentially, an alias inside its own anchor) from exhausting memory.
const (
	maxNodes = 1 << 17
	maxDepth = 200
)

// YAML tags the walker tells apart.
const (
	tagNull      = "!!null"
	tagStr       = "!!str"
	tagBool      = "!!bool"
	tagInt       = "!!int"
	tagFloat     = "!!float"
	tagTimestamp = "!!timestamp"
	tagBinary    = "!!binary"
	tagMerge     = "!!merge"
)

// walker walks a YAML node tree alongside a Go type, recording the line of
// every field in the Source, reporting every mismatch, and building a
// JSON-compatible tree (maps keyed by json names) for encoding/json.
type walker struct {
	src     *Source
	errs    *collector
	budget  int
	depth   int
	aborted bool
}

// enter accounts for one more node on the current descent; it refuses once
// the document is too large or too deep.
func (w *walker) enter(n *yaml.Node, path string) bool {
	if w.aborted {
		return false
	}
	w.budget--
	w.depth++
	if w.budget < 0 || w.depth > maxDepth {
		w.aborted = true
		w.errs.addAt(n.Line, path, "",
			"the document is too large or too deeply nested (more than %d values or %d levels, counting YAML aliases as often as they are used)", maxNodes, maxDepth)
		return false
	}
	return true
}

func (w *walker) leave() { w.depth-- }

// value converts n for a field of type t. ok is false when the field should
// stay unset: n is null, or n is wrong (and a problem was recorded).
func (w *walker) value(n *yaml.Node, t reflect.Type, path string) (v any, ok bool) {
	if n == nil || !w.enter(n, path) {
		return nil, false
	}
	defer w.leave()

	n = resolveAlias(n)
	if n == nil {
		return nil, false
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Interface {
		return w.free(n, path)
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == tagNull {
		return nil, false
	}

	switch t.Kind() {
	case reflect.Struct:
		return w.structValue(n, t, path)
	case reflect.Map:
		return w.mapValue(n, t, path)
	case reflect.Slice:
		return w.sliceValue(n, t, path)
	case reflect.String:
		if n.Kind == yaml.ScalarNode && n.ShortTag() == tagStr {
			return n.Value, true
		}
		w.typeError(n, path, "a string")
		return nil, false
	case reflect.Bool:
		if n.Kind == yaml.ScalarNode && n.ShortTag() == tagBool {
			var b bool
			if err := n.Decode(&b); err == nil {
				return b, true
			}
		}
		w.typeError(n, path, "true or false")
		return nil, false
	case reflect.Int, reflect.Int64:
		if n.Kind == yaml.ScalarNode && n.ShortTag() == tagInt {
			var i int64
			if err := n.Decode(&i); err == nil {
				return i, true
			}
			w.errs.addAt(n.Line, path, "", "%s is out of range: expected a whole number between %d and %d", quote.Text(n.Value), int64(math.MinInt64), int64(math.MaxInt64))
			return nil, false
		}
		w.typeError(n, path, "a whole number")
		return nil, false
	default:
		w.errs.addAt(n.Line, path, "", "this field cannot be read from YAML (type %s)", t)
		return nil, false
	}
}

// structValue reads a mapping into the fields of struct type t.
func (w *walker) structValue(n *yaml.Node, t reflect.Type, path string) (any, bool) {
	if n.Kind != yaml.MappingNode {
		w.typeError(n, path, "a mapping with the fields "+quoteList(fieldNames(t)))
		return nil, false
	}
	out := map[string]any{}
	for _, e := range w.entries(n, path, true) {
		name := e.key.Value
		f, known := findField(t, name)
		if !known {
			fpath := keyPath(path, name)
			w.src.setLine(fpath, e.key.Line)
			if hint := didYouMean(name, fieldNames(t)); hint != "" {
				w.errs.addAt(e.key.Line, fpath, hint, "unknown field")
			} else {
				w.errs.addAt(e.key.Line, fpath, "", "unknown field (valid: %s)", quoteList(fieldNames(t)))
			}
			continue
		}
		fpath := fieldPath(path, name)
		w.src.setLine(fpath, e.key.Line)
		if v, ok := w.value(e.value, f.typ, fpath); ok {
			out[name] = v
		}
	}
	return out, true
}

// mapValue reads a mapping into a map with string keys.
func (w *walker) mapValue(n *yaml.Node, t reflect.Type, path string) (any, bool) {
	if n.Kind != yaml.MappingNode {
		w.typeError(n, path, "a mapping")
		return nil, false
	}
	out := map[string]any{}
	for _, e := range w.entries(n, path, true) {
		kpath := keyPath(path, e.key.Value)
		w.src.setLine(kpath, e.key.Line)
		v, _ := w.value(e.value, t.Elem(), kpath)
		out[e.key.Value] = v
	}
	return out, true
}

// sliceValue reads a sequence into a slice.
func (w *walker) sliceValue(n *yaml.Node, t reflect.Type, path string) (any, bool) {
	if n.Kind != yaml.SequenceNode {
		w.typeError(n, path, "a list")
		return nil, false
	}
	out := make([]any, 0, len(n.Content))
	for i, item := range n.Content {
		ipath := indexPath(path, i)
		w.src.setLine(ipath, item.Line)
		v, _ := w.value(item, t.Elem(), ipath)
		out = append(out, v)
	}
	return out, true
}

// free converts any YAML value (Helm values) into its JSON form. Null stays
// null, which Helm reads as "remove this key".
func (w *walker) free(n *yaml.Node, path string) (any, bool) {
	switch n.Kind {
	case yaml.MappingNode:
		out := map[string]any{}
		for _, e := range w.entries(n, path, true) {
			kpath := keyPath(path, e.key.Value)
			w.src.setLine(kpath, e.key.Line)
			v, _ := w.value(e.value, anyType, kpath)
			out[e.key.Value] = v
		}
		return out, true
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for i, item := range n.Content {
			ipath := indexPath(path, i)
			w.src.setLine(ipath, item.Line)
			v, _ := w.value(item, anyType, ipath)
			out = append(out, v)
		}
		return out, true
	case yaml.ScalarNode:
		return w.freeScalar(n, path)
	default:
		w.errs.addAt(n.Line, path, "", "unsupported YAML node")
		return nil, false
	}
}

var anyType = reflect.TypeFor[any]()

// freeScalar converts a scalar by its YAML tag.
func (w *walker) freeScalar(n *yaml.Node, path string) (any, bool) {
	switch tag := n.ShortTag(); tag {
	case tagNull:
		return nil, true
	case tagStr, tagTimestamp, tagBinary:
		// Timestamps and binary stay as written: Helm values are text.
		return n.Value, true
	case tagBool:
		var b bool
		if err := n.Decode(&b); err != nil {
			w.errs.addAt(n.Line, path, "", "%q is not a boolean (valid: true, false)", n.Value)
			return nil, false
		}
		return b, true
	case tagInt:
		var v any
		if err := n.Decode(&v); err != nil {
			w.errs.addAt(n.Line, path, "", "%q is not a whole number", n.Value)
			return nil, false
		}
		return v, true
	case tagFloat:
		var f float64
		if err := n.Decode(&f); err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			w.errs.addAt(n.Line, path, quoteHint(n), "%s is not a finite number (valid: a decimal number)", quote.Text(n.Value))
			return nil, false
		}
		return f, true
	default:
		w.errs.addAt(n.Line, path, quoteHint(n), "unsupported YAML tag %s (valid: strings, numbers, booleans, null, lists and mappings)", tag)
		return nil, false
	}
}

// entry is one key: value pair of a mapping.
type entry struct{ key, value *yaml.Node }

// entries lists the pairs of a mapping in order, with YAML merge keys (<<)
// expanded (explicit keys win over merged ones, earlier merged mappings over
// later ones). When report is set, duplicate keys and keys that are not
// scalars are reported.
func (w *walker) entries(n *yaml.Node, path string, report bool) []entry {
	var out []entry
	seen := map[string]int{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolveAlias(n.Content[i]), n.Content[i+1]
		if k == nil {
			continue
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == tagMerge {
			merges = append(merges, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			if report {
				w.errs.addAt(k.Line, path, "", "a key here is %s: keys must be names", describe(k))
			}
			continue
		}
		if first, dup := seen[k.Value]; dup {
			if report {
				w.errs.addAt(k.Line, keyPath(path, k.Value), "", "duplicate key (first set at line %d): keep only one", first)
			}
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, entry{k, v})
	}
	for _, m := range merges {
		for _, src := range w.mergeSources(m, path, report) {
			if !w.enter(src, path) {
				return out
			}
			for _, e := range w.entries(src, path, false) {
				if _, dup := seen[e.key.Value]; dup {
					continue
				}
				seen[e.key.Value] = e.key.Line
				out = append(out, e)
			}
			w.leave()
		}
	}
	return out
}

// mergeSources returns the mappings a merge key (<<) points at.
func (w *walker) mergeSources(m *yaml.Node, path string, report bool) []*yaml.Node {
	m = resolveAlias(m)
	if m == nil {
		return nil
	}
	switch m.Kind {
	case yaml.MappingNode:
		return []*yaml.Node{m}
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, item := range m.Content {
			if r := resolveAlias(item); r != nil && r.Kind == yaml.MappingNode {
				out = append(out, r)
			} else if report {
				w.errs.addAt(item.Line, path, "", "the merge key << takes a mapping or a list of mappings, got %s in the list", describe(item))
			}
		}
		return out
	}
	if report {
		w.errs.addAt(m.Line, path, "", "the merge key << takes a mapping or a list of mappings, got %s", describe(m))
	}
	return nil
}

// typeError reports a value of the wrong kind.
func (w *walker) typeError(n *yaml.Node, path, want string) {
	hint := ""
	if want == "a string" {
		hint = quoteHint(n)
	}
	w.errs.addAt(n.Line, path, hint, "expected %s, got %s", want, describe(n))
}

// quoteHint suggests quoting a scalar that YAML read as something else.
func quoteHint(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return ""
	}
	return "quote it to make it a string: " + quote.Value(n.Value)
}

// resolveAlias follows aliases (*name) to the node they name.
func resolveAlias(n *yaml.Node) *yaml.Node {
	for range maxDepth {
		if n == nil || n.Kind != yaml.AliasNode {
			return n
		}
		n = n.Alias
	}
	return nil
}

// describe names a node for a message: "a list", "the number 3".
func describe(n *yaml.Node) string {
	n = resolveAlias(n)
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.DocumentNode:
		return "a document"
	case yaml.ScalarNode:
		v := n.Value
		if len(v) > 40 {
			v = v[:37] + "..."
		}
		switch tag := n.ShortTag(); tag {
		case tagNull:
			return "null"
		case tagStr:
			return "the string " + strconv.Quote(v)
		case tagBool:
			return "the boolean " + v
		case tagInt, tagFloat:
			return "the number " + v
		case tagTimestamp:
			return "the timestamp " + v
		default:
			return fmt.Sprintf("a value tagged %s", strings.TrimSpace(tag))
		}
	}
	return "an unknown YAML node"
}
