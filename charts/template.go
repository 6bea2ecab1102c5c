package charts

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/engine"
)

// Manifest is one rendered template file of a chart.
type Manifest struct {
	// Template is the template's path inside the chart, e.g.
	// "service/templates/deployment.yaml".
	Template string
	// Content is the rendered YAML (may hold several documents).
	Content string
}

// Template renders chart c for a release called release in namespace with
// the given user values (merged over the chart's values.yaml), the way
// `helm template` does, in-process. NOTES.txt and partials are left out;
// manifests come back sorted by template path.
func Template(c *chartv2.Chart, release, namespace string, values map[string]any) ([]Manifest, error) {
	top, err := chartutil.ToRenderValues(c, values, common.ReleaseOptions{
		Name:      release,
		Namespace: namespace,
		Revision:  1,
		IsInstall: true,
	}, common.DefaultCapabilities)
	if err != nil {
		return nil, fmt.Errorf("chart %s: values: %w", c.Name(), err)
	}
	out, err := engine.Render(c, top)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", c.Name(), err)
	}
	var ms []Manifest
	for name, content := range out {
		base := path.Base(name)
		if strings.HasPrefix(base, "_") || base == "NOTES.txt" {
			continue
		}
		if strings.TrimSpace(content) == "" {
			continue
		}
		ms = append(ms, Manifest{Template: name, Content: content})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Template < ms[j].Template })
	return ms, nil
}
