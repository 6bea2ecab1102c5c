package config

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"onprem.dev/onprem/installer/quote"
)

// Source remembers where each field of a decoded onprem.yaml came from: the
// line of every field path in the file (spec.runners[0].name style), and the
// fields that an environment variable or a flag set afterwards. Later stages
// (validation, rendering, preflight) use it to name lines in their errors.
// A nil *Source is valid and knows nothing.
type Source struct {
	filename string
	lines    map[string]int
	origins  map[string]string
}

// NewSource returns an empty Source for the named file.
func NewSource(filename string) *Source {
	return &Source{filename: filename, lines: map[string]int{}, origins: map[string]string{}}
}

// Filename is the name of the file the configuration was read from.
func (s *Source) Filename() string {
	if s == nil {
		return ""
	}
	return s.filename
}

func (s *Source) file() string { return s.Filename() }

// Has reports whether the file sets exactly this field path.
func (s *Source) Has(path string) bool {
	if s == nil {
		return false
	}
	_, ok := s.lines[path]
	return ok
}

// Line returns the line of path in the file; when the file does not set
// path, the line of its nearest ancestor that it does set; else 0.
func (s *Source) Line(path string) int {
	if s == nil {
		return 0
	}
	for p := path; p != ""; p = parentPath(p) {
		if l, ok := s.lines[p]; ok {
			return l
		}
	}
	return 0
}

// Paths lists every field path set in the file, sorted.
func (s *Source) Paths() []string {
	if s == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.lines))
}

// Origin says what set path after the file was read, e.g. "environment
// variable ONPREM_PROFILE" or FlagOrigin; empty when the value comes
// from the file or a default.
func (s *Source) Origin(path string) string {
	if s == nil {
		return ""
	}
	return s.origins[path]
}

// setLine records the line of path; the first record wins.
func (s *Source) setLine(path string, line int) {
	if _, ok := s.lines[path]; !ok {
		s.lines[path] = line
	}
}

// setOrigin records that something other than the file set path.
func (s *Source) setOrigin(path, origin string) {
	if s != nil {
		s.origins[path] = origin
	}
}

// locate returns where an error about path should point: the file and line,
// or, for a value set by an environment variable or flag, that origin.
func (s *Source) locate(path string) (file string, line int, origin string) {
	if s == nil {
		return "", 0, ""
	}
	if o := s.origins[path]; o != "" {
		return "", 0, o
	}
	return s.filename, s.Line(path), ""
}

// Field paths are written the way an operator reads them: spec.tls.mode,
// spec.runners[0].name, spec.components.mongodb, and map keys that are not
// plain identifiers quoted: spec.placement.nodeSelector["kubernetes.io/os"].

// fieldPath appends a struct field (or plain map key) to a path.
func fieldPath(parent, name string) string {
	if parent == "" {
		return name
	}
	return parent + "." + name
}

// indexPath appends a list index to a path.
func indexPath(parent string, i int) string {
	return parent + "[" + strconv.Itoa(i) + "]"
}

// keyPath appends a map key, quoting it unless it is a plain identifier. A
// key longer than quote.Max is shortened (quote.Value): a path is shown to
// the operator, and a key of megabytes must not be.
func keyPath(parent, key string) string {
	if len(key) > quote.Max {
		return parent + "[" + quote.Value(key) + "]"
	}
	if isPlainKey(key) {
		return fieldPath(parent, key)
	}
	return parent + "[" + strconv.Quote(key) + "]"
}

func isPlainKey(k string) bool {
	if k == "" {
		return false
	}
	for i, r := range k {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
		case i > 0 && (r >= '0' && r <= '9' || r == '-'):
		default:
			return false
		}
	}
	return true
}

// parentPath drops the last segment of a path ("" for a top-level field).
func parentPath(path string) string {
	last := 0 // start of the last segment
	for i := 0; i < len(path); {
		switch path[i] {
		case '.':
			last = i
			i++
		case '[':
			last = i
			if i+1 < len(path) && path[i+1] == '"' {
				q, err := strconv.QuotedPrefix(path[i+1:])
				if err != nil {
					return path[:i]
				}
				i += 1 + len(q)
			} else {
				i++
			}
		default:
			i++
		}
	}
	return strings.TrimSuffix(path[:last], ".")
}
