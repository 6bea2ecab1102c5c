package charts

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/action"
	ci "helm.sh/helm/v4/pkg/chart"
	"helm.sh/helm/v4/pkg/chart/common"
	commonutil "helm.sh/helm/v4/pkg/chart/common/util"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/engine"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
)

// Manifest is one rendered document of a chart.
type Manifest struct {
	// Template is the file it comes from, inside the chart, e.g.
	// "service/templates/deployment.yaml" or, for a CRD,
	// "gitops-runtime/charts/sealed-secrets/crds/x.yaml".
	Template string
	// Content is the document's YAML.
	Content string
	// Hook: the document is a Helm hook (helm.sh/hook), which Helm runs
	// around the release's install, upgrade or uninstall rather than
	// keeping it in the release.
	Hook bool
	// CRD: the document comes from a crds/ folder of the chart or of a
	// subchart it enables. Helm installs those itself, as they are,
	// before a release's first install (never on an upgrade) and never
	// deletes them; they are not part of the release.
	CRD bool
}

// MissingDependencyError is a chart package that lacks a subchart its
// Chart.yaml declares: Helm refuses to install it.
type MissingDependencyError struct {
	// Chart is the chart (name-version) whose dependency is missing, and
	// Path its place in the package (gitops-runtime/charts/argo-cd).
	Chart, Path string
	Missing     []string
}

func (e *MissingDependencyError) Error() string {
	return fmt.Sprintf("chart %s (%s): Chart.yaml declares %s, but the package has no such subchart in %s/charts/: use the chart's published package (helm pull), or run 'helm dependency build' before packaging it",
		e.Chart, e.Path, strings.Join(e.Missing, ", "), e.Path)
}

// Template renders chart c for a release called release in namespace with
// the given user values, in-process, the way Helm v4's install renders it
// (the SDK's client-only dry run, `helm template --include-crds`), with the
// SDK's own functions for every step:
//
//   - every subchart Chart.yaml declares must be in the package
//     (action.CheckDependencies, at every level): a *MissingDependencyError
//     otherwise;
//   - dependencies are processed on a copy of c (c itself is left as it
//     is, so that it can be rendered again with other values):
//     conditions, tags, aliases and import-values
//     (chartutil.ProcessDependencies);
//   - the chart's kubeVersion is checked and the values are coalesced and
//     validated against the charts' values.schema.json
//     (ToRenderValuesWithSchemaValidation), with Helm's default
//     capabilities;
//   - the templates are rendered (engine.Engine) and split into hooks
//     and manifests (releaseutil.SortManifests, which also drops partials,
//     empty documents and hooks of unknown events), NOTES.txt left out;
//   - the crds/ folders of the chart and its enabled subcharts
//     (Chart.CRDObjects) come first, as Helm installs them first.
//
// Documents come back one per Manifest: CRDs, then hooks, then the other
// manifests, each group in Helm's install order.
func Template(c *chartv2.Chart, release, namespace string, values map[string]any) ([]Manifest, error) {
	if c == nil || c.Metadata == nil {
		return nil, errors.New("render: no chart")
	}
	if err := checkDependencies(c, c.Name()); err != nil {
		return nil, err
	}
	if values == nil {
		values = map[string]any{}
	}
	cp := Clone(c)
	if err := chartutil.ProcessDependencies(cp, values); err != nil {
		return nil, fmt.Errorf("chart %s: dependencies: %w", c.Name(), err)
	}
	caps := common.DefaultCapabilities
	if kv := cp.Metadata.KubeVersion; kv != "" && !chartutil.IsCompatibleRange(kv, caps.KubeVersion.String()) {
		return nil, fmt.Errorf("chart %s requires kubeVersion %s, which is incompatible with Kubernetes %s", c.Name(), kv, caps.KubeVersion.Version)
	}
	top, err := commonutil.ToRenderValuesWithSchemaValidation(cp, values, common.ReleaseOptions{
		Name:      release,
		Namespace: namespace,
		Revision:  1,
		IsInstall: true,
	}, caps, false)
	if err != nil {
		return nil, fmt.Errorf("chart %s: values: %w", c.Name(), err)
	}
	e := engine.Engine{CustomTemplateFuncs: templateFuncs}
	files, err := e.Render(cp, top)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", c.Name(), err)
	}
	for name := range files {
		if strings.HasSuffix(name, "NOTES.txt") {
			delete(files, name)
		}
	}
	hooks, manifests, err := releaseutil.SortManifests(files, nil, releaseutil.InstallOrder)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", c.Name(), err)
	}
	var out []Manifest
	for _, crd := range cp.CRDObjects() {
		for _, doc := range splitDocuments(string(crd.File.Data)) {
			out = append(out, Manifest{Template: crd.Filename, Content: doc, CRD: true})
		}
	}
	for _, h := range hooks {
		out = append(out, Manifest{Template: h.Path, Content: h.Manifest, Hook: true})
	}
	for _, m := range manifests {
		out = append(out, Manifest{Template: m.Name, Content: m.Content})
	}
	return out, nil
}

// splitDocuments splits a YAML stream the way Helm does
// (releaseutil.SplitManifests), in order, empty documents left out.
func splitDocuments(s string) []string {
	docs := releaseutil.SplitManifests(s)
	keys := slices.Collect(maps.Keys(docs))
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	var out []string
	for _, k := range keys {
		if strings.TrimSpace(docs[k]) != "" {
			out = append(out, docs[k])
		}
	}
	return out
}

// checkDependencies is action.CheckDependencies (what `helm install`
// refuses a chart for) at every level of the package.
func checkDependencies(c *chartv2.Chart, at string) error {
	if deps := c.Metadata.Dependencies; len(deps) > 0 {
		reqs := make([]ci.Dependency, len(deps))
		for i, d := range deps {
			reqs[i] = d
		}
		if err := action.CheckDependencies(c, reqs); err != nil {
			var missing []string
			for _, d := range deps {
				if !slices.ContainsFunc(c.Dependencies(), func(s *chartv2.Chart) bool { return s.Name() == d.Name }) {
					missing = append(missing, d.Name+" "+d.Version)
				}
			}
			return &MissingDependencyError{Chart: c.Name() + "-" + c.Metadata.Version, Path: at, Missing: missing}
		}
	}
	for _, d := range c.Dependencies() {
		if err := checkDependencies(d, at+"/charts/"+d.Name()); err != nil {
			return err
		}
	}
	return nil
}

// Clone copies a chart deeply enough for Helm's dependency processing,
// which rewrites a chart's metadata (aliases, enabled flags), its
// dependencies and its values in place: the copy can be processed and the
// original rendered again. Templates and files are shared (nothing
// changes them).
func Clone(c *chartv2.Chart) *chartv2.Chart {
	out := *c
	if c.Metadata != nil {
		md := *c.Metadata
		md.Dependencies = make([]*chartv2.Dependency, len(c.Metadata.Dependencies))
		for i, d := range c.Metadata.Dependencies {
			cp := *d
			cp.Tags = slices.Clone(d.Tags)
			cp.ImportValues = slices.Clone(d.ImportValues)
			md.Dependencies[i] = &cp
		}
		if c.Metadata.Dependencies == nil {
			md.Dependencies = nil
		}
		out.Metadata = &md
	}
	out.Values = copyValues(c.Values)
	subs := make([]*chartv2.Chart, 0, len(c.Dependencies()))
	for _, d := range c.Dependencies() {
		subs = append(subs, Clone(d))
	}
	out.SetDependencies(subs...)
	return &out
}

// copyValues copies the maps and lists of a values tree (scalars are
// immutable).
func copyValues(v map[string]any) map[string]any {
	if v == nil {
		return nil
	}
	out := make(map[string]any, len(v))
	for k, x := range v {
		out[k] = copyValue(x)
	}
	return out
}

func copyValue(x any) any {
	switch t := x.(type) {
	case map[string]any:
		return copyValues(t)
	case []any:
		l := make([]any, len(t))
		for i, e := range t {
			l[i] = copyValue(e)
		}
		return l
	default:
		return x
	}
}
