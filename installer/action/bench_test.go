package action

import (
	"context"
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
