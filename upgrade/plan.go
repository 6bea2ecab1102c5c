package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"reflect"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/diff"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

// PlanOptions is what Plan needs.
type PlanOptions struct {
	// Installation is the configuration (its spec.version is ignored: each
	// step renders its own release).
	Installation *config.Installation
	Releases     *release.Set
	// From is the installed version, To the target.
	From, To string
	// Set holds --set overrides, applied to every step.
	Set []string
	// Installer is this onprem's version; Kubernetes the cluster's ("" to
	// skip that check).
	Installer, Kubernetes string
	// Migrated reports whether a migration already completed (from the
	// state; nil: none did).
	Migrated func(name string) bool
	// Content returns the charts and manifests of a release version (a
	// bundle's); nil, or nil file systems: the embedded ones.
	Content func(version string) (charts, manifests fs.FS)
}

// Plan is an upgrade, step by step.
type Plan struct {
	From  string      `json:"from"`
	To    string      `json:"to"`
	Steps []*StepPlan `json:"steps"`
	// Installed is the rendered installed release (with the current
	// configuration): what the first step starts from.
	Installed *render.Result `json:"-"`
}

// StepPlan is what one step changes.
type StepPlan struct {
	From       string            `json:"from"`
	To         string            `json:"to"`
	Required   bool              `json:"required,omitempty"`
	Notes      string            `json:"notes,omitempty"`
	Components []ComponentChange `json:"components"`
	Migrations []MigrationPlan   `json:"migrations,omitempty"`
	// Diff is the object-level difference: against the live cluster for
	// the first step (filled by the caller, which has the cluster), and
	// against the previous step's rendering for the others.
	Diff []diff.Component `json:"diff,omitempty"`
	// Result is the step's release rendered with the configuration, with
	// its backup and migration tasks.
	Result *render.Result `json:"-"`
	// Release is the step's release.
	Release *release.Release `json:"-"`
	// Charts are the step's charts (nil: the embedded ones).
	Charts fs.FS `json:"-"`
}

// Kinds of component changes.
const (
	ComponentAdded     = "added"
	ComponentRemoved   = "removed"
	ComponentChanged   = "changed"
	ComponentUnchanged = "unchanged"
)

// ComponentChange is what a step does to one component.
type ComponentChange struct {
	Name   string `json:"name"`
	Change string `json:"change"`
	// Chart is chart-version before → after ("" when absent).
	FromChart string        `json:"fromChart,omitempty"`
	ToChart   string        `json:"toChart,omitempty"`
	Images    []ImageChange `json:"images,omitempty"`
	// Values lists the Helm value paths whose values change (the values
	// themselves are not shown: an operator's values may hold secrets).
	Values []string `json:"values,omitempty"`
	// Objects counts the objects added, changed and removed.
	Objects int `json:"objects,omitempty"`
}

// ImageChange is one container's image before and after.
type ImageChange struct {
	Container string `json:"container"`
	From      string `json:"from,omitempty"`
	To        string `json:"to,omitempty"`
}

// MigrationPlan is one migration of a step.
type MigrationPlan struct {
	Name      string `json:"name"`
	Component string `json:"component"`
	// Backups names what is dumped first (engine/service).
	Backups []string `json:"backups,omitempty"`
	Timeout string   `json:"timeout"`
	// Done: it already completed (an earlier, interrupted upgrade ran it);
	// it is not run again.
	Done bool `json:"done,omitempty"`
}

// MakePlan computes the path from opts.From to opts.To, checks that every
// step suits this onprem and the cluster, and renders every release on the
// way with the configuration to say what each step changes.
func MakePlan(ctx context.Context, opts PlanOptions) (*Plan, error) {
	path, err := Path(opts.Releases, opts.From, opts.To)
	if err != nil {
		return nil, err
	}
	if err := Check(path, opts.Installer, opts.Kubernetes); err != nil {
		return nil, err
	}
	installed, err := opts.Releases.Get(opts.From)
	if err != nil {
		return nil, err
	}
	prev, err := renderRelease(ctx, opts, installed, false)
	if err != nil {
		return nil, fmt.Errorf("rendering the installed release %s: %w", installed.Version, err)
	}
	p := &Plan{From: installed.Version, To: opts.From, Installed: prev}
	if len(path) > 0 {
		p.To = path[len(path)-1].Version
	}
	for _, st := range Steps(installed, path) {
		cur, err := renderRelease(ctx, opts, st.To, true)
		if err != nil {
			return nil, fmt.Errorf("step %s: rendering release %s: %w", st, st.To.Version, err)
		}
		// A step the cluster would refuse (a pod the restricted Pod
		// Security Standard does not admit) or the platform's rules
		// forbid is refused before any step runs.
		if err := render.Verify(cur, render.CheckOptionsFor(opts.Installation)); err != nil {
			return nil, fmt.Errorf("step %s: release %s: %w", st, st.To.Version, err)
		}
		charts, _ := opts.content(st.To.Version)
		sp := &StepPlan{From: st.From.Version, To: st.To.Version, Required: st.To.Required, Notes: st.To.Notes,
			Result: cur, Release: st.To, Charts: charts, Components: compare(prev, cur)}
		sp.Migrations = migrations(cur, opts.Migrated)
		if len(p.Steps) > 0 {
			sp.Diff = diff.Rendered(prev, cur)
		}
		p.Steps = append(p.Steps, sp)
		prev = cur
	}
	return p, nil
}

// renderRelease renders rel with the configuration.
func renderRelease(ctx context.Context, opts PlanOptions, rel *release.Release, tasks bool) (*render.Result, error) {
	in := *opts.Installation
	in.Spec.Version = rel.Version
	charts, manifests := opts.content(rel.Version)
	return render.Render(ctx, render.Options{Installation: &in, Release: rel, Set: opts.Set,
		Charts: charts, Manifests: manifests, Tasks: tasks})
}

// content returns a release's charts and manifests.
func (o PlanOptions) content(version string) (fs.FS, fs.FS) {
	if o.Content == nil {
		return nil, nil
	}
	return o.Content(version)
}

func migrations(res *render.Result, migrated func(string) bool) []MigrationPlan {
	var out []MigrationPlan
	var backups []string
	for _, t := range res.Tasks {
		switch t.Kind {
		case render.TaskBackup:
			backups = append(backups, t.Engine+"/"+t.Service)
		case render.TaskMigration:
			m := MigrationPlan{Name: t.Migration, Component: t.Component, Backups: backups, Timeout: t.Timeout.String()}
			m.Done = migrated != nil && migrated(t.Migration)
			out = append(out, m)
			backups = nil
		}
	}
	return out
}

// compare says what happens to each component from one rendering to the
// next, in the order of the new one (removed components last).
func compare(from, to *render.Result) []ComponentChange {
	var out []ComponentChange
	for _, c := range to.Components {
		old := from.Component(c.Name)
		cc := ComponentChange{Name: c.Name, ToChart: chartOf(c)}
		if old == nil {
			cc.Change = ComponentAdded
			cc.Images = imageChanges(nil, c)
			cc.Objects = len(c.Objects)
			out = append(out, cc)
			continue
		}
		cc.FromChart = chartOf(old)
		cc.Images = imageChanges(old, c)
		cc.Values = valueChanges(old.Values, c.Values)
		cc.Objects = countChanged(old, c)
		cc.Change = ComponentUnchanged
		if cc.Objects > 0 || cc.FromChart != cc.ToChart {
			cc.Change = ComponentChanged
		}
		out = append(out, cc)
	}
	for _, c := range from.Components {
		if to.Component(c.Name) == nil {
			out = append(out, ComponentChange{Name: c.Name, Change: ComponentRemoved, FromChart: chartOf(c),
				Images: imageChanges(c, nil), Objects: len(c.Objects)})
		}
	}
	return out
}

func chartOf(c *render.Component) string {
	if c == nil || c.Chart == "" {
		return ""
	}
	return c.Chart + "-" + c.ChartVersion
}

// containerImages maps workload/container to image.
func containerImages(c *render.Component) map[string]string {
	out := map[string]string{}
	if c == nil {
		return out
	}
	for _, o := range c.Objects {
		for _, f := range []string{"initContainers", "containers"} {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", f)
			for _, ct := range cs {
				m, _ := ct.(map[string]any)
				img, _ := m["image"].(string)
				name, _ := m["name"].(string)
				out[o.GetName()+"/"+name] = img
			}
		}
	}
	return out
}

func imageChanges(from, to *render.Component) []ImageChange {
	a, b := containerImages(from), containerImages(to)
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var out []ImageChange
	for k := range keys {
		if a[k] != b[k] {
			out = append(out, ImageChange{Container: k, From: a[k], To: b[k]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Container < out[j].Container })
	return out
}

// valueChanges lists the dotted paths whose values differ.
func valueChanges(a, b map[string]any) []string {
	fa, fb := map[string]string{}, map[string]string{}
	flatten("", a, fa)
	flatten("", b, fb)
	var out []string
	for k, v := range fa {
		if fb[k] != v {
			out = append(out, k)
		}
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

func flatten(prefix string, v any, out map[string]string) {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, x := range m {
			flatten(strings.TrimPrefix(prefix+"."+k, "."), x, out)
		}
		return
	}
	b, _ := json.Marshal(v)
	out[prefix] = string(b)
}

// countChanged counts the objects added, removed or changed.
func countChanged(from, to *render.Component) int {
	a, b := map[string]*unstructured.Unstructured{}, map[string]*unstructured.Unstructured{}
	for _, o := range from.Objects {
		a[o.GetKind()+"/"+o.GetName()] = o
	}
	for _, o := range to.Objects {
		b[o.GetKind()+"/"+o.GetName()] = o
	}
	n := 0
	for k, o := range b {
		if p, ok := a[k]; !ok || !reflect.DeepEqual(p.Object, o.Object) {
			n++
		}
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			n++
		}
	}
	return n
}
