// Package output prints results for scripts (-o json|yaml) and people
// (tables, YAML streams).
package output

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/quote"
)

// Formats accepted by -o.
const (
	Table = "table"
	JSON  = "json"
	YAML  = "yaml"
)

// Check returns an error unless format is one of allowed.
func Check(format string, allowed ...string) error {
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	return fmt.Errorf("-o %s: not a format here; use one of: %s", quote.Text(format), strings.Join(allowed, ", "))
}

// Encode writes v as indented JSON or as YAML.
func Encode(w io.Writer, format string, v any) error {
	switch format {
	case JSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case YAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("cannot encode as %q", format)
}

// NewTable returns a tab-aligned writer for human tables; call Flush.
func NewTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
}

// Write writes v for scripts (json, yaml) or, with the table format, calls
// human to write it for people.
func Write(w io.Writer, format string, v any, human func(io.Writer)) error {
	if format != Table {
		return Encode(w, format, v)
	}
	human(w)
	return nil
}
