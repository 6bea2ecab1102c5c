// Package diff compares a rendered platform with what runs in the cluster:
// per component, a unified diff of each live object against what applying
// the desired one would make of it (a server-side dry run, so defaults and
// other managers' fields do not show as changes), plus the objects that
// the new release would remove. Generated secret values never appear.
//
// The same comparison finds drift (Checker): the live objects that differ
// from what onprem applied in a field onprem sets, so that install can
// apply those components again and status and doctor can name them.
package diff

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/render"
)

// Change is what happens to one object.
type Change string

// Changes.
const (
	Added   Change = "added"
	Changed Change = "changed"
	Removed Change = "removed"
	// Replaced: the object is deleted and made again (a StatefulSet whose
	// fixed fields change: a database moved between single and high).
	Replaced Change = "replaced"
)

// Object is one object that differs.
type Object struct {
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Change Change `json:"change"`
	Diff   string `json:"diff"`
}

// Component is the difference of one component.
type Component struct {
	Name    string   `json:"name"`
	Objects []Object `json:"objects,omitempty"`
}

// Options is what Run needs.
type Options struct {
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
	Result  *render.Result
	// Manifest returns the objects of a component's last release as YAML
	// ("" when it has none), to find objects that would be removed.
	Manifest func(ctx context.Context, component string) (string, error)
	// Redact removes secret values from text.
	Redact func(string) string
	// Replaced says which objects the install deletes and makes again
	// rather than applies over the live ones ("StatefulSet/postgresql"):
	// they are compared as they are, without a dry run (which the API
	// server would refuse).
	Replaced map[string]bool
}

// FieldManager is the server-side apply field manager of everything onprem
// applies through Helm (installer/apply sets it as Helm's), and so of the
// dry runs here: applying as the same manager is what makes the dry run's
// result exactly what the install's apply would produce, fields onprem
// stopped setting removed included.
const FieldManager = "onprem"

// Helm's release metadata, which it adds to every object it applies.
const (
	helmManagedByLabel      = "app.kubernetes.io/managed-by"
	helmReleaseName         = "meta.helm.sh/release-name"
	helmReleaseNamespace    = "meta.helm.sh/release-namespace"
	helmManagedByLabelValue = "Helm"
)

// AsApplied returns obj as Helm applies it for the component's release in
// namespace: with Helm's managed-by label and release annotations, so that
// a dry run as FieldManager does not take them away.
func AsApplied(obj *unstructured.Unstructured, release, namespace string) *unstructured.Unstructured {
	o := obj.DeepCopy()
	l := o.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[helmManagedByLabel] = helmManagedByLabelValue
	o.SetLabels(l)
	a := o.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a[helmReleaseName], a[helmReleaseNamespace] = release, namespace
	o.SetAnnotations(a)
	return o
}

// Run diffs every component; only components with differences are
// returned.
func Run(ctx context.Context, o Options) ([]Component, error) {
	if o.Redact == nil {
		o.Redact = func(s string) string { return s }
	}
	nsExists := true
	if _, err := o.Dynamic.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, o.Result.Namespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		nsExists = false
	} else if err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", o.Result.Namespace, err)
	}
	var out []Component
	for _, c := range o.Result.Components {
		dc := Component{Name: c.Name}
		desired := map[string]bool{}
		for _, obj := range c.Objects {
			desired[key(obj)] = true
			applied := obj
			if !isNamespace(obj) { // the installer applies the namespace itself, outside the releases
				applied = AsApplied(obj, c.Name, o.Result.Namespace)
			}
			d, err := diffObject(ctx, o, applied, nsExists)
			if err != nil {
				return nil, fmt.Errorf("%s: %s/%s: %w", c.Name, obj.GetKind(), obj.GetName(), err)
			}
			if d != nil {
				d.Diff = o.Redact(d.Diff)
				dc.Objects = append(dc.Objects, *d)
			}
		}
		if o.Manifest != nil {
			m, err := o.Manifest(ctx, c.Name)
			if err != nil {
				return nil, fmt.Errorf("%s: reading its release: %w", c.Name, err)
			}
			old, err := decode(m)
			if err != nil {
				return nil, fmt.Errorf("%s: its release: %w", c.Name, err)
			}
			for _, obj := range old {
				if !desired[key(obj)] {
					dc.Objects = append(dc.Objects, Object{Kind: obj.GetKind(), Name: obj.GetName(), Change: Removed,
						Diff: o.Redact(unified(obj.GetKind()+"/"+obj.GetName(), toYAML(clean(obj)), ""))})
				}
			}
		}
		if len(dc.Objects) > 0 {
			out = append(out, dc)
		}
	}
	return out, nil
}

func key(o *unstructured.Unstructured) string {
	return o.GroupVersionKind().GroupKind().String() + "/" + o.GetName()
}

func diffObject(ctx context.Context, o Options, obj *unstructured.Unstructured, nsExists bool) (*Object, error) {
	ri, namespaced, err := resourceFor(o.Dynamic, o.Mapper, obj, o.Result.Namespace)
	if err != nil {
		return nil, err
	}
	added := &Object{Kind: obj.GetKind(), Name: obj.GetName(), Change: Added, Diff: unified(obj.GetKind()+"/"+obj.GetName(), "", toYAML(clean(obj)))}
	if namespaced && !nsExists {
		return added, nil
	}
	if o.Replaced[obj.GetKind()+"/"+obj.GetName()] {
		live, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return added, nil
		}
		if err != nil {
			return nil, err
		}
		return &Object{Kind: obj.GetKind(), Name: obj.GetName(), Change: Replaced,
			Diff: unified(obj.GetKind()+"/"+obj.GetName(), toYAML(clean(live)), toYAML(clean(obj)))}, nil
	}
	live, merged, err := compare(ctx, ri, obj)
	if err != nil {
		return nil, err
	}
	if live == nil {
		return added, nil
	}
	before, after := toYAML(clean(live)), toYAML(clean(merged))
	if before == after {
		return nil, nil
	}
	return &Object{Kind: obj.GetKind(), Name: obj.GetName(), Change: Changed, Diff: unified(obj.GetKind()+"/"+obj.GetName(), before, after)}, nil
}

// resourceFor returns the client of obj's resource (in obj's namespace,
// else namespace, when it is namespaced).
func resourceFor(dyn dynamic.Interface, mapper meta.RESTMapper, obj *unstructured.Unstructured, namespace string) (dynamic.ResourceInterface, bool, error) {
	gvk := obj.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, false, fmt.Errorf("the cluster does not know %s: %w", gvk, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return dyn.Resource(m.Resource), false, nil
	}
	ns := obj.GetNamespace()
	if ns == "" {
		ns = namespace
	}
	return dyn.Resource(m.Resource).Namespace(ns), true, nil
}

// compare reads the live object and asks the API server what applying obj
// would make of it (a server-side dry run as FieldManager, conflicts
// forced, as the install's apply does): live is nil when the object does
// not exist. This is the one comparison of diff and of drift.
func compare(ctx context.Context, ri dynamic.ResourceInterface, obj *unstructured.Unstructured) (live, merged *unstructured.Unstructured, err error) {
	live, err = ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return nil, nil, err
	}
	force := true
	merged, err = ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
		FieldManager: FieldManager, Force: &force, DryRun: []string{metav1.DryRunAll},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("server-side dry run: %w", err)
	}
	return live, merged, nil
}

func isNamespace(o *unstructured.Unstructured) bool {
	return o.GetKind() == "Namespace" && o.GetAPIVersion() == "v1"
}

// clean is normalize with every Secret value redacted: what a diff shows.
func clean(in *unstructured.Unstructured) map[string]any {
	o := normalize(in)
	if in.GetKind() == "Secret" {
		// Never show a Secret's values, whoever made it.
		for _, f := range []string{"data", "stringData"} {
			if m, ok := o[f].(map[string]any); ok {
				for k := range m {
					m[k] = "<redacted>"
				}
			}
		}
	}
	return o
}

// normalize drops what the server manages and what changes on every
// write, and Helm's release annotations (a copy: in is not changed).
func normalize(in *unstructured.Unstructured) map[string]any {
	o := in.DeepCopy()
	for _, f := range [][]string{
		{"metadata", "managedFields"}, {"metadata", "resourceVersion"}, {"metadata", "uid"},
		{"metadata", "generation"}, {"metadata", "creationTimestamp"}, {"status"},
	} {
		unstructured.RemoveNestedField(o.Object, f...)
	}
	ann := o.GetAnnotations()
	for k := range ann {
		if strings.HasPrefix(k, "deployment.kubernetes.io/") || strings.HasPrefix(k, "meta.helm.sh/") {
			delete(ann, k)
		}
	}
	if len(ann) == 0 {
		unstructured.RemoveNestedField(o.Object, "metadata", "annotations")
	} else {
		o.SetAnnotations(ann)
	}
	return o.Object
}

func toYAML(m map[string]any) string {
	b, err := yaml.Marshal(m)
	if err != nil {
		return fmt.Sprintf("<cannot show: %v>\n", err)
	}
	return string(b)
}

func unified(name, before, after string) string {
	d := difflib.UnifiedDiff{
		A: difflib.SplitLines(before), B: difflib.SplitLines(after),
		FromFile: "live/" + name, ToFile: "desired/" + name, Context: 3,
	}
	s, err := difflib.GetUnifiedDiffString(d)
	if err != nil {
		return fmt.Sprintf("<cannot diff: %v>\n", err)
	}
	return s
}

// Objects decodes a YAML stream of objects (a Helm release's manifest), in
// a stable order.
func Objects(manifest string) ([]*unstructured.Unstructured, error) { return decode(manifest) }

func decode(manifest string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	for {
		var m map[string]any
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, err
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return key(out[i]) < key(out[j]) })
	return out, nil
}
