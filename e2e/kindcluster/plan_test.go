//go:build linux

package kindcluster

import (
	"slices"
	"strings"
	"testing"

	"onprem.dev/onprem/e2e/buildplan"
)

// TestPlanGraph checks the toolchain's graph without building anything:
// it is valid, the node image needs every other step (directly or not),
// and nothing of the integration ring's kwok is in it.
func TestPlanGraph(t *testing.T) {
	b := &builder{dir: t.TempDir(), logf: t.Logf}
	steps := b.steps()
	if err := buildplan.Validate(steps); err != nil {
		t.Fatal(err)
	}
	needs := map[string][]string{}
	for _, s := range steps {
		needs[s.Name] = s.Needs
		if strings.Contains(s.Name, "kwok") {
			t.Errorf("step %s: the kind toolchain needs no kwok", s.Name)
		}
		if len(s.Uses) == 0 {
			t.Errorf("step %s holds no resource: it would run beside anything", s.Name)
		}
	}
	reached := map[string]bool{}
	var walk func(string)
	walk = func(n string) {
		for _, d := range needs[n] {
			if !reached[d] {
				reached[d] = true
				walk(d)
			}
		}
	}
	walk(StepNodeImage)
	for _, s := range steps {
		if s.Name != StepNodeImage && !reached[s.Name] {
			t.Errorf("the node image does not wait for %s", s.Name)
		}
	}
	// apt runs once at a time.
	for _, s := range steps {
		if s.Name == StepHostPackages && !slices.Contains(s.Uses, buildplan.Apt) {
			t.Errorf("%s runs apt but does not hold the apt slot", s.Name)
		}
	}
}
