package preflight

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/state"
)

func TestInstallationExisting(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	envFor := clusterEnv(t, c)
	ctx := context.Background()
	ns := "onprem"
	store := state.NewStore(c.Client, ns)
	spec := func(version string) string { return "  version: " + version + "\n  domain: ci.example.com\n" }

	t.Run("fresh install", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, installationExistingCheck(), envFor(spec("2.8.0"))), Pass, "no installation in namespace onprem: a fresh install of 2.8.0")
	})

	clusterEnsureNamespace(t, c, ns)
	st := &state.State{Installation: "onprem", Version: "2.6.3"}
	if err := store.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	t.Run("upgrade through a required release", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, installationExistingCheck(), envFor(spec("2.8.0"))), Pass, "the upgrade to 2.8.0 goes 2.6.3 → 2.7.0 → 2.8.0")
	})
	t.Run("re-run", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, installationExistingCheck(), envFor(spec("2.6.3"))), Pass, "platform 2.6.3 is installed: this is a re-run")
	})

	st.Version = "2.8.0"
	if err := store.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	t.Run("downgrade", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, installationExistingCheck(), envFor(spec("2.7.1"))), Fail,
			"platform 2.8.0 is installed and the target 2.7.1 is older: onprem does not downgrade", "set spec.version to 2.8.0", "onprem rollback")
	})

	st.Version = "2.5.0"
	if err := store.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	t.Run("installed version unknown to this onprem", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, installationExistingCheck(), envFor(spec("2.8.0"))), Fail, `installed platform version "2.5.0" has no release manifest`)
	})

	// An upgrade whose onprem was killed: still running, lock expired.
	st.Version = "2.7.0"
	if err := store.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := store.Begin(ctx, st, state.Operation{Kind: state.KindUpgrade, Version: "2.7.1", Host: "ops-laptop"}); err != nil {
		t.Fatal(err)
	}
	t.Run("interrupted operation", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, installationExistingCheck(), envFor(spec("2.7.1"))), Warn,
			"a previous onprem was interrupted: its upgrade of 2.7.1", "ops-laptop", "nobody holds the lock", "takes the lock over")
	})
	holder, secs := "alice@ops-laptop (onprem upgrade)", int32(30)
	old := metav1.NewMicroTime(time.Now().Add(-time.Hour))
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: state.LeaseName},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &old, RenewTime: &old}}
	lease, err := c.Client.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("interrupted operation with an expired lease", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, installationExistingCheck(), envFor(spec("2.7.1"))), Warn, "a previous onprem was interrupted")
	})
	now := metav1.NewMicroTime(time.Now())
	lease.Spec.RenewTime = &now
	if _, err := c.Client.CoordinationV1().Leases(ns).Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("operation running now", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, installationExistingCheck(), envFor(spec("2.7.1"))), Warn,
			"another onprem is working on this installation now", "alice@ops-laptop", "wait for it")
	})
	t.Run("downgrade and a running operation: the failure wins", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, installationExistingCheck(), envFor(spec("2.6.3"))), Fail, "does not downgrade", "another onprem")
	})
}
