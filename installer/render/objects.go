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
