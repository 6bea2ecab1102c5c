//go:build linux

package topology_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/podexec"
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
	// status names the replicated databases (kwok reports every pod
	// ready: the members' own processes start below). No ring has a real
	// mongod and kwok pods cannot be exec'ed into: MongoDB's members
	// answer replSetGetStatus through rsAnswer, in the documented form.
	ex := &rsAnswer{}
	st, err := (&action.Status{Target: action.Target{Cluster: cl}, Exec: ex}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	engines := map[string]string{}
	for _, db := range st.Databases {
		engines[db.Engine] = db.Summary()
	}
	if engines["rabbitmq"] != "3 of 3 nodes ready" || engines["postgresql"] == "" ||
		engines["mongodb"] != "primary mongodb-1; mongodb-0 replica, lag 0 s; mongodb-2 replica, lag 1.5 s" {
		t.Errorf("status databases %v: want PostgreSQL's members, RabbitMQ's 3 of 3 nodes and MongoDB's primary and secondaries", engines)
	}
	if len(ex.asked) != 1 || ex.asked[0].Pod != "mongodb-0" || ex.asked[0].Container != "mongodb" {
		t.Errorf("asked MongoDB's members %v, want the first ready member's mongodb container only", ex.asked)
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

// rsAnswer answers the status script as mongosh would in a member of a
// healthy set whose primary is mongodb-1 (replSetGetStatus in relaxed
// Extended JSON).
type rsAnswer struct{ asked []podexec.Target }

func (r *rsAnswer) Exec(_ context.Context, t podexec.Target, cmd []string, _ io.Reader, stdout io.Writer) error {
	r.asked = append(r.asked, t)
	if !strings.Contains(strings.Join(cmd, " "), "replSetGetStatus") {
		return fmt.Errorf("unexpected command %q", cmd)
	}
	member := func(i int, state string, optime string) string {
		code := map[string]int{"PRIMARY": 1, "SECONDARY": 2}[state]
		return fmt.Sprintf(`{"_id":%d,"name":"mongodb-%d.mongodb-headless.%s.svc:27017","health":1,"state":%d,"stateStr":%q,"uptime":100,`+
			`"optime":{"ts":{"$timestamp":{"t":1764316800,"i":1}},"t":1},"optimeDate":{"$date":%q}%s}`,
			i, i, t.Namespace, code, state, optime, map[bool]string{true: `,"self":true`}[i == 0])
	}
	_, err := fmt.Fprintf(stdout, `{"set":"onprem","date":{"$date":"2026-11-28T08:00:02.000Z"},"myState":2,"majorityVoteCount":2,"votingMembersCount":3,"members":[%s,%s,%s],"ok":1}`+"\n",
		member(0, "SECONDARY", "2026-11-28T08:00:00.000Z"), member(1, "PRIMARY", "2026-11-28T08:00:00.000Z"), member(2, "SECONDARY", "2026-11-28T07:59:58.500Z"))
	return err
}
