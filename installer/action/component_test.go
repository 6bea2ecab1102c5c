package action

import "testing"

// Events are a component's when they are about its workloads or their
// ReplicaSets, not about another component whose name starts the same.
func TestOfWorkload(t *testing.T) {
	w := []string{"api", "ingress-controller"}
	for name, want := range map[string]bool{
		"api":                        true,
		"api-5d8f9c7b6":              true,
		"api-events":                 false,
		"api-events-6c9d":            false,
		"ingress-controller-f9d7954": true,
		"ingress":                    false,
	} {
		if got := ofWorkload(w, name); got != want {
			t.Errorf("ofWorkload(%q) = %v, want %v", name, got, want)
		}
	}
}
