package render

import (
	"context"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/gitops/gitopstest"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
)

func fixtureChart(t testing.TB, version string) *chartv2.Chart {
	t.Helper()
	ch, err := charts.LoadFrom(os.DirFS("../gitops/testdata"), "gitops-runtime")
	if err != nil {
		t.Fatal(err)
	}
	ch.Metadata.Version = version
	return ch
}

func renderFixtureRuntime(t testing.TB, cfg string, rt config.Runtime, opts ...func(*RuntimeOptions)) (*config.Installation, *Component) {
	t.Helper()
	in, rel := load(t, cfg)
	in.Spec.RuntimeConfig.Repository = config.GitRepository{URL: "https://git.example.com/platform/gitops.git", Branch: "main", Path: "runtimes"}
	in.Spec.RuntimeConfig.AccountID = "64f0c1d2e3a4b5c6d7e8f901"
	o := RuntimeOptions{Installation: in, Release: rel, Runtime: rt, Chart: fixtureChart(t, rel.Runtime.ChartVersion)}
	for _, f := range opts {
		f(&o)
	}
	c, err := RenderRuntime(context.Background(), o)
	if err != nil {
		t.Fatalf("render runtime for %s: %v", cfg, err)
	}
	return in, c
}

// A runtime follows the platform's rules (restricted pods, probes,
// resources, relocation with a private registry) and every image of the
// chart's images (its containers' and its executor's, in a ConfigMap) are
// relocated when the configuration has a private registry.
func TestRuntimePassesTheChecks(t *testing.T) {
	for _, cfg := range configs {
		t.Run(cfg, func(t *testing.T) {
			in, c := renderFixtureRuntime(t, cfg, config.Runtime{Name: "edge"})
			opts := CheckOptions{}
			if in.Spec.Registry.Host != "" {
				opts.RegistryPrefix = in.Spec.Registry.Host + "/" + in.Spec.Registry.PathPrefix
			}
			for _, p := range Check(&Result{Components: []*Component{c}}, opts) {
				t.Error(p)
			}
			if c.Name != "runtime-edge" || c.Group != RuntimeGroup || c.Chart != "gitops-runtime" {
				t.Errorf("component = %s group %s chart %s", c.Name, c.Group, c.Chart)
			}
			for _, o := range c.Objects {
				switch {
				case o.GetKind() == "CustomResourceDefinition":
					if o.GetNamespace() != "" {
						t.Errorf("CRD %s has namespace %q", o.GetName(), o.GetNamespace())
					}
				case o.GetNamespace() != "edge":
					t.Errorf("%s/%s in namespace %q, want edge (the runtime's name)", o.GetKind(), o.GetName(), o.GetNamespace())
				}
				if o.GetLabels()[ComponentLabel] != "runtime-edge" {
					t.Errorf("%s/%s: label %s = %q", o.GetKind(), o.GetName(), ComponentLabel, o.GetLabels()[ComponentLabel])
				}
			}
			// The chart's images, from its render: relocated with a
			// private registry, the chart's own otherwise.
			found, err := images.InObjects(c.Objects)
			if err != nil {
				t.Fatal(err)
			}
			pods := 0
			for _, f := range found {
				if f.Pod {
					pods++
				}
				relocated := strings.HasPrefix(f.Ref, in.Spec.Registry.Host+"/"+in.Spec.Registry.PathPrefix+"/")
				if in.Spec.Registry.Host != "" && !relocated {
					t.Errorf("%s %s: image %s is not relocated to %s", f.Object, f.Field, f.Ref, in.Spec.Registry.Host)
				}
			}
			if pods < 14 || len(found) <= pods {
				t.Errorf("%d images in pods, %d in configuration: want the fixture's 14 and its executor", pods, len(found)-pods)
			}
		})
	}
}

// The upstream chart's values paths that onprem writes, for every
// shipped release: a change of the contract in a release manifest shows
// up here as one diff.
func TestRuntimeContractPaths(t *testing.T) {
	want := []string{
		"global.codefresh.accountId",
		"global.codefresh.tls.caCerts.secretKeyRef",
		"global.codefresh.url",
		"global.codefresh.userToken.secretKeyRef",
		"global.httpProxy", "global.httpsProxy", "global.noProxy",
		"global.nodeSelector",
		"global.runtime.gitCredentials.password.secretKeyRef",
		"global.runtime.gitCredentials.username",
		"global.runtime.ingress.className", "global.runtime.ingress.enabled", "global.runtime.ingress.hosts", "global.runtime.ingress.protocol",
		"global.runtime.isConfigurationRuntime",
		"global.runtime.name",
		"global.tolerations",
		"tunnel-client.enabled",
	}
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range set.All() {
		if rel.Runtime == nil {
			continue
		}
		t.Run(rel.Version, func(t *testing.T) {
			in, _ := load(t, "everything")
			in.Spec.Version = rel.Version
			in.Spec.RuntimeConfig.AccountID = "acc"
			contract, err := RuntimeContractValues(in, config.Runtime{Name: "edge", Namespace: "edge"}, rel.Runtime, true, true)
			if err != nil {
				t.Fatal(err)
			}
			got := slices.Sorted(maps.Keys(contract))
			if !slices.Equal(got, want) {
				t.Errorf("paths onprem writes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// What a runtime is told: its name, the platform's URL and account, the
// token, CA and Git credentials by Secret reference, its designation,
// access, placement and proxies, read from the installed objects the
// way the upstream chart uses them.
func TestRuntimeValues(t *testing.T) {
	_, c := renderFixtureRuntime(t, "everything", config.Runtime{}, func(o *RuntimeOptions) {
		o.ConfigurationRuntime, o.PlatformCA = true, true
	})
	if c.Name != "runtime-codefresh" {
		t.Fatalf("default runtime name: component %s", c.Name)
	}
	var proxy *appsv1.Deployment
	var settings map[string]string
	var ingress *unstructured.Unstructured
	for _, o := range c.Objects {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == "app-proxy":
			proxy = typed[appsv1.Deployment](t, o)
		case o.GetKind() == "ConfigMap" && o.GetName() == "gitops-runtime-settings":
			settings, _, _ = unstructured.NestedStringMap(o.Object, "data")
		case o.GetKind() == "Ingress":
			ingress = o
		}
		if o.GetNamespace() != "" && o.GetNamespace() != "codefresh" {
			t.Errorf("%s/%s: namespace %s", o.GetKind(), o.GetName(), o.GetNamespace())
		}
	}
	if proxy == nil || ingress == nil || settings == nil {
		t.Fatalf("app-proxy %v, Ingress %v, settings %v", proxy != nil, ingress != nil, settings != nil)
	}
	ctr := proxy.Spec.Template.Spec.Containers[0]
	env := map[string]string{}
	refs := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			refs[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	for k, v := range map[string]string{
		"RUNTIME_NAME": "codefresh", "CODEFRESH_URL": "https://ci.example.org", "CODEFRESH_ACCOUNT_ID": "64f0c1d2e3a4b5c6d7e8f901",
		"IS_CONFIGURATION_RUNTIME": "true", "GIT_USERNAME": RuntimeGitUsername, "NODE_EXTRA_CA_CERTS": "/etc/ssl/platform/" + RuntimePlatformCAKey,
	} {
		if env[k] != v {
			t.Errorf("app-proxy %s = %q, want %q", k, env[k], v)
		}
	}
	for k, v := range map[string]string{
		"CODEFRESH_USER_TOKEN": RuntimePlatformToken + "/" + RuntimePlatformTokenKey,
		"GIT_PASSWORD":         RuntimeGitCredentials + "/" + RuntimeGitPasswordKey,
	} {
		if refs[k] != v {
			t.Errorf("app-proxy %s from Secret %q, want %q", k, refs[k], v)
		}
	}
	vols := proxy.Spec.Template.Spec.Volumes
	if len(vols) != 1 || vols[0].Secret == nil || vols[0].Secret.SecretName != RuntimePlatformCA {
		t.Errorf("app-proxy volumes %+v, want the platform CA Secret %s", vols, RuntimePlatformCA)
	}
	class, _, _ := unstructured.NestedString(ingress.Object, "spec", "ingressClassName")
	rules, _, _ := unstructured.NestedSlice(ingress.Object, "spec", "rules")
	if class != "onprem" || len(rules) != 1 || rules[0].(map[string]any)["host"] != "codefresh.runtimes.ci.example.org" {
		t.Errorf("Ingress class %q rules %v", class, rules)
	}
	if settings["httpProxy"] != "http://proxy.example.org:3128" || !strings.Contains(settings["noProxy"], ".example.org") ||
		!strings.Contains(settings["nodeSelector"], "{") || settings["tunnel"] != "false" {
		t.Errorf("settings = %v", settings)
	}
	// No secret value is a value: only references.
	if b, _ := yaml.Marshal(c.Values); strings.Contains(string(b), "token:") && !strings.Contains(string(b), "secretKeyRef") {
		t.Errorf("values hold a token:\n%s", b)
	}
}

// The access modes: a tunnel has no Ingress and turns the tunnel client
// on; a URL of the operator's is passed as the ingress URL.
func TestRuntimeAccessModes(t *testing.T) {
	for _, tc := range []struct {
		access      config.RuntimeAccess
		wantIngress bool
		setting     string
		value       string
	}{
		{config.RuntimeAccess{Mode: "tunnel", TunnelServer: config.TunnelServer{Host: "register.tunnels.example.com", SubdomainHost: "tunnels.example.com"}}, false, "tunnel", "true"},
		{config.RuntimeAccess{Mode: "tunnel", TunnelServer: config.TunnelServer{Host: "register.tunnels.example.com", Port: 8443, SubdomainHost: "tunnels.example.com"}}, false, "tunnelServer", "register.tunnels.example.com:8443 tunnels.example.com"},
		{config.RuntimeAccess{Mode: "url", URL: "https://edge.example.com"}, false, "ingressUrl", "https://edge.example.com"},
		{config.RuntimeAccess{Host: "gitops.example.com", ClassName: "nginx"}, true, "tunnel", "false"},
	} {
		t.Run(tc.access.Mode+"/"+tc.setting, func(t *testing.T) {
			_, c := renderFixtureRuntime(t, "minimal", config.Runtime{Name: "edge", Access: tc.access})
			hasIngress := false
			for _, o := range c.Objects {
				if o.GetKind() == "Ingress" {
					hasIngress = true
					class, _, _ := unstructured.NestedString(o.Object, "spec", "ingressClassName")
					if class != "nginx" {
						t.Errorf("class %q", class)
					}
				}
				if o.GetKind() == "ConfigMap" && o.GetName() == "gitops-runtime-settings" {
					if v, _, _ := unstructured.NestedString(o.Object, "data", tc.setting); v != tc.value {
						t.Errorf("%s = %q, want %q", tc.setting, v, tc.value)
					}
				}
			}
			if hasIngress != tc.wantIngress {
				t.Errorf("Ingress: %v, want %v", hasIngress, tc.wantIngress)
			}
		})
	}
}

// The fixture refuses to render without what the upstream templates
// require, so that a value onprem stops sending fails here first.
func TestRuntimeFixtureRequiresTheContract(t *testing.T) {
	in, rel := load(t, "minimal")
	in.Spec.RuntimeConfig.AccountID = "acc"
	contract, err := RuntimeContractValues(in, config.Runtime{Name: "edge", Namespace: "edge"}, rel.Runtime, false, false)
	if err != nil {
		t.Fatal(err)
	}
	full := map[string]any{}
	for p, v := range contract {
		if err := setPath(full, p, v); err != nil {
			t.Fatal(err)
		}
	}
	ch := fixtureChart(t, rel.Runtime.ChartVersion)
	if _, err := charts.Template(ch, "runtime-edge", "edge", full); err != nil {
		t.Fatalf("the whole contract does not render: %v", err)
	}
	for _, tc := range []struct{ drop, want string }{
		{rel.Runtime.Contract["runtimeName"], "global.runtime.name is required"},
		{rel.Runtime.Contract["platformURL"], "global.codefresh.url is required"},
		{rel.Runtime.Contract["accountID"], "global.codefresh.accountId is required"},
		{rel.Runtime.Contract["platformToken"], "global.codefresh.userToken: one of token or secretKeyRef is required"},
		{rel.Runtime.Contract["ingressHosts"], "global.runtime.ingress.hosts: at least one host is required"},
	} {
		t.Run(tc.drop, func(t *testing.T) {
			values := map[string]any{}
			for p, v := range contract {
				if p != tc.drop {
					_ = setPath(values, p, v)
				}
			}
			_, err := charts.Template(ch, "runtime-edge", "edge", values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("without %s: err = %v, want %q", tc.drop, err, tc.want)
			}
		})
	}
}

func TestRuntimeRefusals(t *testing.T) {
	in, rel := load(t, "minimal")
	ch := fixtureChart(t, rel.Runtime.ChartVersion)
	cases := []struct {
		name string
		rt   config.Runtime
		ver  string
		want string
	}{
		{"bad name", config.Runtime{Name: "Edge_1"}, rel.Runtime.ChartVersion, `runtime name "Edge_1"`},
		{"long name", config.Runtime{Name: strings.Repeat("a", 46)}, rel.Runtime.ChartVersion, "at most 45"},
		{"bad namespace", config.Runtime{Name: "a", Namespace: "NS"}, rel.Runtime.ChartVersion, `namespace "NS"`},
		{"other chart version", config.Runtime{Name: "a"}, "9.9.9", "needs chart gitops-runtime " + rel.Runtime.ChartVersion + ", but was given gitops-runtime 9.9.9"},
		{"no account", config.Runtime{Name: "a"}, rel.Runtime.ChartVersion, "no platform account: set spec.runtimeConfig.accountId in onprem.yaml, or give --account"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ch.Metadata.Version = tc.ver
			_, err := RenderRuntime(context.Background(), RuntimeOptions{Installation: in, Release: rel, Runtime: tc.rt, Chart: ch})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want %q", err, tc.want)
			}
		})
	}
	noRuntime := *rel
	noRuntime.Runtime = nil
	if _, err := RenderRuntime(context.Background(), RuntimeOptions{Installation: in, Release: &noRuntime, Runtime: config.Runtime{}, Chart: ch}); err == nil || !strings.Contains(err.Error(), "has no GitOps runtime") {
		t.Errorf("release without runtime: %v", err)
	}
}

func TestSetPath(t *testing.T) {
	v := map[string]any{"a": map[string]any{"keep": 1}, "s": "x"}
	if err := setPath(v, "a.b.c", "ref"); err != nil {
		t.Fatal(err)
	}
	if got := v["a"].(map[string]any)["b"].(map[string]any)["c"]; got != "ref" || v["a"].(map[string]any)["keep"] != 1 {
		t.Errorf("values = %v", v)
	}
	if err := setPath(v, "s.x", "ref"); err == nil || !strings.Contains(err.Error(), "s is a string") {
		t.Errorf("through a string: %v", err)
	}
	if err := setPath(v, "a..b", "ref"); err == nil {
		t.Error("empty key accepted")
	}
}

// Bad input stops a runtime's render, an input error (exit 2; nothing is
// applied, the render comes first) naming the release, the chart version
// and the value: a release whose chart version has no contract, a contract
// without a value onprem must give, a value the chart requires that it
// did not get (the chart's own message names it), a package without a
// subchart the chart declares.
func TestRuntimeBadInput(t *testing.T) {
	in, rel := load(t, "minimal")
	in.Spec.RuntimeConfig.AccountID = "acc"
	render := func(rc *release.RemoteChart, ch *chartv2.Chart) error {
		r := *rel
		r.Runtime = rc
		_, err := RenderRuntime(context.Background(), RuntimeOptions{Installation: in, Release: &r, Runtime: config.Runtime{Name: "edge"}, Chart: ch})
		return err
	}
	with := func(f func(*release.RemoteChart)) *release.RemoteChart {
		rc := *rel.Runtime
		rc.Contract = maps.Clone(rel.Runtime.Contract)
		f(&rc)
		return &rc
	}
	fixture := fixtureChart(t, rel.Runtime.ChartVersion)
	missing := charts.Clone(gitopstest.Upstream(t, "0.26.0"))
	var subs []*chartv2.Chart
	for _, d := range missing.Dependencies() {
		if d.Name() != "argo-cd" {
			subs = append(subs, d)
		}
	}
	missing.SetDependencies(subs...)
	v := rel.Version + ": chart gitops-runtime " + rel.Runtime.ChartVersion
	for _, tc := range []struct {
		name  string
		rc    *release.RemoteChart
		chart *chartv2.Chart
		want  []string
	}{
		{"no contract", with(func(rc *release.RemoteChart) { rc.Contract = nil }), fixture,
			[]string{"release " + rel.Version + " installs chart gitops-runtime " + rel.Runtime.ChartVersion, "no runtime.contract"}},
		{"a value onprem must give", with(func(rc *release.RemoteChart) { delete(rc.Contract, release.ContractIngressHosts) }), fixture,
			[]string{"release " + rel.Version, "gitops-runtime " + rel.Runtime.ChartVersion + " has no values path for ingressHosts"}},
		{"a value the chart requires", with(func(rc *release.RemoteChart) { rc.Contract[release.ContractRuntimeName] = "global.runtime.nom" }), fixture,
			[]string{"release " + v, "global.runtime.name is required"}},
		{"a subchart the package lacks", with(func(rc *release.RemoteChart) { rc.ChartVersion = "0.26.0" }), missing,
			[]string{"release " + rel.Version + ": chart gitops-runtime 0.26.0", "argo-cd 9.0.2", "gitops-runtime/charts/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := render(tc.rc, tc.chart)
			if !IsInputError(err) {
				t.Fatalf("err = %T %v, want an input error", err, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q: %v", w, err)
				}
			}
		})
	}
}

// A runtime in tunnel mode without a tunnel server of the operator's is
// refused before rendering (an input error saying what is needed), never
// left to the chart's default, the vendor's hosted server.
func TestRuntimeTunnelNeedsAServer(t *testing.T) {
	in, rel := load(t, "minimal")
	in.Spec.RuntimeConfig.AccountID = "acc"
	_, err := RenderRuntime(context.Background(), RuntimeOptions{Installation: in, Release: rel, Chart: fixtureChart(t, rel.Runtime.ChartVersion),
		Runtime: config.Runtime{Name: "edge", Namespace: "edge", Access: config.RuntimeAccess{Mode: config.RuntimeAccessTunnel}}})
	if !IsInputError(err) || !strings.Contains(err.Error(), "access.tunnelServer.host and .subdomainHost") {
		t.Errorf("err = %v, want an input error naming access.tunnelServer", err)
	}
}
