package action

import (
	"context"
	"errors"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/preflight"
)

// A failing check stops the install before anything is touched; a skipped
// check is recorded in the state's history.
func TestInstallRunsPreflightFirst(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	ctx := context.Background()
	src, cl := clusterConfig(t, c, smallPlatform+"  ingress: {mode: existing, className: missing}\n")
	res, err := (&Install{Source: src, Cluster: cl}).Run(ctx)
	var pf *PreflightFailedError
	if !errors.As(err, &pf) {
		t.Fatalf("err = %v", err)
	}
	if res == nil || res.Preflight == nil || !res.Preflight.Failed() {
		t.Fatalf("no failed report in the result: %+v", res)
	}
	if _, err := c.Client.CoreV1().Namespaces().Get(ctx, "onprem", metav1.GetOptions{}); err == nil {
		t.Error("the namespace was created although preflight failed")
	}

	src, cl = clusterConfig(t, c, smallPlatform)
	if _, err := (&Install{Source: src, Cluster: cl, SkipChecks: []string{"clock.skew"}}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := state.NewStore(c.Client, "onprem").Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if op := st.History[len(st.History)-1]; !slices.Contains(op.SkippedChecks, "clock.skew") {
		t.Errorf("skipped checks not recorded: %+v", op)
	}
	var ie *InputError
	if _, err := (&Install{Source: src, Cluster: cl, SkipChecks: []string{"no.such.check"}}).Run(ctx); !errors.As(err, &ie) {
		t.Errorf("unknown --skip-check: %v", err)
	}
}

// BenchmarkPreflight runs the whole suite against the integration ring with
// everything passing. Target: under 5 s.
func BenchmarkPreflight(b *testing.B) {
	c := testcluster.Start(b)
	src, _ := clusterConfig(b, c, "  version: 2.8.0\n  domain: ci.example.com\n")
	p := &Preflight{Source: src, Cluster: kube.Options{Kubeconfig: c.Kubeconfig}}
	b.ResetTimer()
	for b.Loop() {
		rep, err := p.Run(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range rep.Findings {
			if f.Result == preflight.Fail {
				b.Fatalf("%s: %s", f.ID, f.Message)
			}
		}
	}
}
