//go:build linux

package platform

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/doctor"
)

// doctorClean runs `onprem doctor` (every analyzer, the preflight checks
// included) on the platform as it is, and fails on any error or warning:
// a healthy platform must not send its operator after false alarms (an
// Ingress without a load-balancer address behind a NodePort controller is
// not one).
func (e *env) doctorClean() {
	e.t.Helper()
	stdout, stderr, err := e.run("doctor", "-o", "json", "--kubeconfig", e.kubeconfig)
	var rep doctor.Report
	decodeJSON(e.t, []byte(stdout), &rep)
	if err != nil || rep.Count(doctor.Error) > 0 || rep.Count(doctor.Warning) > 0 {
		var lines []string
		for _, f := range rep.Findings {
			if f.Severity != doctor.Info {
				lines = append(lines, fmt.Sprintf("[%s] %s: %s (%s)", f.Severity, f.Analyzer, f.Title, strings.Join(f.Evidence, "; ")))
			}
		}
		e.t.Fatalf("doctor on a healthy platform: %s, %d errors, %d warnings:\n%s\n%s", exitOf(err), rep.Count(doctor.Error), rep.Count(doctor.Warning),
			strings.Join(lines, "\n"), tailLines(stderr, 20))
	}
	e.t.Logf("doctor: %d analyzers, no error, no warning", len(rep.Analyzers))
}

// repairHandEdit changes one Deployment's image by hand (as 'kubectl set
// image' does), checks that status names the drift, then runs `onprem
// install` with the unchanged configuration while clients read through
// the other services: install applies that component alone again, names
// it and what it reverted, the image is onprem's again, and no request
// to the other services fails.
func (e *env) repairHandEdit(ctx context.Context, cfg, bundle string, readPaths []string) {
	e.t.Helper()
	const component = "gitops-ui"
	deps := e.cluster.Client.AppsV1().Deployments(namespace)
	d, err := deps.Get(ctx, component, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	want := d.Spec.Template.Spec.Containers[0].Image
	d.Spec.Template.Spec.Containers[0].Image = platformPrefix + "/gitops-ui:9.9.9-nope"
	if _, err := deps.Update(ctx, d, metav1.UpdateOptions{FieldManager: "kubectl-set"}); err != nil {
		e.t.Fatalf("changing %s's image by hand: %v", component, err)
	}
	drifted := "Deployment/" + component + " image"

	var st action.StatusResult
	e.onpremJSON(&st, "status", "--namespace", namespace, "--kubeconfig", e.kubeconfig)
	for _, c := range st.Components {
		var w []string
		if c.Name == component {
			w = []string{drifted}
		}
		if !slices.Equal(c.Drift, w) {
			e.t.Fatalf("status: %s drifted %q, want %q", c.Name, c.Drift, w)
		}
	}

	var out string
	r := e.underTraffic("install repairing a hand-changed image", func() {
		out = e.onprem("install", "-c", cfg, "--bundle", bundle, "--kubeconfig", e.kubeconfig, "--timeout", "4m")
	}, readPaths...)
	mustContain(e.t, out, "repaired: "+drifted+"\n")
	// The table: COMPONENT RESULT REVISION TIME, one row each.
	results := map[string]string{}
	inTable := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == "COMPONENT":
			inTable = true
		case inTable && len(f) == 4:
			results[f[0]] = f[1]
		default:
			inTable = false
		}
	}
	for name, result := range results {
		if (name == component) != (result == "repaired") || (result != "repaired" && result != "unchanged") {
			e.t.Fatalf("install: %s %s; only %s may be applied again (repaired), the others unchanged:\n%s", name, result, component, out)
		}
	}
	if results[component] != "repaired" || len(results) < 10 {
		e.t.Fatalf("install's result table lists %d components, %s %q:\n%s", len(results), component, results[component], out)
	}
	got, err := deps.Get(ctx, component, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if img := got.Spec.Template.Spec.Containers[0].Image; img != want {
		e.t.Fatalf("after the repair %s runs %s, want %s", component, img, want)
	}
	if r.Failed > 0 || r.Sent < 5*int(r.Took.Seconds()) {
		e.t.Fatalf("while %s was repaired, %d of %d requests to the other services failed: %v", component, r.Failed, r.Sent, r.Examples)
	}
}
