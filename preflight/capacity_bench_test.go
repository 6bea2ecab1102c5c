package preflight

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/sethvargo/go-envconfig"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/sizing"
)

// BenchmarkAvailabilityCost renders the platform of each profile with
// spec.availability single and high and reports what its pods request in
// all (CPU in millicores, memory in MiB, pods): the capacity high
// availability costs, as the scheduler and preflight's capacity check
// count it. Requests, not measured use; docs/performance.md has the
// table.
func BenchmarkAvailabilityCost(b *testing.B) {
	set, err := release.Embedded()
	if err != nil {
		b.Fatal(err)
	}
	rel := set.Latest()
	for _, profile := range sizing.Names() {
		for _, avail := range []string{"single", "high"} {
			b.Run(profile+"/"+avail, func(b *testing.B) {
				yaml := fmt.Sprintf("apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: %q\n  domain: ci.example.com\n  profile: %s\n  availability: %s\n", rel.Version, profile, avail)
				path := filepath.Join(b.TempDir(), "onprem.yaml")
				if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
					b.Fatal(err)
				}
				in, _, err := config.Load(context.Background(), config.LoadOptions{Path: path, Lookup: envconfig.MapLookuper(map[string]string{})})
				if err != nil {
					b.Fatal(err)
				}
				var d demand
				for b.Loop() {
					res, err := render.Render(context.Background(), render.Options{Installation: in, Release: rel})
					if err != nil {
						b.Fatal(err)
					}
					d = platformDemand(res, 3)
				}
				b.ReportMetric(float64(d.Total.MilliCPU), "mCPU")
				b.ReportMetric(float64(d.Total.Memory)/(1<<20), "MiB")
				b.ReportMetric(float64(d.Pods), "pods")
			})
		}
	}
}
