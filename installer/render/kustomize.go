package render

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/images"
)

// kustomizationFiles are the names kustomize accepts for its file.
var kustomizationFiles = config.KustomizationFiles

// postRender runs the kustomize stage over the whole platform in memory:
// the platform's own bases from manifests/ plus every chart's objects
// (their images relocated to spec.registry first), then the built-in
// overlays in order (namespace and common labels, the restricted Pod
// Security fields, hardening, pull Secret, placement, proxy environment),
// then the operator's overlay folders. No kustomize binary is involved.
type postRender struct {
	in        *config.Installation
	manifests fs.FS
	// components of manifests/components/ that the configuration selects.
	baseComponents []string
	// namespace, when set, replaces spec.namespace as the namespace of
	// every object. runner leaves out the platform's own bases and the
	// operator's overlays (which patch the platform's objects by name): a
	// build runner (RenderRunner) lives in a namespace of its own and
	// brings its own policies.
	namespace string
	runner    bool
	// upstream: the charts are not onprem's (a GitOps runtime's): they
	// get the restricted Pod Security fields but not the platform's own
	// hardening (their pods call the Kubernetes API and may read their
	// Services' variables without saying so), and keep their own
	// app.kubernetes.io/part-of labels (Argo CD finds its ConfigMaps and
	// Secrets by part-of: argocd).
	upstream bool
}

// userOverlays are the operator's overlay folders this post-render applies
// (none for a runner's or a runtime's).
func (p *postRender) userOverlays() []string {
	if p.runner {
		return nil
	}
	return p.in.Spec.Overlays
}

func (p *postRender) run(charted []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	dropNulls(charted)
	// With a private registry, every image the charts render moves there:
	// the containers', and the ones they write into configuration.
	if reg := p.in.Spec.Registry; reg.Host != "" {
		if err := images.RelocateObjects(charted, reg.Host, reg.PathPrefix); err != nil {
			return nil, fmt.Errorf("post-render: relocating images to spec.registry: %w", err)
		}
	}
	mem, err := p.tree(charted)
	if err != nil {
		return nil, err
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(mem, kustomizeRoot)
	if err != nil {
		return nil, fmt.Errorf("post-render (kustomize): %w", err)
	}
	if overlays := p.userOverlays(); len(overlays) > 0 {
		if rm, err = p.applyOverlays(k, mem, rm, overlays); err != nil {
			return nil, err
		}
	}
	out, err := objectsOf(rm)
	if err != nil {
		return nil, err
	}
	if p.runner {
		return out, nil
	}
	return p.enforce(out)
}

// applyOverlays builds the operator's overlays over seen, the platform as
// the built-in overlays leave it (in no namespace yet), then puts every
// object in its namespace. Three builds instead of one, so that what each
// overlay's targets select can be checked against what kustomize gave the
// overlays: a target that selects nothing is an error, not a patch that
// silently does nothing.
func (p *postRender) applyOverlays(k *krusty.Kustomizer, mem filesys.FileSystem, seen resmap.ResMap, overlays []string) (resmap.ResMap, error) {
	stage := func(dir string, objs resmap.ResMap, kustomization map[string]any) (resmap.ResMap, error) {
		docs, err := objs.AsYaml()
		if err != nil {
			return nil, fmt.Errorf("post-render: %w", err)
		}
		kustomization["apiVersion"] = "kustomize.config.k8s.io/v1beta1"
		kustomization["kind"] = "Kustomization"
		kustomization["resources"] = []any{"resources.yaml"}
		b, err := yaml.Marshal(kustomization)
		if err != nil {
			return nil, fmt.Errorf("post-render: %w", err)
		}
		if err := mem.MkdirAll(dir); err != nil {
			return nil, err
		}
		if err := mem.WriteFile(dir+"/resources.yaml", docs); err != nil {
			return nil, err
		}
		if err := mem.WriteFile(dir+"/kustomization.yaml", b); err != nil {
			return nil, err
		}
		return k.Run(mem, dir)
	}
	var components []any
	for i := range overlays {
		components = append(components, fmt.Sprintf("../user/%d", i))
	}
	patched, err := stage("/overlays", seen, map[string]any{"components": components})
	if err != nil {
		return nil, overlayFailure(err, overlays, seen)
	}
	if errs := checkOverlayTargets(overlays, seen, patched); len(errs) > 0 {
		return nil, errs
	}
	out, err := stage("/namespaced", patched, map[string]any{"namespace": p.targetNamespace()})
	if err != nil {
		return nil, fmt.Errorf("post-render (kustomize): %w", err)
	}
	return out, nil
}

// objectsOf turns kustomize's resources into objects.
func objectsOf(rm resmap.ResMap) ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, 0, rm.Size())
	for _, r := range rm.Resources() {
		// Through JSON, so that numbers are int64 or float64 as the
		// unstructured helpers expect (kustomize hands out plain ints).
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("post-render: %s: %w", r.CurId(), err)
		}
		var m map[string]any
		if err := utiljson.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("post-render: %s: %w", r.CurId(), err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// targetNamespace is the namespace every object is put in.
func (p *postRender) targetNamespace() string {
	if p.namespace != "" {
		return p.namespace
	}
	return p.in.Spec.Namespace
}

// kustomizeRoot is the kustomization that tree writes and run builds.
const kustomizeRoot = "/render"

// tree writes the in-memory kustomize tree of the post-render: the charts'
// objects, the platform's bases, the built-in overlays and the operator's.
func (p *postRender) tree(charted []*unstructured.Unstructured) (filesys.FileSystem, error) {
	mem := filesys.MakeFsInMemory()
	if err := copyFS(mem, p.manifests, "/manifests"); err != nil {
		return nil, fmt.Errorf("post-render: %w", err)
	}
	objs := make([]map[string]any, 0, len(charted))
	for _, u := range charted {
		objs = append(objs, u.Object)
	}
	stream, err := yamlStream(objs)
	if err != nil {
		return nil, fmt.Errorf("post-render: %w", err)
	}
	platformComponents := prefixed("../../manifests/components/", p.baseComponents)
	network, policies, err := networkComponent(p.in.Spec)
	if err != nil {
		return nil, err
	}
	files := map[string]any{
		"/render/resources.yaml": stream,
	}
	if network != nil {
		docs, err := yamlStream(policies)
		if err != nil {
			return nil, fmt.Errorf("post-render: NetworkPolicies: %w", err)
		}
		files["/builtin/network/kustomization.yaml"] = network
		files["/builtin/network/policies.yaml"] = docs
		platformComponents = append(platformComponents, "../../builtin/network")
	}
	files["/render/platform/kustomization.yaml"] = map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  []any{"../../manifests/base"},
		"components": platformComponents,
		"labels": []any{map[string]any{
			"pairs":            map[string]any{ComponentLabel: PlatformComponent},
			"includeSelectors": false,
		}},
	}
	components := []string{"../builtin/common"}
	files["/builtin/common/kustomization.yaml"] = p.common()
	components = append(components, "../manifests/components/restricted")
	if !p.upstream {
		components = append(components, "../manifests/components/hardening")
	}
	if c, err := p.containers(charted); err != nil {
		return nil, err
	} else if c != nil {
		files["/builtin/containers/kustomization.yaml"] = c
		components = append(components, "../builtin/containers")
	}
	if ps, err := p.pullSecrets(charted); err != nil {
		return nil, err
	} else if ps != nil {
		files["/builtin/pull-secret/kustomization.yaml"] = ps
		components = append(components, "../builtin/pull-secret")
	}
	if pl := p.placement(); pl != nil {
		files["/builtin/placement/kustomization.yaml"] = pl
		components = append(components, "../builtin/placement")
	}
	if px, err := p.proxy(charted); err != nil {
		return nil, err
	} else if px != nil {
		files["/builtin/proxy/kustomization.yaml"] = px
		components = append(components, "../builtin/proxy")
	}
	// The operator's overlays are built after these (applyOverlays), and
	// the namespace is set after them.
	for i, dir := range p.userOverlays() {
		if err := loadOverlay(mem, dir, fmt.Sprintf("/user/%d", i)); err != nil {
			return nil, err
		}
	}
	resources := []any{"platform", "resources.yaml"}
	if p.runner {
		resources = []any{"resources.yaml"}
	}
	top := map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1beta1",
		"kind":       "Kustomization",
		"resources":  resources,
		"components": toAny(components),
	}
	if len(p.userOverlays()) == 0 {
		top["namespace"] = p.targetNamespace()
	}
	files["/render/kustomization.yaml"] = top
	for name, content := range files {
		var data []byte
		switch c := content.(type) {
		case string:
			data = []byte(c)
		default:
			b, err := yaml.Marshal(c)
			if err != nil {
				return nil, fmt.Errorf("post-render: %s: %w", name, err)
			}
			data = b
		}
		if err := mem.MkdirAll(path.Dir(name)); err != nil {
			return nil, err
		}
		if err := mem.WriteFile(name, data); err != nil {
			return nil, err
		}
	}
	return mem, nil
}

// common sets the installation's labels first, so that every later overlay
// (the operator's too) can select by them. The namespace is set last, by the
// top kustomization, so that the operator's patches need not name it.
func (p *postRender) common() map[string]any {
	pairs := map[string]any{
		"app.kubernetes.io/part-of": "onprem",
		"onprem.dev/installation":   p.in.Metadata.Name,
	}
	if p.upstream {
		delete(pairs, "app.kubernetes.io/part-of")
	}
	return map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1alpha1",
		"kind":       "Component",
		"labels": []any{map[string]any{
			"pairs":            pairs,
			"includeSelectors": false,
			"includeTemplates": true,
		}},
	}
}

// workloadKinds are the kinds whose pod template the placement and proxy
// overlays change.
var workloadKinds = []struct {
	apiVersion, kind string
	// template is the path of the pod template.
	template []string
}{
	{"apps/v1", "Deployment", podTemplatePath}, {"apps/v1", "StatefulSet", podTemplatePath}, {"apps/v1", "DaemonSet", podTemplatePath},
	{"batch/v1", "Job", podTemplatePath}, {"batch/v1", "CronJob", []string{"spec", "jobTemplate", "spec", "template"}},
	// A chart's bare Pods: Helm test hooks.
	{"v1", "Pod", nil},
}

var podTemplatePath = []string{"spec", "template"}

// nested returns leaf wrapped in maps along path: nested(["a","b"], x) is
// {"a": {"b": x}}.
func nested(path []string, leaf any) map[string]any {
	out := leaf
	for i := len(path) - 1; i >= 0; i-- {
		out = map[string]any{path[i]: out}
	}
	return out.(map[string]any)
}

// placement adds the node selector and tolerations to every pod template.
func (p *postRender) placement() map[string]any {
	pl := p.in.Spec.Placement
	if len(pl.NodeSelector) == 0 && len(pl.Tolerations) == 0 {
		return nil
	}
	podSpec := map[string]any{}
	if len(pl.NodeSelector) > 0 {
		podSpec["nodeSelector"] = pl.NodeSelector
	}
	if len(pl.Tolerations) > 0 {
		podSpec["tolerations"] = pl.Tolerations
	}
	var patches []any
	for _, w := range workloadKinds {
		patch := nested(w.template, map[string]any{"spec": podSpec})
		patch["apiVersion"], patch["kind"], patch["metadata"] = w.apiVersion, w.kind, map[string]any{"name": "placement"}
		b, _ := yaml.Marshal(patch)
		patches = append(patches, map[string]any{
			"target": map[string]any{"kind": w.kind},
			"patch":  string(b),
		})
	}
	return map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1alpha1",
		"kind":       "Component",
		"patches":    patches,
	}
}

// pullSecrets gives an upstream chart's pods and ServiceAccounts the
// registry's pull Secret (spec.registry.pullSecret), which onprem copies
// into the chart's namespace: the chart's own values paths reach the pods
// whose templates read one (release.RemoteChart.PullSecrets); hook Jobs
// and components without such a path get it here, and so do the
// ServiceAccounts, for the pods that the runtime's controllers create
// later (workflows, event buses). Nil for the charts onprem writes, which
// take it from their values, and without a pull Secret.
func (p *postRender) pullSecrets(objs []*unstructured.Unstructured) (map[string]any, error) {
	name := p.in.Spec.Registry.PullSecret
	if !p.upstream || name == "" {
		return nil, nil
	}
	ref := map[string]any{"name": name}
	var patches []any
	for _, w := range workloadKinds {
		// imagePullSecrets merges by name: the chart's entries stay.
		patch := nested(w.template, map[string]any{"spec": map[string]any{"imagePullSecrets": []any{ref}}})
		patch["apiVersion"], patch["kind"], patch["metadata"] = w.apiVersion, w.kind, map[string]any{"name": "pull-secret"}
		b, err := yaml.Marshal(patch)
		if err != nil {
			return nil, err
		}
		patches = append(patches, map[string]any{"target": map[string]any{"kind": w.kind}, "patch": string(b)})
	}
	for _, u := range objs {
		if u.GetKind() != "ServiceAccount" || u.GetAPIVersion() != "v1" {
			continue
		}
		// A ServiceAccount's list is replaced whole by a patch: the
		// chart's entries are written again.
		have, _, _ := unstructured.NestedSlice(u.Object, "imagePullSecrets")
		if slices.ContainsFunc(have, func(e any) bool { m, _ := e.(map[string]any); return m["name"] == name }) {
			continue
		}
		b, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": u.GetName()},
			"imagePullSecrets": append(slices.Clone(have), ref)})
		if err != nil {
			return nil, err
		}
		patches = append(patches, map[string]any{"target": map[string]any{"kind": "ServiceAccount", "name": u.GetName()}, "patch": string(b)})
	}
	return patchComponent(patches), nil
}

// noProxy is NO_PROXY for pods of namespace ns: loopback, the cluster's
// services and ns always, then the operator's spec.proxy.noProxy.
func noProxy(ns, operators string) string {
	l := []string{"localhost", "127.0.0.1", ".svc", ".cluster.local", ns}
	if operators != "" {
		l = append(l, operators)
	}
	return strings.Join(l, ",")
}

// workloadTemplate is the path of a workload's pod template (nil for a
// Pod, whose spec is the pod's), and whether u is a workload at all.
func workloadTemplate(u *unstructured.Unstructured) ([]string, bool) {
	for _, w := range workloadKinds {
		if u.GetKind() == w.kind && u.GetAPIVersion() == w.apiVersion {
			return w.template, true
		}
	}
	return nil, false
}

// containerPatches writes one strategic-merge patch per workload of objs
// that patch returns container fields for (a map per container name, nil
// for none), naming its containers and init containers: kustomize cannot
// patch "every container".
func containerPatches(objs []*unstructured.Unstructured, patch func(c map[string]any) map[string]any) ([]any, error) {
	var patches []any
	for _, u := range objs {
		template, ok := workloadTemplate(u)
		if !ok {
			continue
		}
		podSpec := map[string]any{}
		for _, field := range []string{"containers", "initContainers"} {
			cs, _, _ := unstructured.NestedSlice(u.Object, append(append([]string{}, template...), "spec", field)...)
			var patched []any
			for _, c := range cs {
				cm, _ := c.(map[string]any)
				name, _ := cm["name"].(string)
				if name == "" {
					continue
				}
				if fields := patch(cm); fields != nil {
					fields["name"] = name
					patched = append(patched, fields)
				}
			}
			if len(patched) > 0 {
				podSpec[field] = patched
			}
		}
		if len(podSpec) == 0 {
			continue
		}
		doc := nested(append(append([]string{}, template...), "spec"), podSpec)
		doc["apiVersion"], doc["kind"], doc["metadata"] = u.GetAPIVersion(), u.GetKind(), map[string]any{"name": u.GetName()}
		b, err := yaml.Marshal(doc)
		if err != nil {
			return nil, err
		}
		patches = append(patches, map[string]any{
			"target": map[string]any{"kind": u.GetKind(), "name": u.GetName()},
			"patch":  string(b),
		})
	}
	return patches, nil
}

// containers gives every container that lacks them the container-level
// fields of the restricted Pod Security Standard: allowPrivilegeEscalation
// false, and ALL among the capabilities it drops (what it adds is kept,
// for render.Check to judge). What a chart sets itself is kept: a
// container that must escalate says so, and Check refuses it unless it is
// a listed exception.
func (p *postRender) containers(objs []*unstructured.Unstructured) (map[string]any, error) {
	patches, err := containerPatches(objs, func(c map[string]any) map[string]any {
		sc, _ := c["securityContext"].(map[string]any)
		want := map[string]any{}
		if _, set := sc["allowPrivilegeEscalation"]; !set {
			want["allowPrivilegeEscalation"] = false
		}
		caps, _ := sc["capabilities"].(map[string]any)
		drop, _ := caps["drop"].([]any)
		if !slices.ContainsFunc(drop, func(d any) bool { s, _ := d.(string); return strings.EqualFold(s, "ALL") }) {
			want["capabilities"] = map[string]any{"drop": append([]any{"ALL"}, drop...)}
		}
		if len(want) == 0 {
			return nil
		}
		return map[string]any{"securityContext": want}
	})
	if err != nil || len(patches) == 0 {
		return nil, err
	}
	return patchComponent(patches), nil
}

// proxy gives every container of every chart workload the proxy
// environment (upper and lower case: tools read either). Kustomize cannot
// patch "every container", so a strategic-merge patch is written per
// workload, naming its containers.
func (p *postRender) proxy(objs []*unstructured.Unstructured) (map[string]any, error) {
	px := p.in.Spec.Proxy
	if px.HTTPProxy == "" && px.HTTPSProxy == "" {
		return nil, nil
	}
	var env []any
	add := func(name, value string) {
		if value != "" {
			env = append(env, map[string]any{"name": name, "value": value}, map[string]any{"name": strings.ToLower(name), "value": value})
		}
	}
	add("HTTP_PROXY", px.HTTPProxy)
	add("HTTPS_PROXY", px.HTTPSProxy)
	add("NO_PROXY", noProxy(p.in.Spec.Namespace, px.NoProxy))

	patches, err := containerPatches(objs, func(map[string]any) map[string]any {
		return map[string]any{"env": env}
	})
	if err != nil || len(patches) == 0 {
		return nil, err
	}
	return patchComponent(patches), nil
}

// loadOverlay copies an operator's overlay folder into the in-memory tree.
// The folder holds a kustomize Component; a Kustomization without resources
// is accepted and treated as one (it can only be meant as patches).
// config.OverlayProblem, which 'onprem config validate' reports, refuses
// every other folder.
func loadOverlay(mem filesys.FileSystem, dir, dst string) error {
	info, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("spec.overlays: %s: %w", dir, err)
	}
	if !info.IsDir() {
		return fmt.Errorf("spec.overlays: %s is not a folder; an overlay is a folder holding a kustomization.yaml", dir)
	}
	if msg := config.OverlayProblem(dir); msg != "" {
		return fmt.Errorf("spec.overlays: %s", msg)
	}
	if err := copyFS(mem, os.DirFS(dir), dst); err != nil {
		return fmt.Errorf("spec.overlays: %s: %w", dir, err)
	}
	var kfile string
	for _, n := range kustomizationFiles {
		if mem.Exists(dst + "/" + n) {
			kfile = dst + "/" + n
			break
		}
	}
	data, err := mem.ReadFile(kfile)
	if err != nil {
		return fmt.Errorf("spec.overlays: %s: %w", dir, err)
	}
	var k map[string]any
	if err := yaml.Unmarshal(data, &k); err != nil {
		return fmt.Errorf("spec.overlays: %s: not a kustomization: %w", filepath.Join(dir, path.Base(kfile)), err)
	}
	if k == nil {
		// OverlayProblem refuses an empty file; never write into a nil map.
		k = map[string]any{}
	}
	if k["kind"] == "Component" {
		return nil
	}
	k["apiVersion"] = "kustomize.config.k8s.io/v1alpha1"
	k["kind"] = "Component"
	b, err := yaml.Marshal(k)
	if err != nil {
		return err
	}
	return mem.WriteFile(kfile, b)
}

// copyFS copies every file of src under dst in mem.
func copyFS(mem filesys.FileSystem, src fs.FS, dst string) error {
	return fs.WalkDir(src, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := path.Join(dst, p)
		if d.IsDir() {
			return mem.MkdirAll(target)
		}
		if strings.HasSuffix(p, ".go") {
			return nil
		}
		data, err := fs.ReadFile(src, p)
		if err != nil {
			return err
		}
		return mem.WriteFile(target, data)
	})
}

// yamlStream writes objects as one YAML stream, each document after "---".
func yamlStream(objs []map[string]any) (string, error) {
	var b strings.Builder
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			u := unstructured.Unstructured{Object: o}
			return "", fmt.Errorf("%s/%s: %w", u.GetKind(), u.GetName(), err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.String(), nil
}

func prefixed(prefix string, names []string) []any {
	out := make([]any, 0, len(names))
	for _, n := range names {
		out = append(out, prefix+n)
	}
	return out
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// sortedKeys returns a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// patchComponent is a kustomize Component applying patches.
func patchComponent(patches []any) map[string]any {
	return map[string]any{
		"apiVersion": "kustomize.config.k8s.io/v1alpha1",
		"kind":       "Component",
		"patches":    patches,
	}
}
