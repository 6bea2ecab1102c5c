// Package render turns an installation (onprem.yaml) and a release manifest
// into the objects of every component, in-process: Helm SDK for the charts
// with layered values (chart defaults < release < sizing profile < config <
// --set), then one kustomize post-render over the whole platform (built-in
// overlays from manifests/ and generated ones, then the operator's overlay
// folders). No helm or kubectl binary is called, and no cluster is needed.
package render

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/sizing"
	"onprem.dev/onprem/manifests"
)

// ProvisionComponent is the component that gives services their databases.
const ProvisionComponent = "db-provision"

// BackupComponent is the scheduled backup's component (spec.backup).
const BackupComponent = "backup"

// Options is what Render needs. Installation must be defaulted and valid
// (config.Load does both).
type Options struct {
	Installation *config.Installation
	Release      *release.Release
	// Charts holds one folder per chart (default: the embedded charts; a
	// bundle brings its own).
	Charts fs.FS
	// Manifests holds base/ and components/ (default: the embedded ones).
	Manifests fs.FS
	// Set holds --set values, COMPONENT.key=value, applied last.
	Set []string
	// Tasks renders the release's migration and backup Jobs too
	// (Result.Tasks), for an upgrade to this release.
	Tasks bool

	// overlaid are the replicas the operator's overlays give components'
	// workloads (Render finds them), a values layer over --set, so that
	// the chart renders what goes with them (a PodDisruptionBudget,
	// spread over nodes) as it does for replicas set in values.
	overlaid map[string]map[string]any
}

// Component is one rendered component: a Helm release of the platform.
type Component struct {
	Name  string `json:"name"`
	Group string `json:"group"`
	// Chart and ChartVersion are empty for the platform component, which is
	// rendered from manifests/ alone.
	Chart        string                       `json:"chart,omitempty"`
	ChartVersion string                       `json:"chartVersion,omitempty"`
	DependsOn    []string                     `json:"dependsOn,omitempty"`
	Values       map[string]any               `json:"-"`
	Objects      []*unstructured.Unstructured `json:"objects"`
	// ChartCRDs names the CustomResourceDefinitions of Objects that come
	// from the crds/ folders of the chart and its enabled subcharts. Helm
	// installs those itself, as they are, before the release's first
	// install, and never upgrades or deletes them: they are shown,
	// checked and compared like the others, but are not part of the
	// release's manifest (installer/apply).
	ChartCRDs []string `json:"chartCRDs,omitempty"`
	// Loaded, when set, is the chart itself (a remote chart fetched for
	// the render, such as a runtime's), which apply uses instead of
	// reading Chart from its charts.
	Loaded *chartv2.Chart `json:"-"`
	// ConfigAtRunTime: the chart's components create, once running,
	// Secrets or ConfigMaps that others of them read (a GitOps runtime's
	// upstream chart), so that a pod waiting for a missing one is waited
	// for while the component settles (fault.Input.ConfigAtRunTime).
	ConfigAtRunTime bool `json:"-"`
}

// Result is a rendered platform.
type Result struct {
	Version   string `json:"version"`
	Namespace string `json:"namespace"`
	// Components in apply order: each after all its dependencies.
	Components []*Component `json:"components"`
	// Secrets lists the Secrets the installer generates (names and keys,
	// never values).
	Secrets []credentials.Secret `json:"generatedSecrets"`
	// Tasks are the backups and migrations to run before the components
	// when upgrading to this release, in order (Options.Tasks only).
	Tasks []*Task `json:"tasks,omitempty"`
}

// Component returns the named component, or nil.
func (r *Result) Component(name string) *Component {
	for _, c := range r.Components {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Render renders the platform.
func Render(ctx context.Context, opts Options) (*Result, error) {
	st, err := renderCharts(ctx, opts)
	if err != nil {
		return nil, err
	}
	res, err := st.postRender()
	if err != nil {
		return nil, err
	}
	// An overlay that changes a workload's replicas gets what the chart
	// renders with those replicas (its PodDisruptionBudget, its spread
	// over nodes), exactly as if they were set in values: the charts are
	// rendered again with them as a values layer.
	overlaid := st.overlaidReplicas(res)
	if len(overlaid) == 0 {
		return res, nil
	}
	opts.overlaid = overlaid
	if st, err = renderCharts(ctx, opts); err != nil {
		return nil, err
	}
	if res, err = st.postRender(); err != nil {
		return nil, err
	}
	if again := st.overlaidReplicas(res); len(again) > 0 {
		return nil, fmt.Errorf("post-render: the replicas of %s change with every render: the operator's overlays set them from something that changes with them", strings.Join(sortedKeys(again), ", "))
	}
	return res, nil
}

// overlaidReplicas finds the components whose workload (their one
// Deployment or StatefulSet) leaves the post-render with other replicas
// than its chart rendered: an operator's overlay changed them. It maps
// each to the replicas as a values layer.
func (st *charted) overlaidReplicas(res *Result) map[string]map[string]any {
	rendered := map[string]int64{}
	for _, o := range st.objects {
		if r, ok := replicasOf(o); ok && isScalable(o) {
			rendered[o.GetLabels()[ComponentLabel]+"/"+o.GetKind()+"/"+o.GetName()] = r
		}
	}
	out := map[string]map[string]any{}
	for _, c := range res.Components {
		var workloads []*unstructured.Unstructured
		for _, o := range c.Objects {
			if isScalable(o) {
				workloads = append(workloads, o)
			}
		}
		if len(workloads) != 1 {
			continue
		}
		w := workloads[0]
		before, ok := rendered[c.Name+"/"+w.GetKind()+"/"+w.GetName()]
		after, found := replicasOf(w)
		if ok && found && after != before {
			out[c.Name] = map[string]any{"replicas": after}
		}
	}
	return out
}

// replicasOf reads spec.replicas, however the decoder typed the number.
func replicasOf(o *unstructured.Unstructured) (int64, bool) {
	v, found, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "replicas")
	switch n := v.(type) {
	case int64:
		return n, found
	case int:
		return int64(n), found
	case float64:
		return int64(n), found && n == float64(int64(n))
	}
	return 0, false
}

// isScalable says whether an object is a workload whose replicas a chart
// sets from its replicas value.
func isScalable(o *unstructured.Unstructured) bool {
	return o.GetAPIVersion() == "apps/v1" && (o.GetKind() == "Deployment" || o.GetKind() == "StatefulSet")
}

// charted is the platform after the Helm stage, before the kustomize one.
type charted struct {
	opts     Options
	planned  []planned
	values   map[string]map[string]any
	services map[string]map[string]any
	objects  []*unstructured.Unstructured
	// crds are each component's crds/ CustomResourceDefinitions.
	crds  map[string][]*unstructured.Unstructured
	tasks []taskBuild
	post  *postRender
}

// renderCharts computes every component's values and renders its chart.
func renderCharts(ctx context.Context, opts Options) (*charted, error) {
	in, rel := opts.Installation, opts.Release
	if in == nil || rel == nil {
		return nil, fmt.Errorf("render: an installation and a release are required")
	}
	if opts.Charts == nil {
		opts.Charts = charts.FS
	}
	if opts.Manifests == nil {
		opts.Manifests = manifests.FS
	}
	prof, err := sizing.Get(in.Spec.Profile)
	if err != nil {
		return nil, fmt.Errorf("spec.profile: %w", err)
	}
	sets, err := parseSet(opts.Set, rel)
	if err != nil {
		return nil, err
	}
	planned, err := plan(in, rel)
	if err != nil {
		return nil, err
	}
	global := globalValues(in)

	// Values first: db-provision's list depends on the services' final
	// values (an operator may change what a service uses).
	st := &charted{opts: opts, values: map[string]map[string]any{}, services: map[string]map[string]any{}, crds: map[string][]*unstructured.Unstructured{}}
	for _, p := range planned {
		v, err := componentValues(in, rel, prof, p.Component, global, sets)
		if err != nil {
			return nil, err
		}
		v = sizing.Merge(v, opts.overlaid[p.Name])
		st.values[p.Name] = v
		if p.Chart == sizing.ServiceChart {
			st.services[p.Name] = v
		}
	}
	provision := provisionList(st.services)
	if len(provision) == 0 {
		planned = dropComponent(planned, ProvisionComponent)
	} else if v, ok := st.values[ProvisionComponent]; ok {
		v["services"] = provision
	}
	if v, ok := st.values[BackupComponent]; ok {
		// The backup may read the generated Secrets and the operator's
		// Secrets the configuration names, by name only.
		var names []any
		for _, sec := range credentials.Plan(needs(in, st.services)) {
			names = append(names, sec.Name)
		}
		for _, n := range in.ReferencedSecrets() {
			names = append(names, n)
		}
		v["secrets"] = names
		var pods []any
		for _, db := range []string{"mongodb", "postgresql", "rabbitmq", "redis"} {
			if databaseOf(in.Spec, db).Mode == "external" {
				continue
			}
			// A replicated database is backed up from whichever member
			// is its primary at the time.
			for i := range databaseMembers(in, db, st.values[db]) {
				pods = append(pods, fmt.Sprintf("%s-%d", db, i))
			}
		}
		v["databasePods"] = pods
	}
	st.planned = planned

	loaded := map[string]*chartv2.Chart{}
	for _, p := range planned {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ch, ok := loaded[p.Chart]
		if !ok {
			ch, err = charts.LoadFrom(opts.Charts, p.Chart)
			if err != nil {
				return nil, fmt.Errorf("component %s: %w", p.Name, err)
			}
			loaded[p.Chart] = ch
		}
		if ch.Metadata.Version != p.ChartVersion {
			return nil, fmt.Errorf("component %s: release %s needs chart %s %s, but this onprem has %s %s: use the onprem that ships release %s, or a bundle of it",
				p.Name, rel.Version, p.Chart, p.ChartVersion, p.Chart, ch.Metadata.Version, rel.Version)
		}
		if err := checkComponentValues(ch, p.Name, st.values[p.Name], layers{set: sets[p.Name], config: in.Spec.Components[p.Name].Values, overlaid: opts.overlaid[p.Name]}); err != nil {
			return nil, err
		}
		ms, err := charts.Template(ch, p.Name, in.Spec.Namespace, st.values[p.Name])
		if err != nil {
			return nil, fmt.Errorf("component %s: %w", p.Name, err)
		}
		objs, crds, err := chartObjects("component "+p.Name, ms)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			setLabel(o, ComponentLabel, p.Name)
			// The post-render sets every namespace last, so that
			// overlays match objects the way kustomize users expect
			// (patches without a namespace).
			o.SetNamespace("")
		}
		st.objects = append(st.objects, objs...)
		st.crds[p.Name] = crds
	}
	if opts.Tasks {
		builds, err := st.buildTasks()
		if err != nil {
			return nil, err
		}
		for _, b := range builds {
			st.objects = append(st.objects, b.obj)
		}
		st.tasks = builds
	}
	st.post = &postRender{
		in:             in,
		manifests:      opts.Manifests,
		baseComponents: baseComponents(in, planned),
	}
	return st, nil
}

// postRender runs kustomize over the charts' objects and splits the result
// back into components, each in install order.
func (st *charted) postRender() (*Result, error) {
	objs, err := st.post.run(st.objects)
	if err != nil {
		return nil, err
	}
	in, rel := st.opts.Installation, st.opts.Release
	res := &Result{Version: rel.Version, Namespace: in.Spec.Namespace}
	byName := map[string]*Component{}
	platform := &Component{Name: PlatformComponent, Group: PlatformComponent}
	res.Components = append(res.Components, platform)
	byName[PlatformComponent] = platform
	for _, p := range st.planned {
		c := &Component{Name: p.Name, Group: p.Group, Chart: p.Chart, ChartVersion: p.ChartVersion,
			DependsOn: p.deps, Values: st.values[p.Name]}
		res.Components = append(res.Components, c)
		byName[p.Name] = c
	}
	tasks := map[string]*Task{}
	for _, b := range st.tasks {
		tasks[b.task.Name] = b.task
	}
	for _, o := range objs {
		if t, ok := tasks[o.GetLabels()[TaskLabel]]; ok && o.GetKind() == "Job" {
			t.Job = o
			continue
		}
		name := o.GetLabels()[ComponentLabel]
		c, ok := byName[name]
		if !ok {
			// Objects an operator's overlay adds without saying whose
			// they are belong to the platform component.
			setLabel(o, ComponentLabel, PlatformComponent)
			c = platform
		}
		c.Objects = append(c.Objects, o)
	}
	for _, c := range res.Components {
		addChartCRDs(c, st.crds[c.Name])
		installOrder(c.Objects)
	}
	res.Secrets = credentials.Plan(needs(in, st.services))
	for _, b := range st.tasks {
		if b.task.Job == nil {
			return nil, fmt.Errorf("post-render: task %s: its Job was removed by an overlay", b.task.Name)
		}
		res.Tasks = append(res.Tasks, b.task)
	}
	return res, nil
}

func dropComponent(ps []planned, name string) []planned {
	var out []planned
	for _, p := range ps {
		if p.Name == name {
			continue
		}
		if i := slices.Index(p.deps, name); i >= 0 {
			p.deps = slices.Delete(slices.Clone(p.deps), i, i+1)
			if len(p.deps) == 0 {
				p.deps = []string{PlatformComponent}
			}
		}
		out = append(out, p)
	}
	return out
}

// baseComponents selects the kustomize components of manifests/ that the
// configuration needs.
func baseComponents(in *config.Installation, ps []planned) []string {
	var out []string
	if slices.ContainsFunc(ps, func(p planned) bool { return p.Group == release.GroupPipelines }) {
		out = append(out, "pipelines")
	}
	for _, db := range []string{"mongodb", "postgresql", "redis", "rabbitmq"} {
		if databaseOf(in.Spec, db).Mode == "external" {
			out = append(out, "external-"+db)
		}
	}
	// The operator's controller routes the platform from a namespace of
	// its own.
	if in.Spec.Ingress.Mode == "existing" || in.Spec.Ingress.GatewayAPI.Enabled {
		out = append(out, "ingress-any-namespace")
	}
	return out
}

// needs describes the installation for the credentials plan.
func needs(in *config.Installation, services map[string]map[string]any) credentials.Needs {
	n := credentials.Needs{Internal: map[string]bool{}, SelfSignedTLS: in.Spec.TLS.Mode != "secret"}
	for _, db := range []string{"mongodb", "postgresql", "redis", "rabbitmq"} {
		n.Internal[db] = databaseOf(in.Spec, db).Mode != "external"
	}
	n.PostgreSQLReplication = in.Spec.Availability == config.AvailabilityHigh
	n.MongoDBReplicaSet = in.Spec.Availability == config.AvailabilityHigh
	for _, name := range sortedKeys(services) {
		v := services[name]
		if serviceUses(v, "mongodb") {
			n.MongoDBUsers = append(n.MongoDBUsers, name)
		}
		if serviceUses(v, "postgresql") {
			n.PostgreSQLUsers = append(n.PostgreSQLUsers, name)
		}
		if serviceUses(v, "keys") {
			n.PlatformKeys = true
		}
	}
	return n
}
