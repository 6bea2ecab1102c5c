package attachment

import (
	"fmt"
	"sort"
	"strings"
)

// ConflictError refuses an attachment that would clash with another, or
// with the platform: nothing was touched.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// NotFoundError: no attachment of that kind and name is recorded.
type NotFoundError struct {
	// Kind is "runner", "runtime".
	Kind string
	// Recorded says how the installation holds one: "registered with",
	// "installed in".
	Recorded string
	Name     string
	Known    []string
}

func (e *NotFoundError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("no %s %q is %s this installation (it has none)", e.Kind, e.Name, e.Recorded)
	}
	return fmt.Sprintf("no %s %q is %s this installation; its %ss: %s", e.Kind, e.Name, e.Recorded, e.Kind, strings.Join(e.Known, ", "))
}

// Names lists the names of records, sorted.
func Names[R any](records map[string]R) []string {
	names := make([]string, 0, len(records))
	for n := range records {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
