package render

import (
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"
)

// WriteYAML writes the result as one YAML stream, ready for review or for
// `kubectl apply --dry-run`: a comment names each component before its
// objects, and a header lists the Secrets that the installer generates
// (names and keys only; values exist only in the cluster).
func WriteYAML(w io.Writer, res *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# onprem platform %s, namespace %s\n", res.Version, res.Namespace)
	if len(res.Secrets) > 0 {
		b.WriteString("# Secrets generated once at install and kept in the cluster (not rendered):\n")
		for _, s := range res.Secrets {
			keys := make([]string, 0, len(s.Keys))
			for _, k := range s.Keys {
				keys = append(keys, k.Name)
			}
			fmt.Fprintf(&b, "#   %s (%s): %s\n", s.Name, strings.Join(keys, ", "), s.Purpose)
		}
	}
	for _, c := range res.Components {
		src := "manifests/"
		if c.Chart != "" {
			src = "chart " + c.Chart + " " + c.ChartVersion
		}
		fmt.Fprintf(&b, "# component %s (%s)\n", c.Name, src)
		for _, o := range c.Objects {
			data, err := yaml.Marshal(o.Object)
			if err != nil {
				return fmt.Errorf("%s %s/%s: %w", c.Name, o.GetKind(), o.GetName(), err)
			}
			b.WriteString("---\n")
			b.Write(data)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
