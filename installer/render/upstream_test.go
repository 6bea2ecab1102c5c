package render

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"helm.sh/helm/v4/pkg/action"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/gitops/gitopstest"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
)

// The GitOps runtimes of the shipped releases, rendered from the real
// upstream chart packages (gitopstest.Upstream). Rendering the real chart
// is slow (its templates deep-copy their whole context, chart files
// included, dozens of times: seconds per render), so each release and
// mode is rendered once per test binary and shared by every test below.

// upstreamMode is one way a runtime is installed.
type upstreamMode struct {
	name string
	// set changes the installation, the runtime and the options.
	set func(in *config.Installation, o *RuntimeOptions)
}

// The modes every shipped release's runtime is rendered in.
var upstreamModes = []upstreamMode{
	{"ingress", func(in *config.Installation, o *RuntimeOptions) {
		// The configuration runtime, reached through the platform's
		// ingress class.
		o.ConfigurationRuntime = true
	}},
	{"tunnel", func(in *config.Installation, o *RuntimeOptions) {
		o.Runtime.Access = config.RuntimeAccess{Mode: config.RuntimeAccessTunnel,
			TunnelServer: config.TunnelServer{Host: "register.tunnels.example.com", SubdomainHost: "tunnels.example.com"}}
	}},
	{"private-registry", func(in *config.Installation, o *RuntimeOptions) {
		in.Spec.Registry = config.Registry{Host: "registry.airgap.internal:5000", PathPrefix: "onprem", PullSecret: "airgap-pull"}
	}},
	{"self-signed-ca", func(in *config.Installation, o *RuntimeOptions) {
		// A platform whose certificate the runtime's nodes do not trust:
		// the runtime's namespace holds its CA.
		o.PlatformCA = true
	}},
}

// upstreamModeNamed is the mode of upstreamModes with that name.
func upstreamModeNamed(t testing.TB, name string) upstreamMode {
	t.Helper()
	for _, m := range upstreamModes {
		if m.name == name {
			return m
		}
	}
	t.Fatalf("no upstream mode %q", name)
	return upstreamMode{}
}

// upstreamRuntime is one distinct runtime of the shipped releases: the
// releases that install it (the same chart version and runtime section
// render the same objects) and the first of them.
type upstreamRuntime struct {
	releases []string
	release  *release.Release
}

func (u upstreamRuntime) String() string {
	return u.release.Runtime.ChartVersion + " (release " + strings.Join(u.releases, ", ") + ")"
}

// shippedRuntimes lists the distinct runtimes of the embedded releases.
func shippedRuntimes(t testing.TB) []upstreamRuntime {
	t.Helper()
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	var out []upstreamRuntime
	seen := map[string]int{}
	for _, rel := range set.All() {
		if rel.Runtime == nil {
			continue
		}
		b, err := json.Marshal(rel.Runtime)
		if err != nil {
			t.Fatal(err)
		}
		if i, ok := seen[string(b)]; ok {
			out[i].releases = append(out[i].releases, rel.Version)
			continue
		}
		seen[string(b)] = len(out)
		out = append(out, upstreamRuntime{releases: []string{rel.Version}, release: rel})
	}
	if len(out) == 0 {
		t.Fatal("no shipped release installs a GitOps runtime")
	}
	return out
}

// upstreamRender is a runtime rendered by onprem from the real chart.
type upstreamRender struct {
	in      *config.Installation
	opts    RuntimeOptions
	c       *Component
	err     error
	version string
}

var (
	upstreamMu      sync.Mutex
	upstreamRenders = map[string]*upstreamRender{}
	upstreamOnce    = map[string]*sync.Once{}
)

// renderUpstream renders the runtime of rel in mode from the real chart
// (once per test binary).
func renderUpstream(t testing.TB, rel *release.Release, mode upstreamMode) *upstreamRender {
	t.Helper()
	key := rel.Version + "/" + mode.name
	upstreamMu.Lock()
	once, ok := upstreamOnce[key]
	if !ok {
		once = &sync.Once{}
		upstreamOnce[key] = once
	}
	upstreamMu.Unlock()
	once.Do(func() {
		in, _ := load(t, "minimal")
		in.Spec.Version = rel.Version
		in.Spec.RuntimeConfig.Repository = config.GitRepository{URL: "https://git.example.com/platform/gitops.git", Branch: "main"}
		in.Spec.RuntimeConfig.AccountID = "64f0c1d2e3a4b5c6d7e8f901"
		o := RuntimeOptions{Installation: in, Release: rel, Runtime: config.Runtime{Name: "edge"},
			Chart: gitopstest.Upstream(t, rel.Runtime.ChartVersion)}
		mode.set(in, &o)
		var c *Component
		rt, err := RuntimeDefaults(o.Runtime)
		if err == nil {
			o.Runtime = rt
			c, err = RenderRuntime(context.Background(), o)
		}
		r := &upstreamRender{in: in, opts: o, c: c, err: err, version: rel.Runtime.ChartVersion}
		upstreamMu.Lock()
		upstreamRenders[key] = r
		upstreamMu.Unlock()
	})
	upstreamMu.Lock()
	defer upstreamMu.Unlock()
	r := upstreamRenders[key]
	if r == nil || r.err != nil {
		var err error
		if r != nil {
			err = r.err
		}
		t.Fatalf("runtime of release %s, %s mode: %v", rel.Version, mode.name, err)
	}
	return r
}

// forEachUpstream runs f, in parallel, for every distinct runtime of the
// shipped releases in every mode.
func forEachUpstream(t *testing.T, f func(t *testing.T, u upstreamRuntime, mode upstreamMode, r *upstreamRender)) {
	for _, u := range shippedRuntimes(t) {
		for _, mode := range upstreamModes {
			t.Run(u.release.Runtime.ChartVersion+"/"+mode.name, func(t *testing.T) {
				t.Parallel()
				f(t, u, mode, renderUpstream(t, u.release, mode))
			})
		}
	}
}

// helmReference renders the real chart at version with values the way
// Helm's own install does, client-only (`helm template --include-crds`):
// the hooks and the manifest, each document decoded. The result is a pure
// function of the Helm SDK's version, the chart package, the release's
// name and namespace and the values: it is kept in $ONPREM_CACHE under a
// digest of all of them, so that a warm run renders only onprem's side.
func helmReference(t testing.TB, version, releaseName, namespace string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	dir := os.Getenv("ONPREM_CACHE")
	if dir == "" {
		return helmRender(t, gitopstest.Upstream(t, version), releaseName, namespace, values)
	}
	h := sha256.New()
	vals, err := json.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(h, "helm %s\x00%s\x00%s\x00", helmSDKVersion(), releaseName, namespace)
	h.Write(gitopstest.UpstreamArchive(t, version))
	h.Write(vals)
	path := filepath.Join(dir, "render-reference", hex.EncodeToString(h.Sum(nil))+".json")
	if data, err := os.ReadFile(path); err == nil {
		var objs []map[string]any
		if err := utiljson.Unmarshal(data, &objs); err == nil {
			out := make([]*unstructured.Unstructured, len(objs))
			for i, o := range objs {
				out[i] = &unstructured.Unstructured{Object: o}
			}
			return out
		}
	}
	out := helmRender(t, gitopstest.Upstream(t, version), releaseName, namespace, values)
	objs := make([]map[string]any, len(out))
	for i, o := range out {
		objs[i] = o.Object
	}
	data, err := json.Marshal(objs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err == nil {
		tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
		if os.WriteFile(tmp, data, 0o644) == nil {
			_ = os.Rename(tmp, path)
		}
	}
	return out
}

// helmSDKVersion is the Helm SDK's module version in this test binary.
func helmSDKVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "helm.sh/helm/v4" {
				return d.Version
			}
		}
	}
	return "unknown"
}

// helmRender renders chart c with values with Helm's own install,
// client-only (`helm template --include-crds`).
func helmRender(t testing.TB, c *chartv2.Chart, releaseName, namespace string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	in := action.NewInstall(action.NewConfiguration())
	in.DryRunStrategy = action.DryRunClient
	in.ReleaseName = releaseName
	in.Namespace = namespace
	in.IncludeCRDs = true
	in.Replace = true
	// Helm processes the chart's dependencies in place: a copy, so that
	// the shared chart stays as loaded.
	ri, err := in.Run(charts.Clone(c), sizingCopy(values))
	if err != nil {
		t.Fatalf("helm install --dry-run=client: %v", err)
	}
	rel := ri.(*releasev1.Release)
	docs := []string{}
	split := releaseutil.SplitManifests(rel.Manifest)
	keys := make([]string, 0, len(split))
	for k := range split {
		keys = append(keys, k)
	}
	sort.Sort(releaseutil.BySplitManifestsOrder(keys))
	for _, k := range keys {
		docs = append(docs, split[k])
	}
	for _, h := range rel.Hooks {
		docs = append(docs, h.Manifest)
	}
	// Decoded the way Helm's Kubernetes client builds the objects it
	// sends (the YAML-or-JSON decoder of the resource builder).
	var out []*unstructured.Unstructured
	for _, d := range docs {
		dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(d), 4096)
		for {
			var m map[string]any
			err := dec.Decode(&m)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("helm's render: %v", err)
			}
			if len(m) > 0 {
				out = append(out, &unstructured.Unstructured{Object: jsonRoundTrip(t, m)})
			}
		}
	}
	return out
}

// sizingCopy copies values (Helm coalesces into what it is given).
func sizingCopy(v map[string]any) map[string]any {
	b, _ := json.Marshal(v)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}

// jsonRoundTrip gives a value the types the unstructured helpers use
// (int64 and float64 numbers).
func jsonRoundTrip(t testing.TB, m map[string]any) map[string]any {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := utiljson.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func identity(o *unstructured.Unstructured) string {
	gv := o.GetAPIVersion()
	if i := strings.Index(gv, "/"); i >= 0 {
		gv = gv[:i]
	} else {
		gv = ""
	}
	return gv + "/" + o.GetKind() + "/" + o.GetName()
}

func kindCounts(objs []*unstructured.Unstructured) string {
	n := map[string]int{}
	for _, o := range objs {
		n[o.GetKind()]++
	}
	var parts []string
	for _, k := range sortedKeys(n) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n[k]))
	}
	return strings.Join(parts, " ")
}

// Every runtime onprem installs renders exactly the objects Helm's own
// install renders from the same chart package and values (the real
// published chart, every shipped release, every mode): the same kinds and
// names, hooks and the crds/ folders' CustomResourceDefinitions included,
// and the same content but for what onprem adds on purpose, each checked
// for what it must be (additions.judge).
func TestRuntimeRendersLikeHelm(t *testing.T) {
	forEachUpstream(t, func(t *testing.T, u upstreamRuntime, mode upstreamMode, r *upstreamRender) {
		ref := helmReference(t, r.version, r.c.Name, r.opts.Runtime.Namespace, r.c.Values)
		n := compareWithHelm(t, r.c, ref, additions{in: r.in, namespace: r.opts.Runtime.Namespace, upstream: true})
		t.Logf("%s, %s mode: %d objects (Helm's install the same), %d of them the crds/ folders': %s",
			u, mode.name, n, len(r.c.ChartCRDs), kindCounts(r.c.Objects))
		if len(r.c.ChartCRDs) == 0 {
			t.Errorf("no CustomResourceDefinition of the chart's crds/ folders in onprem's render")
		}
	})
}

// The same for the charts onprem ships: every component of the platform
// and a build runner, for every shipped release, with the platform's
// ingress and self-signed CA (minimal) and with a private registry,
// placement, a proxy, the legacy components and scheduled backups
// (everything, without its overlays: an operator's overlay changes what
// it likes).
func TestChartsRenderLikeHelm(t *testing.T) {
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range set.All() {
		for _, cfg := range []string{"minimal", "everything"} {
			t.Run(rel.Version+"/"+cfg, func(t *testing.T) {
				in, _ := load(t, cfg)
				in.Spec.Version, in.Spec.Overlays = rel.Version, nil
				res, err := Render(context.Background(), Options{Installation: in, Release: rel})
				if err != nil {
					t.Fatal(err)
				}
				add := additions{in: in, namespace: in.Spec.Namespace}
				n := 0
				for _, c := range res.Components {
					if c.Chart == "" {
						continue // the platform's own objects, from manifests/
					}
					ch, err := charts.Load(c.Chart)
					if err != nil {
						t.Fatal(err)
					}
					n += compareWithHelm(t, c, helmRender(t, ch, c.Name, in.Spec.Namespace, c.Values), add)
				}
				r, err := RenderRunner(context.Background(), RunnerOptions{Installation: in, Release: rel, Runner: config.Runner{Name: "gpu"}})
				if err != nil {
					t.Fatal(err)
				}
				ch, err := charts.Load(r.Chart)
				if err != nil {
					t.Fatal(err)
				}
				ns := config.RunnerNamespacePrefix + "gpu"
				engine := config.RunnerEngineNamespace(ns)
				radd := add
				radd.namespace, radd.alsoNamespace = ns, engine
				n += compareWithHelm(t, r, helmRender(t, ch, r.Name, ns, r.Values), radd)
				t.Logf("release %s, %s: %d objects of %d charts, the same as Helm's install", rel.Version, cfg, n, len(res.Components))
			})
		}
	}
}

// compareWithHelm requires c's objects to be ref's (Helm's render of the
// same chart and values) but for onprem's additions, and returns how many
// there are.
func compareWithHelm(t *testing.T, c *Component, ref []*unstructured.Unstructured, add additions) int {
	t.Helper()
	want := map[string]*unstructured.Unstructured{}
	for _, o := range ref {
		// An object a chart renders twice: Helm applies both, the
		// cluster keeps the last.
		want[identity(o)] = o
	}
	got := map[string]*unstructured.Unstructured{}
	for _, o := range c.Objects {
		if _, dup := got[identity(o)]; dup {
			t.Errorf("%s: onprem renders %s twice", c.Name, identity(o))
		}
		got[identity(o)] = o
	}
	for _, id := range sortedKeys(want) {
		if got[id] == nil {
			t.Errorf("%s: %s: rendered by Helm, missing from onprem's render", c.Name, id)
		}
	}
	crds := map[string]bool{}
	for _, n := range c.ChartCRDs {
		crds["apiextensions.k8s.io/CustomResourceDefinition/"+n] = true
	}
	add.component = c.Name
	for _, id := range sortedKeys(got) {
		w, g := want[id], got[id]
		if w == nil {
			t.Errorf("%s: %s: rendered by onprem, not by Helm", c.Name, id)
			continue
		}
		if crds[id] {
			// Helm installs these itself, as they are.
			if !reflect.DeepEqual(w.Object, g.Object) {
				t.Errorf("%s: %s (crds/ folder): onprem's differs from the chart's file", c.Name, id)
			}
			continue
		}
		var diffs []difference
		differences(nil, w.Object, g.Object, &diffs)
		for _, d := range diffs {
			if why := add.judge(g, d); why != "" {
				t.Errorf("%s: %s: %s: Helm %s, onprem %s: %s", c.Name, id, strings.Join(d.path, "."), show(d.ref), show(d.got), why)
			}
		}
	}
	return len(got)
}

func show(v any) string {
	if v == nil {
		return "(none)"
	}
	b, _ := json.Marshal(v)
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// difference is one leaf where two objects differ.
type difference struct {
	path     []string
	ref, got any
}

// differences walks two decoded objects and lists where they differ: a
// map missing on one side is walked as empty, lists of the same length
// element by element, anything else compared whole.
func differences(path []string, ref, got any, out *[]difference) {
	rm, rok := ref.(map[string]any)
	gm, gok := got.(map[string]any)
	if (rok || ref == nil) && (gok || got == nil) && (rok || gok) {
		keys := map[string]bool{}
		for k := range rm {
			keys[k] = true
		}
		for k := range gm {
			keys[k] = true
		}
		for _, k := range sortedKeys(keys) {
			differences(append(slices.Clone(path), k), rm[k], gm[k], out)
		}
		return
	}
	rl, rok := ref.([]any)
	gl, gok := got.([]any)
	if rok && gok && len(rl) == len(gl) {
		for i := range rl {
			differences(append(slices.Clone(path), fmt.Sprint(i)), rl[i], gl[i], out)
		}
		return
	}
	if !reflect.DeepEqual(ref, got) {
		*out = append(*out, difference{path: path, ref: ref, got: got})
	}
}

// podPaths are where a kind keeps its pod template's metadata and spec.
func podPaths(kind string) (meta, spec []string) {
	switch kind {
	case "Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet":
		return []string{"spec", "template", "metadata"}, []string{"spec", "template", "spec"}
	case "CronJob":
		return []string{"spec", "jobTemplate", "spec", "template", "metadata"}, []string{"spec", "jobTemplate", "spec", "template", "spec"}
	case "Pod":
		return nil, []string{"spec"}
	}
	return nil, nil
}

// hasPrefix reports whether path starts with prefix (a nil prefix never
// matches) and returns the rest.
func hasPrefix(path, prefix []string) ([]string, bool) {
	if prefix == nil || len(path) < len(prefix) || !slices.Equal(path[:len(prefix)], prefix) {
		return nil, false
	}
	return path[len(prefix):], true
}

// additions judges one difference between Helm's object and onprem's:
// "" when it is one of onprem's additions, as it must be, else why it is
// not. What onprem adds on purpose:
//
//   - the namespace: every namespaced object in the component's (a build
//     runner's engine may stay in its own, alsoNamespace), and so a role
//     binding's ServiceAccount subject without one;
//   - labels: onprem.dev/installation (on objects and pod templates) and
//     onprem.dev/component (on objects), and on the charts onprem writes
//     app.kubernetes.io/part-of: onprem; an upstream chart's own labels
//     are never changed;
//   - the restricted Pod Security fields: runAsNonRoot and a
//     RuntimeDefault seccomp profile on every pod, and on every container
//     allowPrivilegeEscalation false and ALL among the capabilities it
//     drops (the ones the chart drops kept);
//   - on the charts onprem writes, the platform's hardening:
//     enableServiceLinks false, and no API token in pods not labelled
//     onprem.dev/kube-api;
//   - spec.placement's node selector and tolerations, and spec.proxy's
//     environment appended to every container's;
//   - on an upstream chart's pods and ServiceAccounts,
//     spec.registry.pullSecret, beside the chart's own pull Secrets;
//   - with a private registry, relocation: every container image, every
//     image the chart names in a container's arguments or in a
//     ConfigMap's data, moved to the registry (images.Relocate), tag and
//     digest kept.
type additions struct {
	in                       *config.Installation
	namespace, alsoNamespace string
	component                string
	upstream                 bool
}

func (a additions) judge(o *unstructured.Unstructured, d difference) string {
	labels := map[string]string{"onprem.dev/installation": a.in.Metadata.Name, ComponentLabel: a.component}
	templateLabels := map[string]string{"onprem.dev/installation": a.in.Metadata.Name}
	if !a.upstream {
		labels["app.kubernetes.io/part-of"] = "onprem"
		templateLabels["app.kubernetes.io/part-of"] = "onprem"
	}
	reg := a.in.Spec.Registry
	relocated := func(ref any) (string, bool) {
		s, ok := ref.(string)
		if !ok || reg.Host == "" {
			return "", false
		}
		return images.RelocateReference(s, reg.Host, reg.PathPrefix)
	}
	inNamespace := func(v any) bool { return v == a.namespace || (a.alsoNamespace != "" && v == a.alsoNamespace) }
	p := d.path
	if slices.Equal(p, []string{"metadata", "namespace"}) {
		if inNamespace(d.got) && (d.ref == nil || d.ref == d.got) {
			return ""
		}
		return "the namespace is the component's, " + a.namespace
	}
	if (o.GetKind() == "RoleBinding" || o.GetKind() == "ClusterRoleBinding") && len(p) == 3 && p[0] == "subjects" && p[2] == "namespace" {
		// kustomize's namespace transformer fills a ServiceAccount
		// subject's missing namespace: the binding's, the same subject
		// for the API server.
		if (d.ref == nil || d.ref == "") && inNamespace(d.got) {
			return ""
		}
		return "a subject's namespace may only be filled with the component's"
	}
	tmeta, pod := podPaths(o.GetKind())
	metas := []struct {
		path   []string
		labels map[string]string
	}{{[]string{"metadata"}, labels}, {tmeta, templateLabels}}
	if o.GetKind() == "CronJob" {
		metas = append(metas, struct {
			path   []string
			labels map[string]string
		}{[]string{"spec", "jobTemplate", "metadata"}, templateLabels})
	}
	for _, m := range metas {
		if rest, ok := hasPrefix(p, m.path); ok && len(rest) == 2 && rest[0] == "labels" {
			want, ours := m.labels[rest[1]]
			if ours && d.got == want && (d.ref == nil || !a.upstream) {
				return ""
			}
			return "onprem only adds its own labels, and keeps an upstream chart's"
		}
	}
	withPullSecret := func() string {
		// The pull Secret beside what the chart gives.
		rl, _ := d.ref.([]any)
		g, _ := d.got.([]any)
		want := append(slices.Clone(rl), map[string]any{"name": reg.PullSecret})
		if a.upstream && reg.PullSecret != "" && len(g) == len(want) && !slices.ContainsFunc(want, func(x any) bool {
			return !slices.ContainsFunc(g, func(y any) bool { return jsonEqual(x, y) })
		}) {
			return ""
		}
		return "only spec.registry.pullSecret may be added, beside the chart's"
	}
	if o.GetKind() == "ServiceAccount" && slices.Equal(p, []string{"imagePullSecrets"}) {
		return withPullSecret()
	}
	rest, ok := hasPrefix(p, pod)
	if !ok {
		if o.GetKind() == "ConfigMap" && len(p) == 2 && p[0] == "data" {
			return relocatedConfig(d, reg)
		}
		return "not one of onprem's additions"
	}
	if slices.Equal(rest, []string{"imagePullSecrets"}) {
		return withPullSecret()
	}
	container := len(rest) >= 3 && (rest[0] == "containers" || rest[0] == "initContainers")
	switch {
	case slices.Equal(rest, []string{"securityContext", "runAsNonRoot"}):
		if d.got == true {
			return ""
		}
	case slices.Equal(rest, []string{"securityContext", "seccompProfile", "type"}):
		if d.got == "RuntimeDefault" {
			return ""
		}
	case !a.upstream && slices.Equal(rest, []string{"enableServiceLinks"}):
		if d.got == false {
			return ""
		}
	case !a.upstream && slices.Equal(rest, []string{"automountServiceAccountToken"}):
		if l, _ := o.GetLabels()["onprem.dev/kube-api"]; d.got == false && l != "true" {
			return ""
		}
	case len(rest) == 2 && rest[0] == "nodeSelector":
		if want, ok := a.in.Spec.Placement.NodeSelector[rest[1]]; ok && d.ref == nil && d.got == want {
			return ""
		}
	case slices.Equal(rest, []string{"tolerations"}):
		if d.ref == nil && jsonEqual(d.got, a.in.Spec.Placement.Tolerations) {
			return ""
		}
	case container && len(rest) == 4 && rest[2] == "securityContext" && rest[3] == "allowPrivilegeEscalation":
		if d.got == false && d.ref == nil {
			return ""
		}
	case container && len(rest) == 5 && rest[2] == "securityContext" && rest[3] == "capabilities" && rest[4] == "drop":
		g, _ := d.got.([]any)
		rl, _ := d.ref.([]any)
		if slices.Contains(g, any("ALL")) && len(g) == len(rl)+1 && !slices.ContainsFunc(rl, func(x any) bool { return !slices.Contains(g, x) }) {
			return ""
		}
	case container && len(rest) == 3 && rest[2] == "env":
		// The proxy's variables, beside the chart's own.
		rl, _ := d.ref.([]any)
		g, _ := d.got.([]any)
		var own, proxy []any
		for _, e := range g {
			if onlyProxyVariables([]any{e}) {
				proxy = append(proxy, e)
			} else {
				own = append(own, e)
			}
		}
		if len(proxy) > 0 && jsonEqual(own, rl) && a.in.Spec.Proxy.HTTPProxy+a.in.Spec.Proxy.HTTPSProxy != "" {
			return ""
		}
	case container && len(rest) == 3 && rest[2] == "image",
		container && len(rest) == 4 && rest[2] == "args",
		container && len(rest) == 5 && rest[2] == "env" && rest[4] == "value":
		if want, ok := relocated(d.ref); ok && d.got == want {
			return ""
		}
		return "relocated wrongly (or without a private registry)"
	}
	return "not one of onprem's additions"
}

// onlyProxyVariables reports env entries that are spec.proxy's variables.
func onlyProxyVariables(env []any) bool {
	for _, e := range env {
		m, _ := e.(map[string]any)
		switch strings.ToUpper(fmt.Sprint(m["name"])) {
		case "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY":
		default:
			return false
		}
	}
	return len(env) > 0
}

func jsonEqual(a, b any) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		return false
	}
	var xv, yv any
	_ = json.Unmarshal(x, &xv)
	_ = json.Unmarshal(y, &yv)
	return reflect.DeepEqual(xv, yv)
}

// relocatedConfig judges a ConfigMap value that onprem changed: with a
// private registry, the same document but for image references moved to
// it: whole references relocated, and of one written as parts, the
// registry become the private registry's host and the repository the path
// under it (or relocated whole, without a registry beside it).
func relocatedConfig(d difference, reg config.Registry) string {
	if reg.Host == "" {
		return "a ConfigMap changed without a private registry"
	}
	rs, _ := d.ref.(string)
	gs, _ := d.got.(string)
	var rv, gv any
	if yaml.Unmarshal([]byte(rs), &rv) != nil || yaml.Unmarshal([]byte(gs), &gv) != nil {
		rv, gv = rs, gs
	}
	var diffs []difference
	differences(nil, rv, gv, &diffs)
	prefix := strings.Trim(reg.PathPrefix, "/")
	for _, dd := range diffs {
		ref, got := fmt.Sprint(dd.ref), fmt.Sprint(dd.got)
		leaf := ""
		if len(dd.path) > 0 {
			leaf = dd.path[len(dd.path)-1]
		}
		switch want, ok := images.RelocateReference(ref, reg.Host, reg.PathPrefix); {
		case ok && got == want:
		case leaf == "registry" && got == strings.TrimSuffix(reg.Host, "/"):
		case leaf == "repository" && got == prefix+"/"+ref:
		default:
			return fmt.Sprintf("ConfigMap value changed at %s (%s to %s): not a relocation", strings.Join(dd.path, "."), show(dd.ref), show(dd.got))
		}
	}
	return ""
}

// Every pod the real chart runs, hook Jobs and init containers included,
// meets the restricted Pod Security Standard after onprem's render, in
// every mode, as the admission controller's own checks judge it; the
// chart as Helm alone renders it does not (which is what the render
// fixes).
func TestRuntimePodsAreRestricted(t *testing.T) {
	forEachUpstream(t, func(t *testing.T, u upstreamRuntime, mode upstreamMode, r *upstreamRender) {
		pods, hooks, inits := 0, 0, 0
		for _, o := range r.c.Objects {
			pod, ok := podSpecOf(o)
			if !ok {
				continue
			}
			pods++
			if isHook(o) {
				hooks++
			}
			inits += len(pod.InitContainers)
		}
		for _, p := range Check(&Result{Components: []*Component{r.c}}, CheckOptions{}) {
			t.Error(p)
		}
		var before int
		for _, o := range helmReference(t, r.version, r.c.Name, r.opts.Runtime.Namespace, r.c.Values) {
			if pod, ok := podSpecOf(o); ok {
				meta, field := podMetaOf(o)
				before += len(restrictedProblems(pssAll, meta, pod, field))
			}
		}
		if before == 0 {
			t.Errorf("the chart as Helm renders it meets the restricted standard already: this test proves nothing")
		}
		t.Logf("%s, %s mode: %d pods (%d hooks, %d init containers) restricted; Helm's render alone breaks the standard %d times", u, mode.name, pods, hooks, inits, before)
	})
}

// With spec.registry.pullSecret, every pod of the real chart (hook Jobs
// included) and every ServiceAccount it creates (for the pods its
// controllers make later) use the pull Secret, the chart's own values
// paths giving it where the chart reads one: the values hold it at each
// path of the release's runtime.pullSecrets, in that path's format.
func TestRuntimeUsesThePullSecret(t *testing.T) {
	forEachUpstream(t, func(t *testing.T, u upstreamRuntime, mode upstreamMode, r *upstreamRender) {
		name := r.in.Spec.Registry.PullSecret
		if name == "" {
			return
		}
		for _, l := range u.release.Runtime.PullSecrets {
			want := any([]any{map[string]any{"name": name}})
			if l.Format == release.ListOfNames {
				want = []any{name}
			}
			if got := dottedValue(r.c.Values, l.Path); !jsonEqual(got, want) {
				t.Errorf("values %s = %v, want %v", l.Path, got, want)
			}
		}
		pods, sas := 0, 0
		for _, o := range r.c.Objects {
			var secrets []corev1.LocalObjectReference
			if o.GetKind() == "ServiceAccount" {
				secrets = typed[corev1.ServiceAccount](t, o).ImagePullSecrets
				sas++
			} else if pod, ok := podSpecOf(o); ok {
				secrets = pod.ImagePullSecrets
				pods++
			} else {
				continue
			}
			if !slices.Contains(secrets, corev1.LocalObjectReference{Name: name}) {
				t.Errorf("%s/%s does not use the pull Secret %s: %v", o.GetKind(), o.GetName(), name, secrets)
			}
		}
		t.Logf("%s: %d pods and %d ServiceAccounts use %s", u, pods, sas, name)
	})
}

// dottedValue reads a dot-separated values path (nil: none).
func dottedValue(values map[string]any, path string) any {
	v, _ := valueAt(values, strings.Split(path, "."))
	return v
}

// chartValues is a chart's default values with every subchart's under its
// name or alias, enabled or not: where each values path of the chart
// exists.
func chartValues(c *chartv2.Chart) map[string]any {
	out := copyValues(c.Values)
	if out == nil {
		out = map[string]any{}
	}
	for _, d := range c.Metadata.Dependencies {
		for _, sub := range c.Dependencies() {
			if sub.Name() != d.Name {
				continue
			}
			key := d.Name
			if d.Alias != "" {
				key = d.Alias
			}
			sv := chartValues(sub)
			if own, ok := out[key].(map[string]any); ok {
				mergeOver(sv, own)
			}
			out[key] = sv
		}
	}
	return out
}

// mergeOver writes over's values into dst, maps merged key by key.
func mergeOver(dst, over map[string]any) {
	for k, v := range over {
		if vm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				mergeOver(dm, vm)
				continue
			}
		}
		dst[k] = v
	}
}

func copyValues(v map[string]any) map[string]any {
	if v == nil {
		return nil
	}
	var out map[string]any
	b, _ := json.Marshal(v)
	_ = json.Unmarshal(b, &out)
	return out
}

// missingPaths lists the paths of a runtime section that the chart's
// values do not have: its contract, its pull-Secret paths and every leaf
// of its values layer.
func missingPaths(c *chartv2.Chart, rc *release.RemoteChart) []string {
	values := chartValues(c)
	var paths []string
	for _, k := range sortedKeys(rc.Contract) {
		paths = append(paths, rc.Contract[k])
	}
	for _, l := range rc.PullSecrets {
		paths = append(paths, l.Path)
	}
	var leaves func(prefix string, m map[string]any)
	leaves = func(prefix string, m map[string]any) {
		for _, k := range sortedKeys(m) {
			if sub, ok := m[k].(map[string]any); ok && len(sub) > 0 {
				leaves(prefix+k+".", sub)
				continue
			}
			paths = append(paths, prefix+k)
		}
	}
	leaves("", rc.Values)
	var out []string
	for _, p := range paths {
		var cur any = values
		for _, k := range strings.Split(p, ".") {
			m, ok := cur.(map[string]any)
			if !ok {
				cur = nil
				out = append(out, p)
				break
			}
			v, has := m[k]
			if !has {
				out = append(out, p)
				break
			}
			cur = v
		}
	}
	return out
}

// Every values path onprem writes into the runtime chart of a shipped
// release (its contract, its pull-Secret paths, its values layer) exists
// in that chart version, the real published package: a release that names
// a path the chart version does not have fails here. The check finds a
// path that 0.26.0 dropped.
func TestRuntimeContractPathsExist(t *testing.T) {
	for _, u := range shippedRuntimes(t) {
		rc := u.release.Runtime
		c := gitopstest.Upstream(t, rc.ChartVersion)
		if missing := missingPaths(c, rc); len(missing) > 0 {
			t.Errorf("%s: values paths the chart does not have: %v", u, missing)
		} else {
			t.Logf("%s: %d contract paths, %d pull-Secret paths, all in the chart", u, len(rc.Contract), len(rc.PullSecrets))
		}
	}
	stale := &release.RemoteChart{Contract: map[string]string{release.ContractRuntimeName: "global.runtime.name"},
		PullSecrets: []release.ValuesList{{Path: "cf-argocd-extras.eventReporter.container.image.registry", Format: release.ListOfNames}}}
	if got := missingPaths(gitopstest.Upstream(t, "0.26.0"), stale); !slices.Equal(got, []string{"cf-argocd-extras.eventReporter.container.image.registry"}) {
		t.Errorf("a path 0.26.0 does not have: missing = %v", got)
	}
}

// With a private registry, no object of a runtime references another
// registry, in any release: every image the chart renders (containers,
// init containers, hook Jobs, and what it writes into configuration) is
// relocated, and no string of any object (CRDs aside: their schemas'
// descriptions mention registries) names one of the registries the chart
// pulls from otherwise, whole or as a map's registry.
func TestRuntimeAirGapClosure(t *testing.T) {
	private := upstreamModeNamed(t, "private-registry")
	for _, u := range shippedRuntimes(t) {
		t.Run(u.release.Runtime.ChartVersion, func(t *testing.T) {
			t.Parallel()
			public := renderUpstream(t, u.release, upstreamModes[0])
			r := renderUpstream(t, u.release, private)
			reg := r.in.Spec.Registry
			root := images.Root(reg.Host, reg.PathPrefix) + "/"
			found, err := images.InObjects(r.c.Objects)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range found {
				if !strings.HasPrefix(f.Ref, root) {
					t.Errorf("%s %s: %s is not in %s", f.Object, f.Field, f.Ref, root)
				}
			}
			src, err := images.InObjects(public.c.Objects)
			if err != nil {
				t.Fatal(err)
			}
			hosts := map[string]bool{}
			for _, f := range src {
				if r, err := name.ParseReference(f.Ref); err == nil {
					hosts[r.Context().RegistryStr()] = true
				}
			}
			if hosts[name.DefaultRegistry] {
				hosts["docker.io"] = true
			}
			for _, o := range r.c.Objects {
				if o.GetKind() == "CustomResourceDefinition" {
					continue
				}
				forEachString(o.Object, func(s string) {
					for h := range hosts {
						if s == h || strings.Contains(s, h+"/") || regexp.MustCompile(`(?m)registry:\s*["']?`+regexp.QuoteMeta(h)+`["']?\s*$`).MatchString(s) {
							t.Errorf("%s/%s names %s: %.120q", o.GetKind(), o.GetName(), h, s)
						}
					}
				})
			}
			refs, err := images.References(public.c.Objects)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d images (%d places) relocated to %s; the chart pulls from %v otherwise", u, len(refs), len(found), root, sortedKeys(hosts))
		})
	}
}

func forEachString(v any, f func(string)) {
	switch t := v.(type) {
	case string:
		f(t)
	case map[string]any:
		for _, x := range t {
			forEachString(x, f)
		}
	case []any:
		for _, x := range t {
			forEachString(x, f)
		}
	}
}

// In tunnel mode, the real chart's tunnel client connects to the
// operator's tunnel server (access.tunnelServer), and the runtime's URL
// is under the operator's subdomain host: no object names the vendor's
// hosted tunnel server, which the chart defaults to.
func TestRuntimeTunnelUsesTheOperatorsServer(t *testing.T) {
	tunnel := upstreamModeNamed(t, "tunnel")
	for _, u := range shippedRuntimes(t) {
		t.Run(u.release.Runtime.ChartVersion, func(t *testing.T) {
			t.Parallel()
			r := renderUpstream(t, u.release, tunnel)
			if r.err != nil {
				t.Fatal(r.err)
			}
			ts := r.opts.Runtime.Access.TunnelServer
			var frpc string
			for _, o := range r.c.Objects {
				if o.GetKind() == "ConfigMap" {
					if v, ok, _ := unstructured.NestedString(o.Object, "data", "frpc.ini"); ok {
						frpc = v
					}
				}
				forEachString(o.Object, func(s string) {
					if strings.Contains(s, "cf-cd.com") {
						t.Errorf("%s/%s names the vendor's tunnel server: %.160q", o.GetKind(), o.GetName(), s)
					}
				})
			}
			for _, want := range []string{"server_addr = " + ts.Host + "\n", "server_port = 443\n", "subdomain = " + r.in.Spec.RuntimeConfig.AccountID + "-" + r.opts.Runtime.Name + "\n"} {
				if !strings.Contains(frpc, want) {
					t.Errorf("the tunnel client's frpc.ini lacks %q:\n%s", want, frpc)
				}
			}
			// The runtime's URL, which it registers with the platform.
			url := "https://" + r.in.Spec.RuntimeConfig.AccountID + "-" + r.opts.Runtime.Name + "." + ts.SubdomainHost
			hosts := 0
			for _, o := range r.c.Objects {
				if v, ok, _ := unstructured.NestedString(o.Object, "data", "ingressHost"); ok && o.GetKind() == "ConfigMap" {
					hosts++
					if v != url {
						t.Errorf("%s ingressHost = %q, want %q", o.GetName(), v, url)
					}
				}
			}
			if hosts == 0 {
				t.Error("no ConfigMap holds the runtime's ingressHost")
			}
		})
	}
}
