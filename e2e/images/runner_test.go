//go:build linux

package images

import (
	"slices"
	"testing"

	"onprem.dev/onprem/installer/release"
)

// The runner image, when built, is the release's runner agent and build
// engine; without it the agent stays refservice and the engine missing.
// The HA images likewise take their release images' references.
func TestForReleaseMapsTheRunnerImage(t *testing.T) {
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := set.Get("2.8.0")
	if err != nil {
		t.Fatal(err)
	}
	const prefix = "registry.example.com/onprem"
	refsOf := func(built []Image) (map[string]string, []string) {
		imgs, missing := ForRelease(rel, prefix, built)
		refs := map[string]string{}
		for _, img := range imgs {
			refs[img.Ref] = img.Name
		}
		return refs, missing
	}
	agent, engine := prefix+"/runner-agent:2.8.0", "docker.io/moby/buildkit:v0.23.2-rootless"

	refs, missing := refsOf([]Image{{Name: "refservice", Ref: RefserviceRef}, {Name: "runner", Ref: RunnerRef}})
	if refs[agent] != "runner" || refs[engine] != "runner" {
		t.Errorf("with runner built: %s is %q and %s is %q, want runner", agent, refs[agent], engine, refs[engine])
	}
	if refs[prefix+"/pipelines-api:2.8.0"] != "refservice" || slices.Contains(missing, "buildkit") {
		t.Errorf("with runner built: pipelines-api is %q, missing %v", refs[prefix+"/pipelines-api:2.8.0"], missing)
	}

	refs, missing = refsOf([]Image{{Name: "refservice", Ref: RefserviceRef}})
	if refs[agent] != "refservice" || !slices.Contains(missing, "buildkit") {
		t.Errorf("without runner: %s is %q, missing %v; want refservice and buildkit missing", agent, refs[agent], missing)
	}
	// The high-availability images, built, are the release's own
	// (platform images, otherwise the reference service).
	pg, rd := prefix+"/postgresql-ha:2.8.0", prefix+"/redis-ha:2.8.0"
	if refs[pg] != "refservice" || refs[rd] != "refservice" {
		t.Errorf("without the HA images: %s is %q and %s is %q, want refservice", pg, refs[pg], rd, refs[rd])
	}
	refs, _ = refsOf([]Image{{Name: "refservice", Ref: RefserviceRef}, {Name: "postgresql-ha"}, {Name: "redis-ha"}})
	if refs[pg] != "postgresql-ha" || refs[rd] != "redis-ha" {
		t.Errorf("with the HA images built: %s is %q and %s is %q", pg, refs[pg], rd, refs[rd])
	}
}
