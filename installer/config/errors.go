package config

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"onprem.dev/onprem/installer/quote"
)

// FieldError is one problem in onprem.yaml: where it is, which field, what is
// wrong and, where there is one, a hint at the fix.
type FieldError struct {
	// File is the configuration file, empty when the value did not come from
	// a file (an environment variable, a flag, a program).
	File string
	// Line is the 1-based line of the field in File, 0 when unknown.
	Line int
	// Path is the field path, e.g. spec.runners[0].name; empty for problems
	// with the document as a whole (invalid YAML).
	Path string
	// Message says what is wrong and what would be valid.
	Message string
	// Hint is an optional suggestion, e.g. `did you mean "mode"?`.
	Hint string
}

// Error formats the problem as `file:line: path: message; hint`, leaving out
// the parts that are unknown.
func (e FieldError) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		b.WriteString(e.File + ":" + strconv.Itoa(e.Line) + ": ")
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		b.WriteString("line " + strconv.Itoa(e.Line) + ": ")
	}
	if e.Path != "" {
		b.WriteString(e.Path + ": ")
	}
	b.WriteString(e.Message)
	if e.Hint != "" {
		b.WriteString("; " + e.Hint)
	}
	return b.String()
}

// Errors is every problem found in a configuration, sorted by line then path.
// Decode, Validate, ApplyEnv and Load return it for bad input, so that a
// command can tell a configuration error from any other failure with
// errors.As(err, &config.Errors{}).
type Errors []FieldError

// Error lists the problems, one per line.
func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// sortErrors orders problems by line, then path, then message.
func sortErrors(es Errors) {
	slices.SortStableFunc(es, func(a, b FieldError) int {
		return cmp.Or(
			cmp.Compare(a.Line, b.Line),
			cmp.Compare(a.Path, b.Path),
			cmp.Compare(a.File, b.File),
			cmp.Compare(a.Message, b.Message),
		)
	})
}

// collector gathers problems and locates them through a Source.
type collector struct {
	src  *Source
	errs Errors
	seen map[FieldError]bool
	// quiet are paths already reported for a reason that makes every
	// other problem with them moot (a value too long to be right).
	quiet map[string]bool
}

func newCollector(src *Source) *collector {
	return &collector{src: src, seen: map[FieldError]bool{}, quiet: map[string]bool{}}
}

// sprintf formats a message whose string arguments are what the operator
// gave: %q quotes at most a short prefix of each (quote.Value), so that a
// huge value is never echoed whole.
func sprintf(format string, args ...any) string {
	return fmt.Sprintf(format, quote.Args(args)...)
}

// addAt records a problem at a known line of the source file.
func (c *collector) addAt(line int, path, hint, format string, args ...any) {
	e := FieldError{File: c.src.file(), Line: line, Path: path, Message: sprintf(format, args...), Hint: quote.Line(hint)}
	if c.seen[e] {
		return
	}
	c.seen[e] = true
	c.errs = append(c.errs, e)
}

// add records a problem with a field, located through the source: the line
// of the field (or of its nearest ancestor present in the file), or, when the
// value was set by an environment variable or a flag, that origin as hint.
func (c *collector) add(path, hint, format string, args ...any) {
	if c.quiet[path] {
		return
	}
	file, line, origin := c.src.locate(path)
	if origin != "" {
		hint = strings.TrimPrefix(hint+"; set by "+origin, "; ")
	}
	e := FieldError{File: file, Line: line, Path: path, Message: sprintf(format, args...), Hint: quote.Line(hint)}
	if c.seen[e] {
		return
	}
	c.seen[e] = true
	c.errs = append(c.errs, e)
}

// err returns the problems as a sorted Errors, or nil when there are none.
func (c *collector) err() error {
	if len(c.errs) == 0 {
		return nil
	}
	out := slices.Clone(c.errs)
	sortErrors(out)
	return out
}
