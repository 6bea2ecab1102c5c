package render

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// overlayDir writes an overlay folder: its kustomization and other files.
func overlayDir(t *testing.T, kustomization string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["kustomization.yaml"] = kustomization
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// renderWith renders a test configuration with the given overlays and --set.
func renderWith(t *testing.T, config string, overlays []string, set ...string) (*Result, error) {
	t.Helper()
	in, rel := load(t, config)
	in.Spec.Overlays = overlays
	return Render(context.Background(), Options{Installation: in, Release: rel, Set: set})
}

// A patch target that selects nothing is refused however it selects (by
// name, kind, labels, annotations, namespace, group), and every such
// target of every overlay is reported at once; targets that select
// something pass (issue 33, item 4).
func TestOverlayTargetsThatSelectNothingAreRefused(t *testing.T) {
	const patch = "    patch: |\n      - op: add\n        path: /metadata/annotations/example.org~1x\n        value: \"1\"\n"
	for _, c := range []struct {
		name, target string
		refused      bool
		want         string
	}{
		{"labelSelector", "{kind: Deployment, labelSelector: onprem.dev/component=pipelines-apii}", true, `labelSelector "onprem.dev/component=pipelines-apii"`},
		{"annotationSelector", "{annotationSelector: example.org/none=x}", true, `annotationSelector "example.org/none=x"`},
		{"namespace", "{kind: Deployment, namespace: onprem}", true, "leave namespace out of the target"},
		{"kind alone", "{kind: DaemonSet}", true, "DaemonSet: matches no object"},
		{"group", "{group: extensions, kind: Deployment}", true, "group/version extensions/"},
		{"name as a regular expression", "{kind: Deployment, name: gitops-.*x}", true, "Deployment/gitops-.*x"},
		{"labelSelector that selects", "{kind: Deployment, labelSelector: onprem.dev/component=pipelines-api}", false, ""},
		{"kind that selects", "{kind: StatefulSet}", false, ""},
		{"name as a regular expression that selects", "{kind: Deployment, name: gitops-.*}", false, ""},
		{"labels only", "{labelSelector: app.kubernetes.io/name=mongodb}", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := overlayDir(t, "kind: Component\npatches:\n  - target: "+c.target+"\n"+patch, map[string]string{})
			res, err := renderWith(t, "minimal", []string{dir})
			if !c.refused {
				if err != nil {
					t.Fatal(err)
				}
				if find(t, res.Component("mongodb"), "StatefulSet", "mongodb") == nil {
					t.Fatal("no mongodb")
				}
				return
			}
			var oe *OverlayError
			if !errors.As(err, &oe) || !IsInputError(err) {
				t.Fatalf("err = %v, want an OverlayError", err)
			}
			for _, w := range []string{"spec.overlays[0] (" + filepath.Join(dir, "kustomization.yaml") + ") patches[0]", "matches no object of the platform", c.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("the error lacks %q: %v", w, err)
				}
			}
		})
	}
	// Every problem of every overlay at once.
	a := overlayDir(t, "kind: Component\npatches:\n  - target: {kind: DaemonSet}\n"+patch+"  - target: {kind: Deployment, name: nope}\n"+patch, map[string]string{})
	b := overlayDir(t, "kind: Component\npatches:\n  - target: {kind: Deployment, name: gitops-api}\n"+patch+"  - target: {labelSelector: x=y}\n"+patch, map[string]string{})
	_, err := renderWith(t, "minimal", []string{a, b})
	var errs OverlayErrors
	if !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("err = %v, want 3 problems", err)
	}
	for _, w := range []string{"spec.overlays[0] (" + a, "patches[0] on DaemonSet", "patches[1] on Deployment/nope", "spec.overlays[1] (" + b, "patches[1] on any kind, labelSelector \"x=y\""} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the errors lack %q:\n%v", w, err)
		}
	}
	// Patches that do not apply are all reported too, with the targets
	// that select nothing.
	bad := "    patch: |\n      - op: add\n        path: /spec/nothing/here\n        value: 1\n"
	c := overlayDir(t, "kind: Component\npatches:\n  - target: {kind: Deployment, name: gitops-api}\n"+bad+"  - target: {kind: Deployment, name: pipelines-api}\n"+bad+"  - target: {kind: CronJob}\n"+patch, map[string]string{})
	_, err = renderWith(t, "minimal", []string{c})
	if !errors.As(err, &errs) || len(errs) != 3 {
		t.Fatalf("err = %v, want 3 problems", err)
	}
	for _, w := range []string{"patches[0] on Deployment/gitops-api", "patches[1] on Deployment/pipelines-api", "patches[2] on CronJob: matches no object"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the errors lack %q:\n%v", w, err)
		}
	}
}

// The operator's overlays are built after the platform's own, and the
// namespace set after them: an overlay that only annotates every object
// leaves every object as it is without it, but for the annotation.
func TestOverlaysChangeOnlyWhatTheySay(t *testing.T) {
	dir := overlayDir(t, "kind: Component\ncommonAnnotations: {example.org/team: ci}\n", map[string]string{})
	with, err := renderWith(t, "private-registry-large", []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	without := mustRender(t, "private-registry-large")
	for _, c := range with.Components {
		for _, o := range c.Objects {
			if o.GetAnnotations()["example.org/team"] != "ci" {
				t.Errorf("%s/%s: not annotated", o.GetKind(), o.GetName())
			}
			unannotate(o.Object)
		}
	}
	if got, want := yamlOf(t, with), yamlOf(t, without); !bytes.Equal(got, want) {
		t.Errorf("an overlay that only annotates changed more:\n%s", firstDiff(string(got), string(want)))
	}
}

// What an operator's overlay or --set adds is relocated to spec.registry
// and hardened like the charts' own pods; what the restricted Pod
// Security Standard refuses is refused, naming the object (issue 33,
// item 3).
func TestOverlayAndSetAdditionsAreRelocatedAndHardened(t *testing.T) {
	const registry = "registry.airgap.internal:5000/onprem/"
	sidecar := overlayDir(t, "kind: Component\npatches:\n  - target: {kind: Deployment, name: pipelines-api}\n    patch: |\n      - op: add\n        path: /spec/template/spec/containers/-\n        value: {name: shipper, image: \"busybox:1.36\", args: [sleep, infinity]}\n", map[string]string{})
	added := overlayDir(t, "kind: Component\nresources: [exporter.yaml]\n", map[string]string{"exporter.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: exporter}
spec:
  selector: {matchLabels: {app: exporter}}
  template:
    metadata: {labels: {app: exporter}}
    spec:
      initContainers: [{name: init, image: "quay.io/prometheus/busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000"}]
      containers: [{name: exporter, image: "docker.io/prom/statsd-exporter:v0.26.0", securityContext: {runAsUser: 65534}}]
`})
	res, err := renderWith(t, "private-registry-large", []string{sidecar, added}, "gitops-api.images.service=busybox:1.36")
	if err != nil {
		t.Fatal(err)
	}
	type want struct{ component, kind, name, container, image string }
	for _, w := range []want{
		{"pipelines-api", "Deployment", "pipelines-api", "shipper", registry + "library/busybox:1.36"},
		{PlatformComponent, "Deployment", "exporter", "init", registry + "prometheus/busybox@sha256:0000000000000000000000000000000000000000000000000000000000000000"},
		{PlatformComponent, "Deployment", "exporter", "exporter", registry + "prom/statsd-exporter:v0.26.0"},
		{"gitops-api", "Deployment", "gitops-api", "gitops-api", registry + "library/busybox:1.36"},
	} {
		o := find(t, res.Component(w.component), w.kind, w.name)
		pod, ok := podSpecOf(o)
		if !ok {
			t.Fatalf("%s: no pod", w.name)
		}
		var found bool
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			if c.Name != w.container {
				continue
			}
			found = true
			if c.Image != w.image {
				t.Errorf("%s/%s: image %s, want %s", w.name, c.Name, c.Image, w.image)
			}
			sc := c.SecurityContext
			if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil || !dropsAll(sc.Capabilities.Drop) {
				t.Errorf("%s/%s: not hardened: %+v", w.name, c.Name, sc)
			}
		}
		if !found {
			t.Errorf("%s has no container %s", w.name, w.container)
		}
		psc := pod.SecurityContext
		if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != "RuntimeDefault" {
			t.Errorf("%s: pod not hardened: %+v", w.name, psc)
		}
		if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken || pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
			t.Errorf("%s: token or service links left on", w.name)
		}
	}
	// The platform's rules hold for every pod but for what Check asks of
	// a platform service that a sidecar need not have (probes, resources,
	// its own read-only root).
	for _, p := range Check(res, CheckOptions{RegistryPrefix: registry}) {
		if p.Rule == "registry" || (p.Rule == "security" && !strings.Contains(p.Message, "writable root")) {
			t.Errorf("%s", p)
		}
	}

	for _, c := range []struct{ name, patch, want string }{
		{"privileged", "- op: add\n  path: /spec/template/spec/containers/-\n  value: {name: x, image: busybox, securityContext: {privileged: true}}", "pipelines-api: Deployment/pipelines-api: [restricted] spec.template.spec.containers[].securityContext.privileged"},
		{"host network", "- op: add\n  path: /spec/template/spec/hostNetwork\n  value: true", "host namespaces"},
		{"root", "- op: add\n  path: /spec/template/spec/securityContext/runAsUser\n  value: 0", "runAsUser=0"},
		{"escalation", "- op: add\n  path: /spec/template/spec/containers/-\n  value: {name: x, image: busybox, securityContext: {allowPrivilegeEscalation: true}}", "allowPrivilegeEscalation != false"},
		{"capabilities", "- op: add\n  path: /spec/template/spec/containers/-\n  value: {name: x, image: busybox, securityContext: {capabilities: {add: [NET_ADMIN]}}}", "unrestricted capabilities"},
		{"host path", "- op: add\n  path: /spec/template/spec/volumes/-\n  value: {name: h, hostPath: {path: /var/run}}", `restricted volume type "hostPath"`},
		{"an image that is no reference", "- op: add\n  path: /spec/template/spec/containers/-\n  value: {name: x, image: \"Not An Image\"}", `container "x": image "Not An Image" cannot be relocated`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := overlayDir(t, "kind: Component\npatches:\n  - target: {kind: Deployment, name: pipelines-api}\n    path: p.yaml\n", map[string]string{"p.yaml": c.patch})
			_, err := renderWith(t, "private-registry-large", []string{dir})
			var ce *CheckError
			if !errors.As(err, &ce) || !IsInputError(err) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want a CheckError with %q", err, c.want)
			}
		})
	}
}

// Replicas an overlay gives a workload get what the same replicas in
// values get (the chart's PodDisruptionBudget and spread over nodes); a
// component that cannot have them is refused (issue 33, item 5).
func TestReplicasFromAnOverlayAreRenderedAsValues(t *testing.T) {
	for _, c := range []struct{ component, kind, name string }{
		{"gitops-api", "Deployment", "gitops-api"},
		{"ingress", "Deployment", "ingress-controller"},
	} {
		t.Run(c.component, func(t *testing.T) {
			patch := "kind: Component\npatches:\n  - target: {kind: " + c.kind + ", name: " + c.name + "}\n    patch: |\n      - op: replace\n        path: /spec/replicas\n        value: 3\n"
			viaOverlay, err := renderWith(t, "minimal", []string{overlayDir(t, patch, map[string]string{})})
			if err != nil {
				t.Fatal(err)
			}
			viaSet, err := renderWith(t, "minimal", nil, c.component+".replicas=3")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := yamlOf(t, viaOverlay), yamlOf(t, viaSet); !bytes.Equal(got, want) {
				t.Errorf("replicas from an overlay differ from --set %s.replicas=3:\n%s", c.component, firstDiff(string(got), string(want)))
			}
			var pdb policyv1.PodDisruptionBudget
			toTyped(t, find(t, viaOverlay.Component(c.component), "PodDisruptionBudget", c.name), &pdb)
			var d appsv1.Deployment
			toTyped(t, find(t, viaOverlay.Component(c.component), "Deployment", c.name), &d)
			if *d.Spec.Replicas != 3 || !equality.Semantic.DeepEqual(pdb.Spec.Selector.MatchLabels, d.Spec.Selector.MatchLabels) {
				t.Errorf("replicas %d, PDB selects %v", *d.Spec.Replicas, pdb.Spec.Selector)
			}
		})
	}
	// A standalone server cannot have three.
	patch := "kind: Component\npatches:\n  - target: {kind: StatefulSet, name: mongodb}\n    patch: |\n      - op: replace\n        path: /spec/replicas\n        value: 3\n"
	_, err := renderWith(t, "minimal", []string{overlayDir(t, patch, map[string]string{})})
	if !IsInputError(err) || !strings.Contains(err.Error(), "spec.overlays on component mongodb: replicas: the number 3 is too large (at most 1)") {
		t.Errorf("err = %v", err)
	}
}

// unannotate removes example.org/team from every annotations map of an
// object (its own, its pod template's), and the maps it leaves empty.
func unannotate(m map[string]any) {
	for k, v := range m {
		switch x := v.(type) {
		case map[string]any:
			if k == "annotations" {
				delete(x, "example.org/team")
				if len(x) == 0 {
					delete(m, k)
				}
				continue
			}
			unannotate(x)
		case []any:
			for _, item := range x {
				if im, ok := item.(map[string]any); ok {
					unannotate(im)
				}
			}
		}
	}
}

func toTyped(t *testing.T, o *unstructured.Unstructured, out any) {
	t.Helper()
	b, err := yaml.Marshal(o.Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}
