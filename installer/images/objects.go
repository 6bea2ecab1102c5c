package images

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// Images in rendered objects. A chart's images are what it renders with
// the release's values, not a list kept beside it: the containers and init
// containers of every pod template (hook Jobs included), and the images a
// chart writes into configuration for the pods its software starts later
// (an Argo Workflows executor, a NATS event bus, an enrichment workflow):
//
//   - in a ConfigMap's data, and in YAML held there: a string under a key
//     that ends in "image" (natsImage, image), whole ("nats:2.11.4") or a
//     repository alone; a map with a repository beside a registry, tag or
//     digest, or under such a key ({registry: quay.io, repository:
//     codefresh/argoexec, tag: v3.5.9});
//   - in a container's arguments: the one after an argument that ends in
//     "-image" (--executor-image REF), or after "=" (--executor-image=REF);
//   - in a container's environment: a variable whose name ends in IMAGE.
//
// InObjects lists them, RelocateObjects moves them to a private registry
// in place.

// Found is one image reference in an object.
type Found struct {
	// Ref is the reference as the chart wrote it (a map's parts joined:
	// registry/repository:tag).
	Ref string
	// Object is Kind/name; Field where in it (a ConfigMap's key, a
	// container's image or argument).
	Object, Field string
	// Pod: a container's image (the kubelet pulls it), not a reference in
	// configuration.
	Pod bool
}

// podSpecPaths are where each kind keeps its pod spec.
var podSpecPaths = map[string][]string{
	"Deployment": {"spec", "template", "spec"}, "StatefulSet": {"spec", "template", "spec"}, "DaemonSet": {"spec", "template", "spec"},
	"ReplicaSet": {"spec", "template", "spec"}, "Job": {"spec", "template", "spec"},
	"CronJob": {"spec", "jobTemplate", "spec", "template", "spec"}, "Pod": {"spec"},
}

// InObjects lists the image references of objs (see the package's note
// above Found), in the objects' order.
func InObjects(objs []*unstructured.Unstructured) ([]Found, error) {
	var out []Found
	err := walk(objs, func(f Found, _ func(string)) { out = append(out, f) })
	return out, err
}

// References lists the distinct references of objs that name a tag or a
// digest (the ones that can be pulled), sorted.
func References(objs []*unstructured.Unstructured) ([]string, error) {
	found, err := InObjects(objs)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, f := range found {
		if !Pullable(f.Ref) || seen[f.Ref] {
			continue
		}
		seen[f.Ref] = true
		out = append(out, f.Ref)
	}
	slices.Sort(out)
	return out, nil
}

// Pullable reports a reference that names a tag or a digest.
func Pullable(ref string) bool {
	r, err := name.ParseReference(ref)
	if err != nil {
		return false
	}
	last := ref[strings.LastIndex(ref, "/")+1:]
	return strings.ContainsAny(last, ":@") && r.Identifier() != ""
}

// RelocateObjects moves every image reference of objs to host/prefix in
// place (RelocateReference: the repository relocated, tag and digest
// kept; in a map written as parts, the registry becomes the private
// registry's host and the repository the path under it). A ConfigMap
// value holding YAML is written back as YAML (its comments are not kept).
func RelocateObjects(objs []*unstructured.Unstructured, host, prefix string) error {
	return walk(objs, func(f Found, set func(string)) {
		if to, ok := RelocateReference(f.Ref, host, prefix); ok {
			set(to)
		}
	})
}

// Root is where a private registry's relocated images live: host/prefix.
func Root(host, prefix string) string {
	out := strings.TrimSuffix(host, "/")
	if p := strings.Trim(prefix, "/"); p != "" {
		out += "/" + p
	}
	return out
}

// RelocateReference is a reference moved to host/prefix: its repository
// relocated (Relocate), its tag and digest as written. A reference that
// does not parse is reported as not relocated.
func RelocateReference(ref, host, prefix string) (string, bool) {
	r, err := name.ParseReference(ref, name.WeakValidation)
	if err != nil {
		return "", false
	}
	to, err := Relocate(r.Context().Name(), host, prefix)
	if err != nil {
		return "", false
	}
	last := ref[strings.LastIndex(ref, "/")+1:]
	if i := strings.IndexAny(last, ":@"); i >= 0 {
		return to + last[i:], true
	}
	return to, true
}

// walk calls visit for every image reference of objs, with a setter that
// replaces it in the object.
func walk(objs []*unstructured.Unstructured, visit func(Found, func(string))) error {
	for _, o := range objs {
		id := o.GetKind() + "/" + o.GetName()
		if path, ok := podSpecPaths[o.GetKind()]; ok {
			// The pod spec itself, not a copy: the setters write into it.
			var spec any = o.Object
			for _, k := range path {
				m, _ := spec.(map[string]any)
				spec = m[k]
			}
			if m, ok := spec.(map[string]any); ok {
				walkPod(id, strings.Join(path, "."), m, visit)
			}
			continue
		}
		if o.GetKind() != "ConfigMap" || o.GetAPIVersion() != "v1" {
			continue
		}
		data, _, _ := unstructured.NestedStringMap(o.Object, "data")
		changed := false
		for _, k := range slices.Sorted(maps.Keys(data)) {
			v := data[k]
			field := "data." + k
			if imageKey(k) {
				visit(Found{Ref: strings.TrimSpace(v), Object: id, Field: field}, func(to string) { data[k], changed = to, true })
				continue
			}
			var doc any
			if !strings.Contains(v, "\n") || yaml.Unmarshal([]byte(v), &doc) != nil {
				continue
			}
			if _, ok := doc.(map[string]any); !ok {
				continue
			}
			docChanged := false
			walkValue(id, field, "", doc, visit, &docChanged)
			if docChanged {
				b, err := yaml.Marshal(doc)
				if err != nil {
					return fmt.Errorf("%s: %s: %w", id, field, err)
				}
				data[k], changed = string(b), true
			}
		}
		if changed {
			if err := unstructured.SetNestedStringMap(o.Object, data, "data"); err != nil {
				return fmt.Errorf("%s: %w", id, err)
			}
		}
	}
	return nil
}

// imageKey reports a key that names an image (image, natsImage, IMAGE).
func imageKey(k string) bool {
	return strings.HasSuffix(strings.ToLower(k), "image")
}

// walkPod visits a pod spec's images: its containers', and the references
// in their arguments and environment.
func walkPod(id, path string, spec map[string]any, visit func(Found, func(string))) {
	for _, field := range []string{"initContainers", "containers"} {
		cs, _ := spec[field].([]any)
		for i, c := range cs {
			cm, _ := c.(map[string]any)
			if cm == nil {
				continue
			}
			at := fmt.Sprintf("%s.%s[%d]", path, field, i)
			if img, ok := cm["image"].(string); ok {
				visit(Found{Ref: img, Object: id, Field: at + ".image", Pod: true}, func(to string) { cm["image"] = to })
			}
			args, _ := cm["args"].([]any)
			for j, a := range args {
				s, _ := a.(string)
				flag, val, eq := strings.Cut(s, "=")
				switch {
				case eq && strings.HasPrefix(flag, "-") && imageKey(flag):
					j := j
					visit(Found{Ref: val, Object: id, Field: fmt.Sprintf("%s.args[%d]", at, j)}, func(to string) { args[j] = flag + "=" + to })
				case strings.HasPrefix(s, "-") && imageKey(s) && j+1 < len(args):
					next, _ := args[j+1].(string)
					j := j + 1
					visit(Found{Ref: next, Object: id, Field: fmt.Sprintf("%s.args[%d]", at, j)}, func(to string) { args[j] = to })
				}
			}
			env, _ := cm["env"].([]any)
			for _, e := range env {
				em, _ := e.(map[string]any)
				n, _ := em["name"].(string)
				if v, ok := em["value"].(string); ok && imageKey(n) && v != "" {
					visit(Found{Ref: v, Object: id, Field: at + ".env." + n}, func(to string) { em["value"] = to })
				}
			}
		}
	}
}

// walkValue visits the image references of a YAML document held in
// configuration: strings under image keys, and image maps.
func walkValue(id, field, key string, v any, visit func(Found, func(string)), changed *bool) {
	switch t := v.(type) {
	case map[string]any:
		if repo, ok := t["repository"].(string); ok && repo != "" && (imageKey(key) || t["tag"] != nil || t["digest"] != nil || t["registry"] != nil) {
			walkImageMap(id, field+"."+key, t, repo, visit, changed)
			return
		}
		for _, k := range slices.Sorted(maps.Keys(t)) {
			x := t[k]
			at := strings.TrimPrefix(key+"."+k, ".")
			if s, ok := x.(string); ok && imageKey(k) && s != "" {
				k := k
				visit(Found{Ref: s, Object: id, Field: field + "." + at}, func(to string) { t[k], *changed = to, true })
				continue
			}
			walkValue(id, field, at, x, visit, changed)
		}
	case []any:
		for i, x := range t {
			walkValue(id, field, fmt.Sprintf("%s[%d]", key, i), x, visit, changed)
		}
	}
}

// walkImageMap visits an image written as parts ({registry, repository,
// tag, digest}); relocating it sets registry to the private registry's
// root (the repository kept under it) or, without a registry, the
// repository to its relocation.
func walkImageMap(id, field string, m map[string]any, repo string, visit func(Found, func(string)), changed *bool) {
	reg, _ := m["registry"].(string)
	ref := repo
	if reg != "" {
		ref = strings.TrimSuffix(reg, "/") + "/" + repo
	}
	tag := fmt.Sprint(m["tag"])
	if m["tag"] != nil && tag != "" {
		ref += ":" + tag
	}
	if d, _ := m["digest"].(string); d != "" {
		ref += "@" + d
	}
	visit(Found{Ref: ref, Object: id, Field: field}, func(to string) {
		r, err := name.ParseReference(to, name.WeakValidation)
		if err != nil {
			return
		}
		if reg != "" {
			m["registry"] = r.Context().RegistryStr()
			m["repository"] = strings.TrimPrefix(r.Context().Name(), r.Context().RegistryStr()+"/")
		} else {
			m["repository"] = r.Context().Name()
		}
		*changed = true
	})
}

// SplitReference splits a reference as written into its repository, tag
// and digest (either may be empty): host:5000/a/b:1@sha256:... gives
// host:5000/a/b, 1 and sha256:....
func SplitReference(ref string) (repository, tag, digest string) {
	repository = ref
	if i := strings.Index(repository, "@"); i >= 0 {
		repository, digest = repository[:i], repository[i+1:]
	}
	if i := strings.LastIndex(repository, ":"); i > strings.LastIndex(repository, "/") {
		repository, tag = repository[:i], repository[i+1:]
	}
	return repository, tag, digest
}
