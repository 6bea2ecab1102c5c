package main

import (
	"bytes"
	"testing"
)

func TestListedStatus(t *testing.T) {
	for _, c := range []struct {
		reachable, ready bool
		recorded, want   string
	}{
		{true, true, "deployed", "ready"},
		{true, true, "", "ready"},
		{true, false, "deployed", "not ready"},
		{false, false, "deployed", "unreachable"},
		{false, true, "", "unreachable"},
		{true, false, "failed: timed out", "not ready (last install: failed: timed out)"},
		{true, true, "pending", "ready (last install: pending)"},
	} {
		if got := listedStatus(c.reachable, c.ready, c.recorded); got != c.want {
			t.Errorf("listedStatus(%v, %v, %q) = %q, want %q", c.reachable, c.ready, c.recorded, got, c.want)
		}
	}
}

func TestPrintFailure(t *testing.T) {
	var b bytes.Buffer
	printFailure(&b, "runner", "gpu", "", []string{"Deployment agent 0/1"})
	if b.Len() != 0 {
		t.Errorf("no error printed %q", b.String())
	}
	printFailure(&b, "runtime", "edge", "not ready after 5m0s", []string{"Deployment argocd-server 0/1", "Deployment app-proxy 0/1"})
	want := "runtime edge: not ready after 5m0s\n  Deployment argocd-server 0/1\n  Deployment app-proxy 0/1\n"
	if b.String() != want {
		t.Errorf("got %q, want %q", b.String(), want)
	}
}
