// Package diff compares a rendered platform with what runs in the cluster:
// per component, a unified diff of each live object against what applying
// the desired one would make of it (a server-side dry run, so defaults and
// other managers' fields do not show as changes), plus the objects that
// the new release would remove. Generated secret values never appear.
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
}

// FieldManager is the server-side apply manager the dry run uses: Helm's,
// so that the result is what the install's apply would produce.
const FieldManager = "helm"

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
			d, err := diffObject(ctx, o, obj, nsExists)
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
	gvk := obj.GroupVersionKind()
	m, err := o.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, fmt.Errorf("the cluster does not know %s: %w", gvk, err)
	}
	var ri dynamic.ResourceInterface = o.Dynamic.Resource(m.Resource)
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns := obj.GetNamespace()
		if ns == "" {
			ns = o.Result.Namespace
		}
		if !nsExists {
			return &Object{Kind: obj.GetKind(), Name: obj.GetName(), Change: Added, Diff: unified(obj.GetKind()+"/"+obj.GetName(), "", toYAML(clean(obj)))}, nil
		}
		ri = o.Dynamic.Resource(m.Resource).Namespace(ns)
	}
	live, err := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return &Object{Kind: obj.GetKind(), Name: obj.GetName(), Change: Added, Diff: unified(obj.GetKind()+"/"+obj.GetName(), "", toYAML(clean(obj)))}, nil
	}
	if err != nil {
		return nil, err
	}
	data, err := obj.MarshalJSON()
	if err != nil {
		return nil, err
	}
	force := true
	merged, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
		FieldManager: FieldManager, Force: &force, DryRun: []string{metav1.DryRunAll},
	})
	if err != nil {
		return nil, fmt.Errorf("server-side dry run: %w", err)
	}
	before, after := toYAML(clean(live)), toYAML(clean(merged))
	if before == after {
		return nil, nil
	}
	return &Object{Kind: obj.GetKind(), Name: obj.GetName(), Change: Changed, Diff: unified(obj.GetKind()+"/"+obj.GetName(), before, after)}, nil
}

// clean drops what the server manages and what changes on every write.
func clean(in *unstructured.Unstructured) map[string]any {
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
	if o.GetKind() == "Secret" {
		// Never show a Secret's values, whoever made it.
		for _, f := range []string{"data", "stringData"} {
			if m, ok := o.Object[f].(map[string]any); ok {
				for k := range m {
					m[k] = "<redacted>"
				}
			}
		}
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
