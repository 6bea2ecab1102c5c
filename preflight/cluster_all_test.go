package preflight

import (
	"context"
	"regexp"
	"testing"

	"onprem.dev/onprem/e2e/testcluster"
)

func TestClusterChecksHaveStableIDsAndTitles(t *testing.T) {
	idRE := regexp.MustCompile(`^[a-z][a-z0-9-]*(\.[a-z][a-z0-9-]*)*$`)
	seen := map[string]bool{}
	for _, c := range clusterChecks() {
		if !idRE.MatchString(c.ID) || seen[c.ID] || c.Title == "" || c.Run == nil || (c.Severity != Blocking && c.Severity != Advisory) {
			t.Errorf("check %+v", c)
		}
		seen[c.ID] = true
	}
	if len(seen) != 12 {
		t.Errorf("%d cluster checks", len(seen))
	}
}

// Every cluster check passes on a fresh harness cluster, run together by
// the framework; and none crashes without a cluster.
func TestClusterChecksPassOnAFreshCluster(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	env := clusterEnv(t, c)(clusterBaseSpec)
	rep, err := Run(context.Background(), env, clusterChecks(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		t.Logf("%-22s %-5s %s (%s)", f.ID, f.Result, f.Message, f.Elapsed)
		if f.Result != Pass {
			t.Errorf("%s: %s: %s", f.ID, f.Result, f.Message)
		}
	}

	bare := clusterLoadEnv(t, clusterBaseSpec)
	rep, err = Run(context.Background(), bare, clusterChecks(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range rep.Findings {
		if f.Result == Pass || f.Remediation == "" || regexp.MustCompile("crashed").MatchString(f.Message) {
			t.Errorf("without a cluster %s: %s: %s", f.ID, f.Result, f.Message)
		}
	}
}
