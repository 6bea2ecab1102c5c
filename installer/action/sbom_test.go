package action

import (
	"slices"
	"testing"

	"onprem.dev/onprem/installer/release"
)

// Each image of a release is attributed to what runs it: its components,
// the runner, or the runtime chart that brought it.
func TestImageUsers(t *testing.T) {
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := set.Get("2.8.0")
	if err != nil {
		t.Fatal(err)
	}
	withChart := *rel
	withChart.Images = append(slices.Clone(rel.Images), release.Image{Name: "argocd", Repository: "quay.io/argoproj/argocd", Tag: "v3.0.0", Chart: "gitops-runtime"})
	users := imageUsers(&withChart)
	for img, want := range map[string]string{
		"redis":         "redis",
		"redis-ha":      "redis",
		"pipelines-api": "pipelines-api",
		"argocd":        "runtime chart gitops-runtime",
	} {
		if !slices.Contains(users[img], want) {
			t.Errorf("image %s used by %v, want %s among them", img, users[img], want)
		}
	}
	if rel.Runner == nil {
		t.Fatal("release 2.8.0 has no runner")
	}
	for _, img := range rel.Runner.Images {
		if !slices.Contains(users[img], "runner") {
			t.Errorf("runner image %s used by %v", img, users[img])
		}
	}
	for img, who := range users {
		if len(slices.Compact(slices.Sorted(slices.Values(who)))) != len(who) {
			t.Errorf("image %s: %v names one user twice", img, who)
		}
	}
}
