package render

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sethvargo/go-envconfig"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// load reads a test configuration the way the CLI does, with an empty
// environment, and returns it with its release.
func load(t testing.TB, name string) (*config.Installation, *release.Release) {
	t.Helper()
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	var comps []string
	for _, r := range set.All() {
		comps = append(comps, r.ComponentNames()...)
	}
	in, _, err := config.Load(context.Background(), config.LoadOptions{
		Path:     filepath.Join("testdata", "configs", name+".yaml"),
		Lookup:   envconfig.MapLookuper(map[string]string{}),
		Validate: config.ValidateOptions{KnownVersions: set.Versions(), KnownComponents: comps},
	})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	rel, err := set.Get(in.Spec.Version)
	if err != nil {
		t.Fatal(err)
	}
	return in, rel
}

func mustRender(t testing.TB, name string, set ...string) *Result {
	t.Helper()
	in, rel := load(t, name)
	res, err := Render(context.Background(), Options{Installation: in, Release: rel, Set: set})
	if err != nil {
		t.Fatalf("render %s: %v", name, err)
	}
	return res
}

func yamlOf(t testing.TB, res *Result) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := WriteYAML(&b, res); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

var configs = []string{"minimal", "external-databases", "private-registry-large", "everything", "high-availability"}

// Golden files hold the whole rendered platform for three configurations.
// Generated secret values never appear: the render holds none.
func TestGolden(t *testing.T) {
	for _, name := range []string{"minimal", "external-databases", "private-registry-large"} {
		t.Run(name, func(t *testing.T) {
			got := yamlOf(t, mustRender(t, name))
			path := filepath.Join("testdata", "golden", name+".yaml")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run: go test ./installer/render -run TestGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("render of %s differs from %s; if the change is intended, run: go test ./installer/render -run TestGolden -update\n%s",
					name, path, firstDiff(string(want), string(got)))
			}
		})
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y {
			return "line " + strconv.Itoa(i+1) + ":\n- " + x + "\n+ " + y
		}
	}
	return ""
}

// Every object of every configuration follows the platform's rules.
func TestEveryObjectPassesTheChecks(t *testing.T) {
	for _, name := range configs {
		t.Run(name, func(t *testing.T) {
			in, _ := load(t, name)
			res := mustRender(t, name)
			opts := CheckOptions{}
			if in.Spec.Registry.Host != "" {
				opts.RegistryPrefix = in.Spec.Registry.Host + "/" + in.Spec.Registry.PathPrefix
			}
			for _, p := range Check(res, opts) {
				t.Error(p)
			}
		})
	}
}

// The checks themselves catch what they claim to catch.
func TestCheckFindsBrokenObjects(t *testing.T) {
	res := mustRender(t, "minimal")
	api := res.Component("pipelines-api")
	dep := find(t, api, "Deployment", "pipelines-api")
	// An unknown field, a missing probe, a writable root and root user.
	bad := dep.DeepCopy()
	bad.SetName("broken")
	unstructured.SetNestedField(bad.Object, "yes", "spec", "template", "spec", "hostNetworkk")
	api.Objects = append(api.Objects, bad)
	cs, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	c0 := cs[0].(map[string]any)
	delete(c0, "livenessProbe")
	c0["securityContext"].(map[string]any)["readOnlyRootFilesystem"] = false
	c0["image"] = "docker.io/library/busybox:1"
	unstructured.SetNestedSlice(dep.Object, cs, "spec", "template", "spec", "containers")
	// A duplicate object.
	api.Objects = append(api.Objects, find(t, api, "Service", "pipelines-api").DeepCopy())

	got := map[string]bool{}
	for _, p := range Check(res, CheckOptions{RegistryPrefix: "reg.local/x", RequireDigests: true}) {
		got[p.Object+" "+p.Rule] = true
	}
	for _, want := range []string{
		"Deployment/broken typed",
		"Deployment/pipelines-api probes",
		"Deployment/pipelines-api security",
		"Deployment/pipelines-api registry",
		"Deployment/pipelines-api digest",
		"Service/pipelines-api unique",
	} {
		if !got[want] {
			t.Errorf("Check did not report %q; reported %v", want, got)
		}
	}
}

func find(t testing.TB, c *Component, kind, name string) *unstructured.Unstructured {
	t.Helper()
	if c == nil {
		t.Fatalf("component missing")
	}
	for _, o := range c.Objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("%s has no %s/%s", c.Name, kind, name)
	return nil
}

func names(res *Result) []string {
	var out []string
	for _, c := range res.Components {
		out = append(out, c.Name)
	}
	return out
}

// Components come after their dependencies; platform first.
func TestApplyOrderRespectsDependencies(t *testing.T) {
	for _, name := range configs {
		res := mustRender(t, name)
		pos := map[string]int{}
		for i, c := range res.Components {
			pos[c.Name] = i
		}
		if res.Components[0].Name != PlatformComponent {
			t.Errorf("%s: first component is %s", name, res.Components[0].Name)
		}
		for _, c := range res.Components {
			for _, d := range c.DependsOn {
				p, ok := pos[d]
				if !ok {
					t.Errorf("%s: %s depends on %s, which is not rendered", name, c.Name, d)
				} else if p >= pos[c.Name] {
					t.Errorf("%s: %s comes before its dependency %s", name, c.Name, d)
				}
			}
			if c.Name != PlatformComponent && len(c.Objects) == 0 {
				t.Errorf("%s: component %s rendered no objects", name, c.Name)
			}
		}
	}
}

func TestMinimalInstallsEverythingButLegacy(t *testing.T) {
	got := names(mustRender(t, "minimal"))
	for _, want := range []string{"ingress", "mongodb", "postgresql", "redis", "rabbitmq", "db-provision", "pipelines-api", "gitops-manager", "gitops-api", "argo-hub"} {
		if !slices.Contains(got, want) {
			t.Errorf("minimal: %s missing from %v", want, got)
		}
	}
	for _, off := range []string{"nats", "consul"} {
		if slices.Contains(got, off) {
			t.Errorf("minimal: legacy %s installed", off)
		}
	}
}

func TestExternalDatabasesDeployNoDatabases(t *testing.T) {
	res := mustRender(t, "external-databases")
	got := names(res)
	for _, absent := range []string{"mongodb", "postgresql", "redis", "rabbitmq", "ingress", "gitops-manager"} {
		if slices.Contains(got, absent) {
			t.Errorf("%s rendered although external/removed: %v", absent, got)
		}
	}
	// Services read host and port from the operator's Secret.
	dep := find(t, res.Component("pipelines-api"), "Deployment", "pipelines-api")
	env := envOf(t, dep)
	if ref := env["MONGODB_HOST"]; ref != "secret:corp-mongodb/host" {
		t.Errorf("MONGODB_HOST = %s", ref)
	}
	if ref := env["REDIS_PASSWORD"]; ref != "secret:corp-redis/password" {
		t.Errorf("REDIS_PASSWORD = %s", ref)
	}
	// db-provision still gives every service its own user, as the
	// operator's admin.
	if res.Component(ProvisionComponent) == nil {
		t.Fatal("db-provision missing")
	}
	// The existing IngressClass and TLS Secret are used.
	ing := find(t, res.Component("pipelines-api"), "Ingress", "pipelines-api")
	cls, _, _ := unstructured.NestedString(ing.Object, "spec", "ingressClassName")
	if cls != "corp-nginx" {
		t.Errorf("ingressClassName = %s", cls)
	}
	if !strings.Contains(string(yamlOf(t, &Result{Components: []*Component{{Name: "x", Objects: []*unstructured.Unstructured{ing}}}})), "ci-corp-tls") {
		t.Error("Ingress does not use the configured TLS Secret")
	}
	// No admin secret is generated for external services.
	for _, s := range res.Secrets {
		if strings.HasSuffix(s.Name, "-admin") || s.Name == "onprem-redis" || s.Name == "onprem-rabbitmq" || s.Name == "onprem-tls" {
			t.Errorf("generated %s for an external service", s.Name)
		}
	}
	for _, o := range res.Component(PlatformComponent).Objects {
		if o.GetNamespace() != "" && o.GetNamespace() != "ci-platform" {
			t.Errorf("%s/%s in namespace %s", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
}

// envOf maps a Deployment's first container's env to "value" or
// "secret:name/key".
func envOf(t testing.TB, o *unstructured.Unstructured) map[string]string {
	t.Helper()
	cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	out := map[string]string{}
	env, _ := cs[0].(map[string]any)["env"].([]any)
	for _, e := range env {
		m := e.(map[string]any)
		name := m["name"].(string)
		if v, ok := m["value"].(string); ok {
			out[name] = v
			continue
		}
		sk, _, _ := unstructured.NestedStringMap(m, "valueFrom", "secretKeyRef")
		if sk != nil {
			out[name] = "secret:" + sk["name"] + "/" + sk["key"]
		}
	}
	return out
}

func containerImages(t testing.TB, res *Result) []string {
	var out []string
	for _, c := range res.Components {
		for _, o := range c.Objects {
			for _, f := range []string{"containers", "initContainers"} {
				cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", f)
				for _, ct := range cs {
					out = append(out, ct.(map[string]any)["image"].(string))
				}
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no images rendered")
	}
	return out
}

func TestPrivateRegistryRelocatesEveryImage(t *testing.T) {
	res := mustRender(t, "private-registry-large")
	for _, img := range containerImages(t, res) {
		if !strings.HasPrefix(img, "registry.airgap.internal:5000/onprem/") {
			t.Errorf("image %s not relocated", img)
		}
	}
	got := containerImages(t, res)
	if !slices.Contains(got, "registry.airgap.internal:5000/onprem/library/mongo:7.0.14") ||
		!slices.Contains(got, "registry.airgap.internal:5000/onprem/codefresh/pipelines-api:2.6.3") {
		t.Errorf("unexpected relocation: %v", got)
	}
	// The pull Secret is on every pod.
	for _, c := range res.Components {
		for _, o := range c.Objects {
			if spec, ok := podSpecOf(o); ok {
				if len(spec.ImagePullSecrets) != 1 || spec.ImagePullSecrets[0].Name != "airgap-pull" {
					t.Errorf("%s %s: imagePullSecrets = %v", c.Name, o.GetName(), spec.ImagePullSecrets)
				}
			}
		}
	}
}

// With a release that pins digests (as a bundle's does), relocated images
// keep their digests.
func TestRelocationKeepsDigests(t *testing.T) {
	in, rel := load(t, "private-registry-large")
	pinned := *rel
	pinned.Images = slices.Clone(rel.Images)
	for i := range pinned.Images {
		pinned.Images[i].Digest = "sha256:" + strings.Repeat(string("0123456789abcdef"[i%16]), 64)
	}
	res, err := Render(context.Background(), Options{Installation: in, Release: &pinned})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Check(res, CheckOptions{RegistryPrefix: "registry.airgap.internal:5000/onprem", RequireDigests: true}) {
		t.Error(p)
	}
}

func TestLargeProfileSizesComponents(t *testing.T) {
	res := mustRender(t, "private-registry-large")
	dep := find(t, res.Component("cron-executor"), "Deployment", "cron-executor")
	if r, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas"); r != 3 {
		t.Errorf("cron-executor replicas = %d, want 3 (large)", r)
	}
	find(t, res.Component("cron-executor"), "PodDisruptionBudget", "cron-executor")
	sts := find(t, res.Component("mongodb"), "StatefulSet", "mongodb")
	vcts, _, _ := unstructured.NestedSlice(sts.Object, "spec", "volumeClaimTemplates")
	size, _, _ := unstructured.NestedString(vcts[0].(map[string]any), "spec", "resources", "requests", "storage")
	cls, _, _ := unstructured.NestedString(vcts[0].(map[string]any), "spec", "storageClassName")
	if size != "500Gi" || cls != "fast-ssd" {
		t.Errorf("mongodb volume = %s %s, want 500Gi fast-ssd (config over profile, storage default)", size, cls)
	}
	pg := find(t, res.Component("postgresql"), "StatefulSet", "postgresql")
	vcts, _, _ = unstructured.NestedSlice(pg.Object, "spec", "volumeClaimTemplates")
	cls, _, _ = unstructured.NestedString(vcts[0].(map[string]any), "spec", "storageClassName")
	if cls != "db-ssd" {
		t.Errorf("postgresql storage class = %s, want db-ssd", cls)
	}
}

// Values layer: release < profile < config < operator values < --set.
func TestValuesLayering(t *testing.T) {
	replicas := func(res *Result, comp string) int64 {
		dep := find(t, res.Component(comp), "Deployment", comp)
		r, _, _ := unstructured.NestedInt64(dep.Object, "spec", "replicas")
		return r
	}
	res := mustRender(t, "everything")
	if r := replicas(res, "pipelines-api"); r != 4 {
		t.Errorf("operator values: replicas = %d, want 4 (over the profile's 2)", r)
	}
	if r := replicas(res, "gitops-ui"); r != 2 {
		t.Errorf("profile: replicas = %d, want 2", r)
	}
	res = mustRender(t, "everything", "pipelines-api.replicas=6")
	if r := replicas(res, "pipelines-api"); r != 6 {
		t.Errorf("--set: replicas = %d, want 6", r)
	}
	if env := envOf(t, find(t, res.Component("pipelines-api"), "Deployment", "pipelines-api")); env["FEATURE_FLAGS"] != "new-ui" {
		t.Errorf("operator env missing: %v", env)
	}
}

func TestSetNamesUnknownComponent(t *testing.T) {
	in, rel := load(t, "minimal")
	_, err := Render(context.Background(), Options{Installation: in, Release: rel, Set: []string{"pipeline-api.replicas=2"}})
	if err == nil || !strings.Contains(err.Error(), `no component "pipeline-api"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestOverlaysPlacementProxyAndGateway(t *testing.T) {
	res := mustRender(t, "everything")
	api := find(t, res.Component("pipelines-api"), "Deployment", "pipelines-api")
	if v, _, _ := unstructured.NestedString(api.Object, "spec", "template", "metadata", "annotations", "example.org/scrape"); v != "true" {
		t.Error("operator Component overlay not applied")
	}
	if api.GetAnnotations()["example.org/team"] != "platform" {
		t.Error("operator commonAnnotations not applied")
	}
	gapi := find(t, res.Component("gitops-api"), "Deployment", "gitops-api")
	if r, _, _ := unstructured.NestedInt64(gapi.Object, "spec", "replicas"); r != 5 {
		t.Errorf("plain Kustomization overlay: gitops-api replicas = %d, want 5", r)
	}
	if res.Component("argo-hub") != nil {
		t.Error("argo-hub rendered although disabled")
	}
	if res.Component("nats") == nil || res.Component("consul") == nil {
		t.Error("legacy services switched on but not rendered")
	}
	find(t, res.Component("pipelines-api"), "HTTPRoute", "pipelines-api")
	for _, c := range res.Components {
		for _, o := range c.Objects {
			spec, ok := podSpecOf(o)
			if !ok {
				continue
			}
			if spec.NodeSelector["node-role.example.org/ci"] != "true" || len(spec.Tolerations) != 1 {
				t.Errorf("%s: placement missing: %v %v", o.GetName(), spec.NodeSelector, spec.Tolerations)
			}
			for _, ct := range append(spec.InitContainers, spec.Containers...) {
				var https, noProxy string
				for _, e := range ct.Env {
					switch e.Name {
					case "HTTPS_PROXY":
						https = e.Value
					case "NO_PROXY":
						noProxy = e.Value
					}
				}
				if https != "http://proxy.example.org:3128" || !strings.Contains(noProxy, ".svc") || !strings.Contains(noProxy, ".example.org") {
					t.Errorf("%s/%s: proxy env = %q %q", o.GetName(), ct.Name, https, noProxy)
				}
			}
		}
	}
}

func TestOverlayErrorsNameTheFolder(t *testing.T) {
	in, rel := load(t, "minimal")
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources: [x.yaml]\n"), 0o644)
	for _, c := range []struct{ dir, want string }{
		{dir, "write it as kind: Component"},
		{filepath.Join(dir, "missing"), "no such file"},
		{t.TempDir(), "has no kustomization.yaml"},
	} {
		in.Spec.Overlays = []string{c.dir}
		_, err := Render(context.Background(), Options{Installation: in, Release: rel})
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.dir) {
			t.Errorf("overlay %s: err = %v, want %q", c.dir, err, c.want)
		}
	}
}

// A patch that does not apply, or whose target matches nothing, is an
// OverlayError naming the folder, the file, the patch's index, the object
// and a hint; never kustomize's in-memory paths.
func TestOverlayPatchErrors(t *testing.T) {
	in, rel := load(t, "minimal")
	for _, c := range []struct {
		name, kustomization string
		files               map[string]string
		patch               int
		want                []string
	}{
		{"add under a missing map", "kind: Component\npatches:\n  - target: {kind: Deployment, name: gitops-api}\n    patch: |\n      - op: replace\n        path: /spec/replicas\n        value: 2\n  - target: {kind: Deployment, name: gitops-api}\n    patch: |\n      - op: add\n        path: /spec/template/spec/nothing/here\n        value: 1\n",
			nil, 1, []string{"on Deployment/gitops-api", "missing", "add the parent as a map first"}},
		{"a target that matches nothing", "kind: Component\npatches:\n  - target: {kind: Deployment, name: gitops-apii}\n    patch: |\n      - op: replace\n        path: /spec/replicas\n        value: 2\n",
			nil, 0, []string{"on Deployment/gitops-apii", "matches no object of the platform", "onprem render"}},
		{"a strategic-merge patch of an object that does not exist", "kind: Component\npatches:\n  - path: replicas.yaml\n",
			map[string]string{"replicas.yaml": "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: nope}\nspec: {replicas: 2}\n"}, 0, []string{"Deployment/nope", "matches no object"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(c.kustomization), 0o644)
			for n, body := range c.files {
				os.WriteFile(filepath.Join(dir, n), []byte(body), 0o644)
			}
			in.Spec.Overlays = []string{t.TempDir(), dir}
			os.WriteFile(filepath.Join(in.Spec.Overlays[0], "kustomization.yaml"), []byte("kind: Component\ncommonAnnotations: {team: ci}\n"), 0o644)
			_, err := Render(context.Background(), Options{Installation: in, Release: rel})
			var oe *OverlayError
			if !errors.As(err, &oe) || !IsInputError(err) {
				t.Fatalf("err = %T %v", err, err)
			}
			want := append([]string{"spec.overlays[1] (" + filepath.Join(dir, "kustomization.yaml") + ") patches[" + strconv.Itoa(c.patch) + "]"}, c.want...)
			for _, w := range want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q: %v", w, err)
				}
			}
			if strings.Contains(err.Error(), "/user/") || strings.Contains(err.Error(), "accumulat") {
				t.Errorf("kustomize's internals: %v", err)
			}
		})
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	a := yamlOf(t, mustRender(t, "everything"))
	b := yamlOf(t, mustRender(t, "everything"))
	if !bytes.Equal(a, b) {
		t.Errorf("two renders differ: %s", firstDiff(string(a), string(b)))
	}
}

// Nothing secret is rendered: no Secret objects, no secret values.
func TestNoSecretsRendered(t *testing.T) {
	for _, name := range configs {
		res := mustRender(t, name)
		for _, c := range res.Components {
			for _, o := range c.Objects {
				if o.GetKind() == "Secret" {
					t.Errorf("%s: %s renders Secret %s", name, c.Name, o.GetName())
				}
			}
		}
		if len(res.Secrets) == 0 {
			t.Errorf("%s: no generated secrets planned", name)
		}
	}
}

func TestGitopsManagerGoneIn280(t *testing.T) {
	res := mustRender(t, "external-databases")
	if res.Version != "2.8.0" {
		t.Fatalf("version %s", res.Version)
	}
	if res.Component("gitops-manager") != nil {
		t.Error("gitops-manager rendered for 2.8.0")
	}
}

// Every path under the platform's domain has one owner, in every embedded
// release: two Ingresses claiming the same host and path would send the
// traffic to whichever the ingress controller happens to pick (the kind
// e2e once reached gitops-manager at /api).
func TestEveryRouteHasOneOwner(t *testing.T) {
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range set.Versions() {
		t.Run(v, func(t *testing.T) {
			in, _ := load(t, "everything")
			in.Spec.Version = v
			rel, err := set.Get(v)
			if err != nil {
				t.Fatal(err)
			}
			res, err := Render(context.Background(), Options{Installation: in, Release: rel})
			if err != nil {
				t.Fatalf("render %s: %v", v, err)
			}
			owner := map[string]string{}
			routed := 0
			for _, c := range res.Components {
				for _, o := range c.Objects {
					if o.GetKind() != "Ingress" {
						continue
					}
					rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "rules")
					for _, r := range rules {
						rule, _ := r.(map[string]any)
						host, _ := rule["host"].(string)
						paths, _, _ := unstructured.NestedSlice(rule, "http", "paths")
						for _, p := range paths {
							path, _ := p.(map[string]any)["path"].(string)
							key := host + path
							if prev, ok := owner[key]; ok {
								t.Errorf("%s is claimed by %s and by %s/%s", key, prev, c.Name, o.GetName())
							}
							owner[key] = c.Name + "/" + o.GetName()
							routed++
						}
					}
				}
			}
			if routed == 0 {
				t.Fatal("no Ingress paths rendered: the check checked nothing")
			}
			for _, c := range rel.Components {
				if role, _ := c.Values["role"].(string); role == "worker" {
					for key, o := range owner {
						if strings.HasPrefix(o, c.Name+"/") {
							t.Errorf("worker %s owns the route %s", c.Name, key)
						}
					}
				}
			}
		})
	}
}

// An overlay whose kustomization holds nothing is an error naming the
// file, never a panic (issue 33, item 1). Render is a library call: it
// checks what config.Load would have refused.
func TestEmptyOverlayKustomizationDoesNotPanic(t *testing.T) {
	in, rel := load(t, "minimal")
	for _, content := range []string{"", "   \n\n", "# later\n", "null\n", "---\n"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		in.Spec.Overlays = []string{dir}
		_, err := Render(context.Background(), Options{Installation: in, Release: rel})
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "kustomization.yaml")+" is empty") {
			t.Errorf("kustomization %q: err = %v", content, err)
		}
	}
}
