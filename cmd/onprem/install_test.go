package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/apply"
)

// install's result names each repaired object and what was reverted;
// status names each drifted one and what reverts it.
func TestInstallAndStatusNameDrift(t *testing.T) {
	var b bytes.Buffer
	printInstall(&b, &action.InstallResult{Version: "2.8.0", Namespace: "onprem", Components: []apply.ComponentResult{
		{Name: "gitops-api", Action: apply.Unchanged, Revision: 1},
		{Name: "gitops-ui", Action: apply.Repaired, Revision: 2, Repaired: []string{"Deployment/gitops-ui image", "Service/gitops-ui (deleted)"}},
	}})
	out := b.String()
	for _, want := range []string{"gitops-ui   repaired   2", "repaired: Deployment/gitops-ui image\n", "repaired: Service/gitops-ui (deleted)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("install's output does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "repaired: gitops-api") {
		t.Errorf("an unchanged component is named repaired:\n%s", out)
	}

	b.Reset()
	printDrift(&b, []action.ComponentStatus{{Name: "gitops-api"}, {Name: "gitops-ui", Drift: []string{"Deployment/gitops-ui image"}},
		{Name: "redis", DriftError: "forbidden"}})
	out = b.String()
	for _, want := range []string{"gitops-ui drifted: Deployment/gitops-ui image\n", "redis: could not compare with its live objects: forbidden", "'onprem install -c onprem.yaml' reverts these"} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not say %q:\n%s", want, out)
		}
	}
	b.Reset()
	printDrift(&b, []action.ComponentStatus{{Name: "gitops-api"}})
	if b.Len() != 0 {
		t.Errorf("status without drift says %q", b.String())
	}
}

// install's result says what a move between single and high moved, and
// how long the services were stopped.
func TestInstallNamesTheMove(t *testing.T) {
	for _, tc := range []struct {
		move *action.MoveResult
		want string
	}{
		{&action.MoveResult{Databases: []string{"postgresql"}, Changes: []string{"PostgreSQL from a single server to a replicated Patroni cluster"}, Downtime: 95 * time.Second},
			"availability: moved PostgreSQL from a single server to a replicated Patroni cluster (services stopped 1m35s)\n"},
		{&action.MoveResult{Databases: []string{"postgresql", "redis"}, Resumed: true, Downtime: 40 * time.Second},
			"availability: finished moving postgresql, redis (services stopped 40s)\n"},
	} {
		var b bytes.Buffer
		printInstall(&b, &action.InstallResult{Version: "2.8.0", Namespace: "onprem", Move: tc.move})
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("install's output does not say %q:\n%s", tc.want, b.String())
		}
	}
	var b bytes.Buffer
	printInstall(&b, &action.InstallResult{Version: "2.8.0", Namespace: "onprem"})
	if strings.Contains(b.String(), "availability") {
		t.Errorf("an install that moved nothing says:\n%s", b.String())
	}
}
