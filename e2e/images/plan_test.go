//go:build linux

package images

import (
	"context"
	"slices"
	"testing"

	"onprem.dev/onprem/e2e/buildplan"
)

// TestPlanGraph checks the images' graph without building anything: one
// Debian base for every Debian image, each Debian image after its own root
// filesystem, and only the images asked for.
func TestPlanGraph(t *testing.T) {
	p, err := NewPlan(context.Background(), Names(), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	steps := p.Steps()
	if err := buildplan.Validate(steps); err != nil {
		t.Fatal(err)
	}
	byName := map[string]buildplan.Step{}
	for _, s := range steps {
		byName[s.Name] = s
	}
	for _, n := range Names() {
		if _, ok := byName["images/"+n]; !ok {
			t.Errorf("no step builds %s", n)
		}
	}
	for _, n := range []string{"postgresql", "redis", "rabbitmq", GitopsRuntime} {
		if got := byName["images/"+n].Needs; !slices.Equal(got, []string{"images/rootfs-" + n}) {
			t.Errorf("images/%s needs %v, want its root filesystem", n, got)
		}
		if got := byName["images/rootfs-"+n].Needs; !slices.Equal(got, []string{"images/debian-base"}) {
			t.Errorf("images/rootfs-%s needs %v, want the shared Debian base", n, got)
		}
	}
	if !slices.Contains(byName["images/debian-base"].Uses, buildplan.Apt) {
		t.Error("images/debian-base may run apt but does not hold the apt slot")
	}

	// Only what is asked: Traefik alone has no Debian step.
	p, err = NewPlan(context.Background(), []string{"traefik", "traefik"}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range p.Steps() {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"images/traefik"}) {
		t.Errorf("steps for traefik alone: %v", names)
	}
	if _, err := NewPlan(context.Background(), []string{"nginx"}, t.Logf); err == nil {
		t.Error("an unknown image was accepted")
	}
}
