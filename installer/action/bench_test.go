package action

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/apply"
)

// BenchmarkInstallConverged runs `onprem install` of the whole platform
// again on an installation that already matches: configuration, render,
// connection, lock, state record, secrets check and apply, with nothing
// to change. Target: under 5 s.
func BenchmarkInstallConverged(b *testing.B) {
	c := testcluster.Start(b)
	src, cl := clusterConfig(b, c, "  version: 2.8.0\n  domain: ci.example.com\n")
	ctx := context.Background()
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 3 * time.Minute}).Run(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		res, err := (&Install{Source: src, Cluster: cl}).Run(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, comp := range res.Components {
			if comp.Action != apply.Unchanged {
				b.Fatalf("%s: %s", comp.Name, comp.Action)
			}
		}
	}
}

// BenchmarkSupportBundle writes the support bundle of the whole platform
// on the integration ring (its pods have no logs: the kind e2e measures
// the real figure, logs included, in its timing file). Targets: under
// 20 s and 10 MB.
func BenchmarkSupportBundle(b *testing.B) {
	c := testcluster.Start(b)
	src, cl := clusterConfig(b, c, "  version: 2.8.0\n  domain: ci.example.com\n")
	ctx := context.Background()
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 3 * time.Minute}).Run(ctx); err != nil {
		b.Fatal(err)
	}
	file := filepath.Join(b.TempDir(), "bundle.tar.gz")
	var size int64
	b.ResetTimer()
	for b.Loop() {
		res, _, err := (&SupportBundle{Collect: Collect{Target: Target{Cluster: cl, ConfigPath: src.ConfigPath}}, Output: file}).Run(ctx)
		if err != nil {
			b.Fatal(err)
		}
		size = res.Size
	}
	b.ReportMetric(float64(size), "bundle-bytes")
}
