package diff

import (
	"context"
	"encoding/base64"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"onprem.dev/onprem/installer/render"
)

// Drift is one live object that differs from what onprem applies in a
// field onprem sets: applying the component again would change it.
type Drift struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	// Fields name what differs, shortly ("image", "env", "replicas",
	// "ingress", "data"); never a value.
	Fields []string `json:"fields,omitempty"`
	// Deleted: the object is gone.
	Deleted bool `json:"deleted,omitempty"`
}

// String is "Deployment/gitops-ui image, env" or "Service/gitops-ui
// (deleted)".
func (d Drift) String() string {
	if d.Deleted {
		return d.Kind + "/" + d.Name + " (deleted)"
	}
	return d.Kind + "/" + d.Name + " " + strings.Join(d.Fields, ", ")
}

// Strings is each drift's String.
func Strings(ds []Drift) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.String())
	}
	return out
}

// Checker finds the drift of components in one namespace of one cluster.
//
// The rule (docs/installing.md): an object has drifted when applying what
// onprem applies (its objects, with Helm's release metadata, as the field
// manager FieldManager, conflicts forced) would change it, which is what
// the API server's server-side dry run answers. Fields onprem does not set
// are not looked at: annotations and labels others add, fields that
// controllers or other managers own by design (a Service's cluster IP, a
// pod template annotation of 'kubectl rollout restart', ...), and the
// replicas of a Deployment or StatefulSet that a HorizontalPodAutoscaler
// scales (ForCluster gives them their live value).
//
// A dry run per object would cost one request each: most objects are
// cleared without one, when the live object holds every value onprem sets
// and no one but onprem has written it since onprem last applied it (its
// managed fields say so). The others (a Deployment, whose controller
// writes its revision annotation after each rollout; anything edited by
// hand) are judged by the dry run.
//
// A Checker reads each kind of object once (one list per resource and
// namespace) and is safe for concurrent use; make one per apply or status.
type Checker struct {
	dyn       dynamic.Interface
	mapper    meta.RESTMapper
	namespace string

	mu       sync.Mutex
	listings map[listKey]*listing
	scaled   *listing // the HorizontalPodAutoscalers of namespace

	dryRuns atomic.Int64
}

// NewChecker checks components whose namespaced objects without a
// namespace of their own go to namespace.
func NewChecker(dyn dynamic.Interface, mapper meta.RESTMapper, namespace string) *Checker {
	return &Checker{dyn: dyn, mapper: mapper, namespace: namespace, listings: map[listKey]*listing{}}
}

// DryRuns is how many server-side dry runs the checker made (benchmarks).
func (c *Checker) DryRuns() int64 { return c.dryRuns.Load() }

type listKey struct {
	gvr schema.GroupVersionResource
	ns  string
}

// listing is one list of live objects, read once.
type listing struct {
	once  sync.Once
	items map[string]*unstructured.Unstructured
	// err is why it could not be read (then each object is read alone).
	err error
}

var hpaResource = schema.GroupVersionResource{Group: "autoscaling", Version: "v2", Resource: "horizontalpodautoscalers"}

// Prefetch reads, all at once, the lists that checking comps will read (one
// per kind and namespace of their objects, and the autoscalers), so that
// components checked one after the other in dependency order do not each
// wait for their own. It returns when every list is read; errors are kept
// for the checks (an object of a list that could not be read is read
// alone).
func (c *Checker) Prefetch(ctx context.Context, comps []*render.Component) {
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = c.autoscaled(ctx) })
	seen := map[listKey]bool{}
	for _, comp := range comps {
		for _, obj := range comp.Objects {
			if isNamespace(obj) {
				continue
			}
			k, err := c.keyOf(obj)
			if err != nil || seen[k] {
				continue
			}
			seen[k] = true
			l := c.listing(k)
			wg.Go(func() { l.once.Do(func() { l.items, l.err = c.list(ctx, k) }) })
		}
	}
	wg.Wait()
}

// Drift returns the objects of component c that have drifted (in the
// order of its objects). c's objects are as rendered, or as its Helm
// release holds them; c.Name is its release.
func (c *Checker) Drift(ctx context.Context, comp *render.Component) ([]Drift, error) {
	objs, err := c.ForCluster(ctx, comp)
	if err != nil {
		return nil, err
	}
	var out []Drift
	for _, obj := range objs.Objects {
		if isNamespace(obj) {
			continue // applied by the installer itself, on every run
		}
		d, err := c.object(ctx, AsApplied(obj, comp.Name, c.namespace))
		if err != nil {
			return nil, fmt.Errorf("%s: %s/%s: %w", comp.Name, obj.GetKind(), obj.GetName(), err)
		}
		if d != nil {
			out = append(out, *d)
		}
	}
	return out, nil
}

// ForCluster returns the component as it is to be applied on this
// cluster: the Deployments and StatefulSets that a HorizontalPodAutoscaler
// scales keep their live replicas, which are the autoscaler's. It returns
// comp itself when nothing changes.
func (c *Checker) ForCluster(ctx context.Context, comp *render.Component) (*render.Component, error) {
	var out *render.Component
	for i, obj := range comp.Objects {
		kind := obj.GetKind()
		if kind != "Deployment" && kind != "StatefulSet" {
			continue
		}
		if _, has, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "replicas"); !has {
			continue
		}
		scaled, err := c.scaledBy(ctx, obj)
		if err != nil {
			return nil, err
		}
		if !scaled {
			continue
		}
		live, err := c.live(ctx, obj)
		if err != nil {
			return nil, err
		}
		if live == nil {
			continue
		}
		n, has, _ := unstructured.NestedFieldNoCopy(live.Object, "spec", "replicas")
		if !has {
			continue
		}
		if out == nil {
			cp := *comp
			cp.Objects = append([]*unstructured.Unstructured(nil), comp.Objects...)
			out = &cp
		}
		o := obj.DeepCopy()
		if err := unstructured.SetNestedField(o.Object, n, "spec", "replicas"); err != nil {
			return nil, err
		}
		out.Objects[i] = o
	}
	if out == nil {
		return comp, nil
	}
	return out, nil
}

// scaledBy reports whether a HorizontalPodAutoscaler of the object's
// namespace scales it.
func (c *Checker) scaledBy(ctx context.Context, obj *unstructured.Unstructured) (bool, error) {
	targets, err := c.autoscaled(ctx)
	if err != nil {
		return false, err
	}
	if ns := obj.GetNamespace(); ns != "" && ns != c.namespace {
		return false, nil
	}
	return targets[obj.GetKind()+"/"+obj.GetName()] != nil, nil
}

// autoscaled returns the HorizontalPodAutoscalers of the namespace by
// their target (Kind/name), read once. A cluster without the
// autoscaling/v2 API, or a user who may not list autoscalers, has none
// that onprem can see.
func (c *Checker) autoscaled(ctx context.Context) (map[string]*unstructured.Unstructured, error) {
	c.mu.Lock()
	if c.scaled == nil {
		c.scaled = &listing{}
	}
	l := c.scaled
	c.mu.Unlock()
	l.once.Do(func() {
		l.items = map[string]*unstructured.Unstructured{}
		list, err := c.dyn.Resource(hpaResource).Namespace(c.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
				l.err = fmt.Errorf("reading the HorizontalPodAutoscalers of %s: %w", c.namespace, err)
			}
			return
		}
		for i := range list.Items {
			h := &list.Items[i]
			kind, _, _ := unstructured.NestedString(h.Object, "spec", "scaleTargetRef", "kind")
			name, _, _ := unstructured.NestedString(h.Object, "spec", "scaleTargetRef", "name")
			l.items[kind+"/"+name] = h
		}
	})
	return l.items, l.err
}

// object judges one object (as applied, with Helm's metadata).
func (c *Checker) object(ctx context.Context, obj *unstructured.Unstructured) (*Drift, error) {
	live, err := c.live(ctx, obj)
	if err != nil {
		return nil, err
	}
	if live == nil {
		return &Drift{Kind: obj.GetKind(), Name: obj.GetName(), Deleted: true}, nil
	}
	if untouched(live) && holds(live, obj) {
		return nil, nil
	}
	ri, _, err := resourceFor(c.dyn, c.mapper, obj, c.namespace)
	if err != nil {
		return nil, err
	}
	c.dryRuns.Add(1)
	fresh, merged, err := compare(ctx, ri, obj)
	if err != nil {
		return nil, err
	}
	if fresh == nil {
		return &Drift{Kind: obj.GetKind(), Name: obj.GetName(), Deleted: true}, nil
	}
	fields := changedFields(normalize(fresh), normalize(merged))
	if len(fields) == 0 {
		return nil, nil
	}
	return &Drift{Kind: obj.GetKind(), Name: obj.GetName(), Fields: fields}, nil
}

// live returns the live object obj names (nil: it does not exist), from
// the list of its resource, or read alone when the list could not be read
// or does not have it (made since).
func (c *Checker) live(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	k, err := c.keyOf(obj)
	if err != nil {
		return nil, err
	}
	l := c.listing(k)
	l.once.Do(func() { l.items, l.err = c.list(ctx, k) })
	if o := l.items[obj.GetName()]; o != nil {
		return o, nil
	}
	ri, _, err := resourceFor(c.dyn, c.mapper, obj, c.namespace)
	if err != nil {
		return nil, err
	}
	o, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading it: %w", err)
	}
	return o, nil
}

// keyOf names the list obj is in.
func (c *Checker) keyOf(obj *unstructured.Unstructured) (listKey, error) {
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return listKey{}, fmt.Errorf("the cluster does not know %s: %w", gvk, err)
	}
	k := listKey{gvr: m.Resource}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		k.ns = obj.GetNamespace()
		if k.ns == "" {
			k.ns = c.namespace
		}
	}
	return k, nil
}

func (c *Checker) listing(k listKey) *listing {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.listings[k]
	if l == nil {
		l = &listing{}
		c.listings[k] = l
	}
	return l
}

func (c *Checker) list(ctx context.Context, k listKey) (map[string]*unstructured.Unstructured, error) {
	var ri dynamic.ResourceInterface = c.dyn.Resource(k.gvr)
	if k.ns != "" {
		ri = c.dyn.Resource(k.gvr).Namespace(k.ns)
	}
	opts := metav1.ListOptions{}
	if k.gvr.Group == "" && k.gvr.Resource == "secrets" {
		// Not Helm's own release records: many, large, and none of
		// them is an object of a component.
		opts.LabelSelector = "owner!=helm"
	}
	list, err := ri.List(ctx, opts)
	if err != nil {
		return nil, err
	}
	items := make(map[string]*unstructured.Unstructured, len(list.Items))
	for i := range list.Items {
		items[list.Items[i].GetName()] = &list.Items[i]
	}
	return items, nil
}

// untouched reports whether onprem's server-side apply is the last write
// of the live object: onprem applied it, and no other writer (of the
// object itself; its status does not count) has written it since, nor in
// the same second.
func untouched(live *unstructured.Unstructured) bool {
	var mine *metav1.Time
	entries := live.GetManagedFields()
	for _, e := range entries {
		if e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "" && e.Time != nil {
			if mine == nil || e.Time.After(mine.Time) {
				mine = e.Time
			}
		}
	}
	if mine == nil {
		return false
	}
	for _, e := range entries {
		if e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "" {
			continue
		}
		if e.Subresource == "status" {
			continue
		}
		if e.Time == nil || !e.Time.Before(mine) {
			return false
		}
	}
	return true
}

// holds reports whether the live object has every value the desired one
// sets: maps may hold more keys (defaults, others' fields), lists must
// match item for item. A false answer is not drift, only a reason to ask
// the API server (a value it writes in another form, a Secret's
// stringData).
func holds(live, desired *unstructured.Unstructured) bool {
	for k, dv := range desired.Object {
		switch k {
		case "apiVersion", "kind", "status":
			continue
		case "stringData":
			if desired.GetKind() != "Secret" {
				break
			}
			sd, ok := dv.(map[string]any)
			data, _ := live.Object["data"].(map[string]any)
			if !ok {
				return false
			}
			for key, v := range sd {
				s, _ := data[key].(string)
				raw, err := base64.StdEncoding.DecodeString(s)
				if err != nil || v != string(raw) {
					return false
				}
			}
			continue
		}
		if !contains(live.Object[k], dv) {
			return false
		}
	}
	return true
}

func contains(live, desired any) bool {
	switch d := desired.(type) {
	case nil:
		return live == nil || isEmpty(live)
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return live == nil && len(d) == 0
		}
		for k, v := range d {
			if !contains(l[k], v) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok {
			return live == nil && len(d) == 0
		}
		if len(l) != len(d) {
			return false
		}
		for i := range d {
			if !contains(l[i], d[i]) {
				return false
			}
		}
		return true
	default:
		if a, ok := number(desired); ok {
			b, ok := number(live)
			return ok && a == b
		}
		return reflect.DeepEqual(live, desired)
	}
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	}
	return false
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	}
	return 0, false
}

// changedFields names the fields in which two normalized objects differ
// (live, and what applying would make of it), shortly and in a stable
// order: "image", "env", "replicas", "pod annotations", "ingress".
func changedFields(before, after map[string]any) []string {
	var paths [][]string
	walk(nil, before, after, &paths)
	if len(paths) == 0 && !reflect.DeepEqual(before, after) {
		paths = append(paths, []string{"(object)"})
	}
	seen := map[string]bool{}
	var out []string
	for _, p := range paths {
		f := fieldName(p)
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

// walk appends the paths where a and b differ; items of lists whose items
// all have a name are matched by name ("[name]"), others by position.
func walk(path []string, a, b any, out *[][]string) {
	if reflect.DeepEqual(a, b) {
		return
	}
	here := func() { *out = append(*out, append([]string(nil), path...)) }
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			here()
			return
		}
		keys := map[string]bool{}
		for k := range av {
			keys[k] = true
		}
		for k := range bv {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			walk(append(path, k), av[k], bv[k], out)
		}
	case []any:
		bv, ok := b.([]any)
		if !ok {
			here()
			return
		}
		an, aok := byName(av)
		bn, bok := byName(bv)
		switch {
		case aok && bok:
			names := map[string]bool{}
			var order []string
			for _, l := range [][]any{av, bv} {
				for _, it := range l {
					n := it.(map[string]any)["name"].(string)
					if !names[n] {
						names[n] = true
						order = append(order, n)
					}
				}
			}
			for _, n := range order {
				walk(append(path, "["+n+"]"), an[n], bn[n], out)
			}
		case len(av) == len(bv):
			for i := range av {
				walk(append(path, fmt.Sprintf("[%d]", i)), av[i], bv[i], out)
			}
		default:
			here()
		}
	default:
		here()
	}
}

func byName(l []any) (map[string]any, bool) {
	m := make(map[string]any, len(l))
	for _, it := range l {
		o, ok := it.(map[string]any)
		if !ok {
			return nil, false
		}
		n, ok := o["name"].(string)
		if !ok || n == "" || m[n] != nil {
			return nil, false // unnamed, or names repeat (volume mounts can)
		}
		m[n] = o
	}
	return m, len(l) > 0
}

// fieldName says which field a path is, as an operator names it: a
// container's field by its own name (image, env, resources), a pod
// template's metadata as "pod labels" / "pod annotations", a top-level
// field of the spec (replicas, ingress, ports) or of the object (data,
// labels) by its name.
func fieldName(path []string) string {
	p := path
	if len(p) > 0 && p[0] == "spec" {
		p = p[1:]
		// A CronJob's Job template, then a pod template.
		if len(p) > 1 && p[0] == "jobTemplate" && p[1] == "spec" {
			p = p[2:]
		}
		if len(p) > 0 && p[0] == "template" {
			p = p[1:]
			if len(p) > 1 && p[0] == "metadata" {
				return "pod " + p[1]
			}
			if len(p) > 0 && p[0] == "spec" {
				p = p[1:]
			}
		}
	}
	if len(p) > 0 && p[0] == "metadata" {
		p = p[1:]
	}
	if len(p) == 0 {
		return strings.Join(path, ".")
	}
	if (p[0] == "containers" || p[0] == "initContainers") && len(p) > 2 {
		return p[2]
	}
	return p[0]
}
