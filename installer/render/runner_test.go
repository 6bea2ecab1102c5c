package render

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
)

func mustRenderRunner(t testing.TB, cfg string, r config.Runner) (*config.Installation, *Component) {
	t.Helper()
	in, rel := load(t, cfg)
	c, err := RenderRunner(context.Background(), RunnerOptions{Installation: in, Release: rel, Runner: r})
	if err != nil {
		t.Fatalf("render runner for %s: %v", cfg, err)
	}
	return in, c
}

func typed[T any](t testing.TB, o *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &v); err != nil {
		t.Fatalf("%s/%s: %v", o.GetKind(), o.GetName(), err)
	}
	return &v
}

// Every runner of every configuration (and so of every shipped release)
// follows the platform's rules, the engine's documented exception aside;
// with a private registry every image comes from it.
func TestRunnerPassesTheChecks(t *testing.T) {
	for _, cfg := range configs {
		t.Run(cfg, func(t *testing.T) {
			in, c := mustRenderRunner(t, cfg, config.Runner{Name: "gpu"})
			opts := CheckOptions{}
			if in.Spec.Registry.Host != "" {
				opts.RegistryPrefix = in.Spec.Registry.Host + "/" + in.Spec.Registry.PathPrefix
			}
			for _, p := range Check(&Result{Components: []*Component{c}}, opts) {
				t.Error(p)
			}
			if c.Name != "runner-gpu" || c.Chart != RunnerChart || c.Group != RunnerGroup {
				t.Errorf("component = %s chart %s group %s", c.Name, c.Chart, c.Group)
			}
		})
	}
	// Every shipped release has a runner whose chart this onprem has.
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	in, _ := load(t, "minimal")
	for _, rel := range set.All() {
		if _, err := RenderRunner(context.Background(), RunnerOptions{Installation: in, Release: rel, Runner: config.Runner{Name: "a"}}); err != nil {
			t.Errorf("release %s: %v", rel.Version, err)
		}
	}
}

func TestRunnerObjects(t *testing.T) {
	in, c := mustRenderRunner(t, "minimal", config.Runner{Name: "gpu", Concurrency: 12})
	const ns, engineNS = "onprem-runner-gpu", "onprem-runner-gpu-engine"
	for _, o := range c.Objects {
		want := ns
		if o.GetLabels()["app.kubernetes.io/component"] == "build-engine" {
			want = engineNS
		}
		if o.GetNamespace() != want {
			t.Errorf("%s/%s in namespace %q, want %q", o.GetKind(), o.GetName(), o.GetNamespace(), want)
		}
		if o.GetLabels()[ComponentLabel] != "runner-gpu" || o.GetLabels()["onprem.dev/installation"] != in.Metadata.Name {
			t.Errorf("%s/%s labels: %v", o.GetKind(), o.GetName(), o.GetLabels())
		}
		if o.GetKind() == "ClusterRole" || o.GetKind() == "ClusterRoleBinding" || o.GetKind() == "Namespace" || o.GetKind() == "Secret" {
			t.Errorf("a runner renders no %s (%s)", o.GetKind(), o.GetName())
		}
	}

	// The agent: through the ingress, with the token from its Secret.
	agent := typed[appsv1.Deployment](t, find(t, c, "Deployment", "runner-agent"))
	env := map[string]corev1.EnvVar{}
	for _, e := range agent.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	if got := env["ONPREM_PLATFORM_URL"].Value; got != "https://"+in.Spec.Domain+"/api" {
		t.Errorf("ONPREM_PLATFORM_URL = %q", got)
	}
	if ref := env["ONPREM_RUNNER_TOKEN"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "onprem-runner-token" || ref.SecretKeyRef.Key != "token" {
		t.Errorf("ONPREM_RUNNER_TOKEN = %+v", env["ONPREM_RUNNER_TOKEN"])
	}
	if env["ONPREM_RUNNER_NAME"].Value != "gpu" || env["ONPREM_RUNNER_CONCURRENCY"].Value != "12" ||
		env["BUILDKIT_HOST"].Value != "tcp://runner-engine."+engineNS+".svc:1234" {
		t.Errorf("agent env = %+v", env)
	}
	if !strings.HasPrefix(agent.Spec.Template.Spec.Containers[0].Image, in.Spec.Images.Platform+"/runner-agent:") {
		t.Errorf("agent image = %s", agent.Spec.Template.Spec.Containers[0].Image)
	}

	// RBAC: a Role of the runner's namespace, pods and their logs and exec,
	// Secrets and ConfigMaps, nothing else.
	role := typed[rbacv1.Role](t, find(t, c, "Role", "runner-agent"))
	allowed := []string{"pods", "pods/log", "pods/exec", "secrets", "configmaps"}
	for _, r := range role.Rules {
		if !slices.Equal(r.APIGroups, []string{""}) || len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Errorf("rule %+v", r)
		}
		for _, res := range r.Resources {
			if !slices.Contains(allowed, res) {
				t.Errorf("the agent may touch %s", res)
			}
		}
		if slices.Contains(r.Verbs, "*") || slices.Contains(r.Verbs, "escalate") || slices.Contains(r.Verbs, "bind") {
			t.Errorf("verbs %v", r.Verbs)
		}
	}
	rb := typed[rbacv1.RoleBinding](t, find(t, c, "RoleBinding", "runner-agent"))
	if rb.RoleRef.Kind != "Role" || len(rb.Subjects) != 1 || rb.Subjects[0].Name != "runner-agent" || (rb.Subjects[0].Namespace != "" && rb.Subjects[0].Namespace != ns) {
		t.Errorf("role binding = %+v", rb)
	}

	// The engine: its configuration, and the exception on its container
	// only.
	cm := typed[corev1.ConfigMap](t, find(t, c, "ConfigMap", "runner-engine"))
	if toml := cm.Data["buildkitd.toml"]; !strings.Contains(toml, "max-parallelism = 12") || !strings.Contains(toml, "noProcessSandbox = true") {
		t.Errorf("buildkitd.toml:\n%s", toml)
	}
	eng := typed[appsv1.Deployment](t, find(t, c, "Deployment", "runner-engine"))
	sc := eng.Spec.Template.Spec.Containers[0].SecurityContext
	if sc.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined || sc.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined ||
		*sc.Privileged || !*sc.RunAsNonRoot || !*sc.ReadOnlyRootFilesystem || eng.Spec.Template.Spec.AutomountServiceAccountToken == nil || *eng.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Errorf("engine security context = %+v", sc)
	}

	// Default deny in both namespaces.
	for _, n := range []string{"runner-default-deny", "runner-engine-default-deny"} {
		find(t, c, "NetworkPolicy", n)
	}
}

// The engine's exception is the engine's: the same settings anywhere else
// are reported.
func TestRunnerExceptionIsTheEnginesOnly(t *testing.T) {
	_, c := mustRenderRunner(t, "minimal", config.Runner{Name: "gpu"})
	eng := find(t, c, "Deployment", "runner-engine")
	agent := find(t, c, "Deployment", "runner-agent")
	ecs, _, _ := unstructured.NestedSlice(eng.Object, "spec", "template", "spec", "containers")
	acs, _, _ := unstructured.NestedSlice(agent.Object, "spec", "template", "spec", "containers")
	acs[0].(map[string]any)["securityContext"] = ecs[0].(map[string]any)["securityContext"]
	if err := unstructured.SetNestedSlice(agent.Object, acs, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	// And the engine may not add more than SETUID and SETGID.
	sc := ecs[0].(map[string]any)["securityContext"].(map[string]any)
	sc["capabilities"] = map[string]any{"drop": []any{"ALL"}, "add": []any{"SETUID", "SETGID", "SYS_ADMIN"}}
	if err := unstructured.SetNestedSlice(eng.Object, ecs, "spec", "template", "spec", "containers"); err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, p := range Check(&Result{Components: []*Component{c}}, CheckOptions{}) {
		got[p.Object]++
		if !strings.Contains(p.Message, "capabilities") && p.Object == "Deployment/runner-engine" {
			t.Errorf("unexpected: %s", p)
		}
	}
	// The agent: escalation, capabilities, seccomp, AppArmor.
	if got["Deployment/runner-agent"] != 4 || got["Deployment/runner-engine"] != 1 {
		t.Errorf("problems by object = %v", got)
	}
}

// An air-gapped installation: images relocated, the engine pulls docker.io
// through the registry, egress to the registry's and proxy's ports, the
// pull secret, placement and proxy environment on every container.
func TestRunnerAirGapped(t *testing.T) {
	in, c := mustRenderRunner(t, "everything", config.Runner{Name: "b", Namespace: "ci-b"})
	prefix := in.Spec.Registry.Host + "/" + in.Spec.Registry.PathPrefix + "/"
	for _, name := range []string{"runner-agent", "runner-engine"} {
		d := typed[appsv1.Deployment](t, find(t, c, "Deployment", name))
		ps := d.Spec.Template.Spec
		if !strings.HasPrefix(ps.Containers[0].Image, prefix) {
			t.Errorf("%s image %s not from %s", name, ps.Containers[0].Image, prefix)
		}
		if len(ps.ImagePullSecrets) != 1 || ps.ImagePullSecrets[0].Name != in.Spec.Registry.PullSecret {
			t.Errorf("%s pull secrets %v", name, ps.ImagePullSecrets)
		}
		if ps.NodeSelector["node-role.example.org/ci"] != "true" || len(ps.Tolerations) != 1 {
			t.Errorf("%s placement %v %v", name, ps.NodeSelector, ps.Tolerations)
		}
		var proxy bool
		for _, e := range ps.Containers[0].Env {
			proxy = proxy || e.Name == "HTTPS_PROXY" && e.Value == in.Spec.Proxy.HTTPSProxy
		}
		if !proxy {
			t.Errorf("%s has no proxy environment", name)
		}
	}
	if d := find(t, c, "Deployment", "runner-engine"); d.GetNamespace() != "ci-b-engine" {
		t.Errorf("engine namespace %s", d.GetNamespace())
	}
	toml, _, _ := unstructured.NestedString(find(t, c, "ConfigMap", "runner-engine").Object, "data", "buildkitd.toml")
	if !strings.Contains(toml, `mirrors = ["registry.example.org/mirror/onprem"]`) {
		t.Errorf("no registry mirror:\n%s", toml)
	}
	ports := c.Values["networkPolicy"].(map[string]any)["egressPorts"].([]any)
	if len(ports) != 2 || ports[0] != 443 || ports[1] != 3128 {
		t.Errorf("egress ports = %v", ports)
	}
}

func TestRunnerBadNames(t *testing.T) {
	in, rel := load(t, "minimal")
	for _, r := range []config.Runner{
		{Name: "Bad_Name"},
		{Name: strings.Repeat("a", 41)},
		{Name: "a", Namespace: strings.Repeat("n", 57)},
		{Name: "a", Concurrency: 999},
	} {
		_, err := RenderRunner(context.Background(), RunnerOptions{Installation: in, Release: rel, Runner: r})
		var ie *RunnerInputError
		if !errors.As(err, &ie) {
			t.Errorf("%+v: err = %v", r, err)
		}
	}
	if r, err := RunnerDefaults(config.Runner{Name: "a", Namespace: strings.Repeat("n", 56)}); err != nil || r.Concurrency != 4 {
		t.Errorf("56-character namespace: %+v %v", r, err)
	}
}
