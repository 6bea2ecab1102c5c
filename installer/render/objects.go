package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"

	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"onprem.dev/onprem/charts"
)

// ComponentLabel marks every rendered object with the component it belongs
// to; the post-render works on the whole platform at once and splits the
// result back by this label.
const ComponentLabel = "onprem.dev/component"

// decodeObjects reads a YAML stream of Kubernetes objects. source names the
// stream in errors (a chart template).
func decodeObjects(source string, data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetAPIVersion() == "" || u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("%s: a document has no apiVersion, kind or metadata.name", source)
		}
		out = append(out, u)
	}
}

// installOrder sorts objects the way Helm installs them: by kind (Helm's
// install order, unknown kinds last), then by name.
func installOrder(objs []*unstructured.Unstructured) {
	rank := func(kind string) int {
		if i := slices.Index(releaseutil.InstallOrder, kind); i >= 0 {
			return i
		}
		return len(releaseutil.InstallOrder)
	}
	sort.SliceStable(objs, func(i, j int) bool {
		ri, rj := rank(objs[i].GetKind()), rank(objs[j].GetKind())
		if ri != rj {
			return ri < rj
		}
		if objs[i].GetKind() != objs[j].GetKind() {
			return objs[i].GetKind() < objs[j].GetKind()
		}
		return objs[i].GetName() < objs[j].GetName()
	})
}

// setLabel sets one label on an object's metadata.
func setLabel(u *unstructured.Unstructured, key, value string) {
	l := u.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l[key] = value
	u.SetLabels(l)
}

// chartObjects decodes a chart's rendered documents (charts.Template):
// the objects of its release, hooks included, and apart the
// CustomResourceDefinitions of its crds/ folders, which Helm installs
// itself as they are (they skip the post-render and stay out of the
// release's manifest: Component.ChartCRDs). source names the chart in
// errors.
func chartObjects(source string, ms []charts.Manifest) (objs, crds []*unstructured.Unstructured, err error) {
	for _, m := range ms {
		decoded, err := decodeObjects(source+": "+m.Template, []byte(m.Content))
		if err != nil {
			return nil, nil, err
		}
		if m.CRD {
			for _, o := range decoded {
				if o.GetKind() != "CustomResourceDefinition" {
					return nil, nil, fmt.Errorf("%s: %s: %s %s is in a crds/ folder, which Helm installs as CustomResourceDefinitions only", source, m.Template, o.GetKind(), o.GetName())
				}
			}
			crds = append(crds, decoded...)
			continue
		}
		objs = append(objs, decoded...)
	}
	return objs, crds, nil
}

// addChartCRDs adds a chart's crds/ CustomResourceDefinitions to its
// component, named in ChartCRDs.
func addChartCRDs(c *Component, crds []*unstructured.Unstructured) {
	for _, o := range crds {
		c.Objects = append(c.Objects, o)
		c.ChartCRDs = append(c.ChartCRDs, o.GetName())
	}
}

// lastOfEach keeps, of the objects an upstream chart renders twice (the
// same kind and name from two templates, or twice from one), the last
// one: Helm applies both in that order, so the cluster ends up with the
// last. A hook and an object of the release that share a kind and name
// are an error: Helm keeps both apart (the hook is created and deleted
// around the release), which one post-render cannot.
func lastOfEach(objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	at := map[string]int{}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		id := o.GetAPIVersion() + "/" + o.GetKind() + "/" + o.GetName()
		i, dup := at[id]
		if !dup {
			at[id] = len(out)
			out = append(out, o)
			continue
		}
		if isHook(out[i]) != isHook(o) {
			return nil, fmt.Errorf("%s %s is both a Helm hook and an object of the release, which onprem cannot render apart", o.GetKind(), o.GetName())
		}
		out[i] = o
	}
	return out, nil
}

// isHook reports a Helm hook (helm.sh/hook annotation).
func isHook(o *unstructured.Unstructured) bool {
	_, ok := o.GetAnnotations()["helm.sh/hook"]
	return ok
}

// dropNulls removes every null field of the objects (a chart's "key:"
// left empty). For the API server a null field is an unset one; kustomize
// is not so lenient: it refuses a role binding's subject with a null
// namespace, and turns a null list it walks (a pod's volumes, for the
// image transformer) into an empty one.
func dropNulls(objs []*unstructured.Unstructured) {
	for _, o := range objs {
		dropNullsIn(o.Object)
	}
}

func dropNullsIn(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if x == nil {
				delete(t, k)
				continue
			}
			dropNullsIn(x)
		}
	case []any:
		for _, x := range t {
			dropNullsIn(x)
		}
	}
}
