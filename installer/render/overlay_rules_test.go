package render

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
