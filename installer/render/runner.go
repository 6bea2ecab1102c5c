package render

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/manifests"
)

// Build runners are rendered one at a time, apart from the platform: each
// is a Helm release of the release's runner chart (release.Release.Runner)
// in the runner's own namespace, on the platform's cluster or another one.
// They go through the same kustomize post-render as the platform (labels,
// image relocation to spec.registry, hardening, placement, proxy), without
// the platform's own bases and the operator's overlays (spec.overlays patch
// the platform's objects, often by name, and a runner has none of them).
const (
	// RunnerChart is the chart of every runner.
	RunnerChart = "runner"
	// RunnerGroup is the Group of a runner's Component.
	RunnerGroup = "runner"
)

// RunnerOptions is what RenderRunner needs.
type RunnerOptions struct {
	// Installation is the platform's configuration (defaulted and valid),
	// with spec.version the release's.
	Installation *config.Installation
	Release      *release.Release
	// Runner is the runner; an empty namespace and a zero concurrency get
	// their defaults (onprem-runner-NAME, 4).
	Runner config.Runner
	// PlatformCA names the ConfigMap of the runner's namespace that holds
	// the platform's CA (ca.crt); empty: the agent trusts the system's.
	PlatformCA string
	// Charts and Manifests default to the embedded ones (a bundle brings
	// its own).
	Charts    fs.FS
	Manifests fs.FS
}

// RunnerInputError is a runner's name, namespace or concurrency that
// config's rules (config.ValidateRunner) refuse; Err wraps each problem's
// config.FieldError.
type RunnerInputError struct{ Err error }

func (e *RunnerInputError) Error() string { return e.Err.Error() }
func (e *RunnerInputError) Unwrap() error { return e.Err }

// RunnerPath is the field path under which render's refusals name a
// runner's fields: the runner it is given may come from flags rather than
// from spec.runners, whose index it does not know.
const RunnerPath = "spec.runners[]"

// RunnerDefaults fills a runner's namespace and concurrency when unset
// (config.RunnerDefaults) and checks the runner with config's rules
// (config.ValidateRunner): the build engine's namespace is the runner's
// plus config.RunnerEngineSuffix, and must be a DNS label too.
func RunnerDefaults(r config.Runner) (config.Runner, error) {
	r = config.RunnerDefaults(r)
	if err := config.ValidateRunner(RunnerPath, r); err != nil {
		return r, &RunnerInputError{refusal("runner", r.Name, RunnerPath, err)}
	}
	return r, nil
}

// RenderRunner renders one build runner: the release's runner chart with
// the runner's values, then the platform's post-render. The objects of the
// build engine stay in its own namespace (config.RunnerEngineNamespace); every
// other object is in the runner's.
func RenderRunner(ctx context.Context, o RunnerOptions) (*Component, error) {
	in, rel := o.Installation, o.Release
	if in == nil || rel == nil {
		return nil, fmt.Errorf("render runner: an installation and a release are required")
	}
	if rel.Runner == nil {
		return nil, fmt.Errorf("release %s has no build runner (its manifest has no runner section)", rel.Version)
	}
	r, err := RunnerDefaults(o.Runner)
	if err != nil {
		return nil, err
	}
	if o.Charts == nil {
		o.Charts = charts.FS
	}
	if o.Manifests == nil {
		o.Manifests = manifests.FS
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	a := rel.Runner
	name, engineNS := config.RunnerRelease(r.Name), config.RunnerEngineNamespace(r.Namespace)
	ch, err := charts.LoadFrom(o.Charts, a.Chart)
	if err != nil {
		return nil, fmt.Errorf("runner %s: %w", r.Name, err)
	}
	if ch.Metadata.Version != a.ChartVersion {
		return nil, fmt.Errorf("runner %s: release %s needs chart %s %s, but this onprem has %s %s: use the onprem that ships release %s, or a bundle of it",
			r.Name, rel.Version, a.Chart, a.ChartVersion, a.Chart, ch.Metadata.Version, rel.Version)
	}

	refs := map[string]any{}
	for key, imgName := range a.Images {
		img, ok := rel.Image(imgName)
		if !ok {
			return nil, fmt.Errorf("runner %s: image %q is not in release %s", r.Name, imgName, rel.Version)
		}
		refs[key] = images.Reference(img, in.Spec.Images.Platform)
	}
	engine := map[string]any{"namespace": engineNS}
	if reg := in.Spec.Registry; reg.Host != "" {
		// docker.io/library/x is relocated to HOST/PREFIX/library/x: the
		// engine pulls builds' docker.io images through the same path.
		mirror := strings.TrimSuffix(reg.Host, "/")
		if p := strings.Trim(reg.PathPrefix, "/"); p != "" {
			mirror += "/" + p
		}
		engine["registryMirror"] = mirror
		if reg.Insecure {
			engine["insecureRegistries"] = []any{reg.Host}
		}
	}
	values := map[string]any{
		"global":        globalValues(in),
		"images":        refs,
		"name":          r.Name,
		"concurrency":   r.Concurrency,
		"platformCA":    o.PlatformCA,
		"engine":        engine,
		"networkPolicy": map[string]any{"egressPorts": egressPorts(in.Spec)},
	}
	ms, err := charts.Template(ch, name, r.Namespace, values)
	if err != nil {
		return nil, fmt.Errorf("runner %s: %w", r.Name, err)
	}
	// The post-render puts every object in the runner's namespace (so that
	// the operator's overlays match them the way they match the
	// platform's); the engine's go back to the namespace the chart gave
	// them.
	inEngine := map[string]bool{}
	var objs []*unstructured.Unstructured
	decoded, crds, err := chartObjects("runner "+r.Name, ms)
	if err != nil {
		return nil, err
	}
	for _, obj := range decoded {
		if obj.GetNamespace() == engineNS {
			inEngine[objectKey(obj)] = true
		}
		setLabel(obj, ComponentLabel, name)
		obj.SetNamespace("")
		objs = append(objs, obj)
	}
	post := &postRender{in: in, manifests: o.Manifests, namespace: r.Namespace, runner: true}
	out, err := post.run(objs)
	if err != nil {
		return nil, fmt.Errorf("runner %s: %w", r.Name, err)
	}
	for _, obj := range out {
		if inEngine[objectKey(obj)] {
			obj.SetNamespace(engineNS)
		}
	}
	c := &Component{Name: name, Group: RunnerGroup, Chart: a.Chart, ChartVersion: a.ChartVersion, Values: values, Objects: out}
	addChartCRDs(c, crds)
	installOrder(c.Objects)
	return c, nil
}

func objectKey(o *unstructured.Unstructured) string {
	return o.GetAPIVersion() + "/" + o.GetKind() + "/" + o.GetName()
}

// egressPorts are the TCP ports a runner may reach outside the cluster:
// 443 (the platform's ingress, Git servers, registries), the private
// registry's and the proxy's.
func egressPorts(s config.Spec) []any {
	set := map[int]bool{443: true}
	if s.Registry.Host != "" {
		if _, p, err := net.SplitHostPort(s.Registry.Host); err == nil {
			if n, err := strconv.Atoi(p); err == nil && n > 0 && n < 65536 {
				set[n] = true
			}
		}
	}
	for _, px := range []string{s.Proxy.HTTPProxy, s.Proxy.HTTPSProxy} {
		if px == "" {
			continue
		}
		u, err := url.Parse(px)
		if err != nil || u.Host == "" {
			continue
		}
		port := u.Port()
		switch {
		case port != "":
		case u.Scheme == "https":
			port = "443"
		default:
			port = "80"
		}
		if n, err := strconv.Atoi(port); err == nil && n > 0 && n < 65536 {
			set[n] = true
		}
	}
	ports := make([]int, 0, len(set))
	for p := range set {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	out := make([]any, len(ports))
	for i, p := range ports {
		out[i] = p
	}
	return out
}
