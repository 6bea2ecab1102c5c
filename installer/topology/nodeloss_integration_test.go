//go:build linux

package topology_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/kube"
)

// TestNodeLoss installs the platform with spec.availability high on a real
// API server with three nodes, once, and then, side by side, loses the
// node of each replicated database's leader under writes: PostgreSQL's
// primary (Patroni), the RabbitMQ node that leads the platform's quorum
// queue and Redis's master (Sentinel). Each database's members are the real servers (Debian's), run as
// their pods would run them.
func TestNodeLoss(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs database members in mount and PID namespaces of their own, which needs root")
	}
	c := testcluster.Start(t, testcluster.WithNodes(3))
	ctx := context.Background()
	cfg := filepath.Join(t.TempDir(), "onprem.yaml")
	body := "apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n  version: 2.8.0\n  domain: ci.example.com\n" +
		"  availability: high\n  modules:\n    pipelines: {enabled: false}\n"
	if err := os.WriteFile(cfg, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := kube.Options{Kubeconfig: c.Kubeconfig}
	// onprem's own client (no warning about the Endpoints it reads).
	kc, err := kube.Connect(ctx, cl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (&action.Install{Source: action.Source{ConfigPath: cfg, Lookup: envconfig.MapLookuper(nil)}, Cluster: cl, Timeout: 3 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	// status names both replicated databases (kwok reports every pod
	// ready: the members' own processes start below).
	st, err := (&action.Status{Target: action.Target{Cluster: cl}}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	engines := map[string]string{}
	for _, db := range st.Databases {
		engines[db.Engine] = db.Summary()
	}
	if engines["rabbitmq"] != "3 of 3 nodes ready" || engines["postgresql"] == "" {
		t.Errorf("status databases %v: want PostgreSQL's members and RabbitMQ's 3 of 3 nodes", engines)
	}
	t.Run("postgresql", func(t *testing.T) {
		t.Parallel()
		patroniFailover(t, c, kc)
	})
	t.Run("rabbitmq", func(t *testing.T) {
		t.Parallel()
		rabbitMQNodeLoss(t, c)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		redisFailover(t, c)
	})
}
