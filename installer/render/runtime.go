package render

import (
	"context"
	"fmt"
	"io/fs"
	"sort"
	"strings"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/sizing"
	"onprem.dev/onprem/manifests"
)

// GitOps runtimes are rendered one at a time, apart from the platform, like
// build runners: each is a Helm release of the release's runtime chart
// (release.Release.Runtime, an upstream chart fetched from its repository
// or read from a bundle) in the runtime's namespace, on the platform's
// cluster or another one. The same post-render (labels, relocation,
// hardening, placement, proxy) applies, without the platform's bases and
// the operator's overlays.
const (
	// RuntimeGroup is the Group of a runtime's Component.
	RuntimeGroup = "runtime"
	// RuntimeGitCredentials is the Secret of a runtime's namespace that
	// holds its Git token: an Argo CD credential template
	// (argocd.argoproj.io/secret-type: repo-creds) for the configuration
	// repository's URL. The chart receives its name (runtime.gitCredentials).
	RuntimeGitCredentials = "onprem-runtime-git"
)

// RuntimeRelease is the Helm release (and Component) name of a runtime.
func RuntimeRelease(name string) string { return "runtime-" + name }

// RuntimeInputError is a runtime's name or namespace that cannot be used.
type RuntimeInputError struct{ Err error }

func (e *RuntimeInputError) Error() string { return e.Err.Error() }
func (e *RuntimeInputError) Unwrap() error { return e.Err }

// RuntimeDefaults names an unnamed runtime codefresh and puts it in the
// namespace named after it when none is given, and checks both.
func RuntimeDefaults(rt config.Runtime) (config.Runtime, error) {
	if rt.Name == "" {
		rt.Name = config.DefaultRuntimeName
	}
	if msgs := validation.IsDNS1123Label(rt.Name); len(msgs) > 0 {
		return rt, &RuntimeInputError{fmt.Errorf("runtime name %q: %s", rt.Name, strings.Join(msgs, "; "))}
	}
	if max := 53 - len(RuntimeRelease("")); len(rt.Name) > max {
		return rt, &RuntimeInputError{fmt.Errorf("runtime name %q is %d characters long: at most %d (its Helm release is %s)", rt.Name, len(rt.Name), max, RuntimeRelease(rt.Name))}
	}
	if rt.Namespace == "" {
		rt.Namespace = rt.Name
	}
	if msgs := validation.IsDNS1123Label(rt.Namespace); len(msgs) > 0 {
		return rt, &RuntimeInputError{fmt.Errorf("runtime %s: namespace %q: %s", rt.Name, rt.Namespace, strings.Join(msgs, "; "))}
	}
	return rt, nil
}

// RuntimeOptions is what RenderRuntime needs.
type RuntimeOptions struct {
	// Installation is the platform's configuration (defaulted and valid),
	// with spec.version the release's; its runtimeConfig.repository is the
	// configuration repository the runtime is given.
	Installation *config.Installation
	Release      *release.Release
	// Runtime is the runtime (RuntimeDefaults applied here).
	Runtime config.Runtime
	// Chart is the release's runtime chart, already fetched (see
	// installer/chartfetch); its name and version must be the release's.
	Chart *chartv2.Chart
	// Manifests defaults to the embedded ones (a bundle brings its own).
	Manifests fs.FS
}

// RenderRuntime renders one GitOps runtime: the runtime chart with the
// release's values, the image references of the release (each written at
// its values path) and the runtime's own block, then the post-render.
//
// The runtime's values block (what the chart may read):
//
//	runtime.name, runtime.namespace
//	runtime.configRepository.{url,branch,path}
//	runtime.gitCredentials   the Secret holding the Git token
//	global                   as for the platform's charts
func RenderRuntime(ctx context.Context, o RuntimeOptions) (*Component, error) {
	in, rel := o.Installation, o.Release
	if in == nil || rel == nil || o.Chart == nil || o.Chart.Metadata == nil {
		return nil, fmt.Errorf("render runtime: an installation, a release and a chart are required")
	}
	a := rel.Runtime
	if a == nil {
		return nil, fmt.Errorf("release %s has no GitOps runtime (its manifest has no runtime section)", rel.Version)
	}
	rt, err := RuntimeDefaults(o.Runtime)
	if err != nil {
		return nil, err
	}
	if o.Manifests == nil {
		o.Manifests = manifests.FS
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if got := o.Chart.Metadata; got.Name != a.Chart || got.Version != a.ChartVersion {
		return nil, fmt.Errorf("runtime %s: release %s needs chart %s %s, but was given %s %s", rt.Name, rel.Version, a.Chart, a.ChartVersion, got.Name, got.Version)
	}

	values := sizing.Merge(nil, a.Values)
	repos := map[string]bool{}
	paths := make([]string, 0, len(a.Images))
	for p := range a.Images {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		img, ok := rel.Image(a.Images[p])
		if !ok {
			return nil, fmt.Errorf("runtime %s: image %q is not in release %s", rt.Name, a.Images[p], rel.Version)
		}
		if err := setPath(values, p, images.Reference(img, in.Spec.Images.Platform)); err != nil {
			return nil, fmt.Errorf("runtime %s: release %s: runtime.images.%s: %w", rt.Name, rel.Version, p, err)
		}
		repos[images.Repository(img, in.Spec.Images.Platform)] = true
	}
	repo := in.Spec.RuntimeConfig.Repository
	values = sizing.Merge(values, map[string]any{
		"global": globalValues(in),
		"runtime": map[string]any{
			"name":      rt.Name,
			"namespace": rt.Namespace,
			"configRepository": map[string]any{
				"url": repo.URL, "branch": repo.Branch, "path": repo.Path,
			},
			"gitCredentials": RuntimeGitCredentials,
		},
	})
	name := RuntimeRelease(rt.Name)
	ms, err := charts.Template(o.Chart, name, rt.Namespace, values)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", rt.Name, err)
	}
	var objs []*unstructured.Unstructured
	for _, m := range ms {
		decoded, err := decodeObjects("runtime "+rt.Name+": "+m.Template, []byte(m.Content))
		if err != nil {
			return nil, err
		}
		for _, obj := range decoded {
			setLabel(obj, ComponentLabel, name)
			if namespaced(obj) {
				obj.SetNamespace("")
			}
			objs = append(objs, obj)
		}
	}
	post := &postRender{in: in, manifests: o.Manifests, repositories: sortedKeys(repos), namespace: rt.Namespace, runner: true}
	out, err := post.run(objs)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", rt.Name, err)
	}
	installOrder(out)
	return &Component{Name: name, Group: RuntimeGroup, Chart: a.Chart, ChartVersion: a.ChartVersion, Values: values, Objects: out, Loaded: o.Chart}, nil
}

// namespaced tells the cluster-scoped kinds a runtime chart brings.
func namespaced(obj *unstructured.Unstructured) bool {
	switch obj.GetKind() {
	case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace",
		"PriorityClass", "StorageClass", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
		return false
	}
	return true
}

// setPath writes value at a dot-separated path of values, making the maps
// on the way; a path that crosses a value that is not a map is an error.
func setPath(values map[string]any, path string, value any) error {
	keys := strings.Split(path, ".")
	m := values
	for i, k := range keys {
		if k == "" {
			return fmt.Errorf("%q is not a values path (empty key)", path)
		}
		if i == len(keys)-1 {
			m[k] = value
			return nil
		}
		next, ok := m[k]
		if !ok || next == nil {
			child := map[string]any{}
			m[k] = child
			m = child
			continue
		}
		child, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("%s is a %T, not a map", strings.Join(keys[:i+1], "."), next)
		}
		m = child
	}
	return nil
}
