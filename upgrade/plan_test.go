package upgrade

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
)

func embeddedPlan(t *testing.T, from, to string, migrated ...string) *Plan {
	t.Helper()
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	in := &config.Installation{APIVersion: config.APIVersion, Kind: config.Kind}
	in.Metadata.Name = "test"
	in.Spec.Version = to
	in.Spec.Domain = "ci.example.com"
	config.SetDefaults(in)
	p, err := MakePlan(context.Background(), PlanOptions{
		Installation: in, Releases: set, From: from, To: to, Installer: "0.1.0", Kubernetes: "v1.33.2",
		Migrated: func(n string) bool { return slices.Contains(migrated, n) },
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func changeOf(t *testing.T, s *StepPlan, name string) ComponentChange {
	t.Helper()
	for _, c := range s.Components {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("step %s → %s: no component %s", s.From, s.To, name)
	return ComponentChange{}
}

func TestPlanSaysWhatEachStepChanges(t *testing.T) {
	p := embeddedPlan(t, "2.6.3", "2.8.0")
	if p.From != "2.6.3" || p.To != "2.8.0" || len(p.Steps) != 2 || p.Steps[0].To != "2.7.0" || !p.Steps[0].Required {
		t.Fatalf("plan = %+v", p)
	}
	s1, s2 := p.Steps[0], p.Steps[1]
	// 2.7.0: Redis 7.2.7, every service image, one migration after its
	// backup.
	redis := changeOf(t, s1, "redis")
	if redis.Change != ComponentChanged || len(redis.Images) != 1 || !strings.HasSuffix(redis.Images[0].To, ":7.2.7") || redis.Images[0].Container != "redis/redis" {
		t.Errorf("redis in 2.7.0: %+v", redis)
	}
	if !slices.Contains(redis.Values, "images.redis") {
		t.Errorf("redis values changed: %v", redis.Values)
	}
	if api := changeOf(t, s1, "pipelines-api"); api.Change != ComponentChanged || api.FromChart != "service-1.0.0" || api.ToChart != "service-1.0.0" {
		t.Errorf("pipelines-api in 2.7.0: %+v", api)
	}
	// The ingress only gets the new platform version (in its labels).
	if ing := changeOf(t, s1, "ingress"); len(ing.Images) != 0 || !slices.Equal(ing.Values, []string{"global.platform.version"}) {
		t.Errorf("ingress in 2.7.0: %+v", ing)
	}
	if len(s1.Migrations) != 1 || s1.Migrations[0].Name != "pipelines-build-index-v2" || s1.Migrations[0].Done {
		t.Errorf("2.7.0 migrations: %+v", s1.Migrations)
	}
	if len(s1.Diff) != 0 {
		t.Error("the first step's diff is the caller's (against the cluster)")
	}
	// 2.8.0 drops gitops-manager.
	if gm := changeOf(t, s2, "gitops-manager"); gm.Change != ComponentRemoved || gm.Objects == 0 || gm.Images[0].To != "" {
		t.Errorf("gitops-manager in 2.8.0: %+v", gm)
	}
	if len(s2.Diff) == 0 || len(s2.Result.Tasks) != 2 {
		t.Errorf("2.8.0: %d diffs, %d tasks", len(s2.Diff), len(s2.Result.Tasks))
	}
	removed := false
	for _, dc := range s2.Diff {
		if dc.Name == "gitops-manager" {
			for _, o := range dc.Objects {
				removed = removed || (o.Kind == "Deployment" && o.Change == "removed")
			}
		}
	}
	if !removed {
		t.Error("the 2.8.0 diff does not show gitops-manager's Deployment removed")
	}
}

func TestPlanMarksCompletedMigrations(t *testing.T) {
	p := embeddedPlan(t, "2.7.0", "2.8.0", "audit-log-partitions")
	if len(p.Steps) != 1 || len(p.Steps[0].Migrations) != 1 || !p.Steps[0].Migrations[0].Done {
		t.Errorf("plan = %+v", p.Steps[0].Migrations)
	}
}

func TestPlanToTheInstalledVersionIsEmpty(t *testing.T) {
	p := embeddedPlan(t, "2.8.0", "2.8.0")
	if len(p.Steps) != 0 || p.To != "2.8.0" {
		t.Errorf("plan = %+v", p)
	}
}

func TestPlanRefusesWhatTheGraphRefuses(t *testing.T) {
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	in := &config.Installation{}
	in.Spec.Domain = "ci.example.com"
	config.SetDefaults(in)
	_, err = MakePlan(context.Background(), PlanOptions{Installation: in, Releases: set, From: "2.8.0", To: "2.6.3", Installer: "0.1.0"})
	var de *DowngradeError
	if !errors.As(err, &de) {
		t.Errorf("downgrade: %v", err)
	}
	_, err = MakePlan(context.Background(), PlanOptions{Installation: in, Releases: set, From: "2.6.3", To: "2.8.0", Installer: "0.1.0", Kubernetes: "v1.29.0"})
	var se *StepError
	if !errors.As(err, &se) {
		t.Errorf("a cluster too old for the path: %v", err)
	}
}
