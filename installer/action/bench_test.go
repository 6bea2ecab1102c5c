package action

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/kube"
)

// installedPlatform starts a test cluster with the whole platform
// installed.
func installedPlatform(b *testing.B) (*testcluster.Cluster, Source, kube.Options) {
	b.Helper()
	c := testcluster.Start(b)
	src, cl := clusterConfig(b, c, "  version: 2.8.0\n  domain: ci.example.com\n")
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 3 * time.Minute}).Run(context.Background()); err != nil {
		b.Fatal(err)
	}
	return c, src, cl
}

// BenchmarkInstallConverged runs `onprem install` of the whole platform
// again on an installation that already matches: configuration, render,
// connection, lock, state record, secrets check and apply, with nothing
// to change, the comparison of every component's live objects (drift)
// included. Target: under 5 s.
func BenchmarkInstallConverged(b *testing.B) {
	_, src, cl := installedPlatform(b)
	ctx := context.Background()
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

// BenchmarkInstallRepairsOneComponent runs `onprem install` of the whole
// platform after one Deployment's image was changed by hand: only that
// component is applied again (and waited for), the others are compared and
// left alone.
func BenchmarkInstallRepairsOneComponent(b *testing.B) {
	c, src, cl := installedPlatform(b)
	ctx := context.Background()
	deps := c.Client.AppsV1().Deployments("onprem")
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		d, err := deps.Get(ctx, "gitops-ui", metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		d.Spec.Template.Spec.Containers[0].Image = fmt.Sprintf("quay.io/codefresh/gitops-ui:9.9.%d-nope", i)
		if _, err := deps.Update(ctx, d, metav1.UpdateOptions{FieldManager: "kubectl-set"}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		res, err := (&Install{Source: src, Cluster: cl, Timeout: 3 * time.Minute}).Run(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, comp := range res.Components {
			if (comp.Name == "gitops-ui") != (comp.Action == apply.Repaired) || (comp.Action != apply.Repaired && comp.Action != apply.Unchanged) {
				b.Fatalf("%s: %s %q", comp.Name, comp.Action, comp.Repaired)
			}
		}
	}
}

// BenchmarkSupportBundle writes the support bundle of the whole platform
// on the integration ring (its pods have no logs: the kind e2e measures
// the real figure, logs included, in its timing file). Targets: under
// 20 s and 10 MB.
func BenchmarkSupportBundle(b *testing.B) {
	_, src, cl := installedPlatform(b)
	ctx := context.Background()
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
