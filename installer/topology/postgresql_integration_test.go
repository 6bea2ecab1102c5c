//go:build linux

package topology_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/topology"
)

// patroniFailover, on the platform installed with spec.availability high
// on a real API server, runs the real Patroni (Debian's) and PostgreSQL
// as the three pods of the rendered StatefulSet would: the container's own
// command and environment, its ConfigMap and Secrets mounted where the pod
// mounts them, the ServiceAccount's token, and the Role the chart grants.
// The Kubernetes API is Patroni's consensus store, as in the cluster. Then
// the primary is killed at once (a lost node) while a client writes through
// the address the Service postgresql would send it to (the leader lock's
// Endpoints): a replica takes over, every commit acknowledged before or
// during the kill is read back, topology names the new primary, and the
// killed member comes back as a replica when its "node" returns.
//
// What differs from the pods: each member listens on an address of its own
// on this machine (PATRONI_POSTGRESQL_LISTEN and PATRONI_RESTAPI_LISTEN
// override the chart's 0.0.0.0), the kubelet is kwok (the pods' objects
// exist, their containers are these processes) and PostgreSQL is Debian's.
func patroniFailover(t *testing.T, c *testcluster.Cluster, kc *kube.Cluster) {
	ctx := context.Background()
	const ns = "onprem"
	sts, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, topology.PostgreSQL, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != 3 {
		t.Fatalf("StatefulSet postgresql has %d replicas, want 3", *sts.Spec.Replicas)
	}
	net3 := rand.IntN(200) + 20 // this run's addresses, apart from a parallel run's
	ips := make([]string, 3)
	members := make([]*testservers.Pod, 3)
	for i := range members {
		ips[i] = fmt.Sprintf("10.252.%d.%d", net3, i+1)
		testservers.AddAddress(t, ips[i])
		spec := patroniPod(t, c, ns, fmt.Sprintf("postgresql-%d", i), ips[i])
		members[i] = testservers.StartPod(t, spec)
		// OrderedReady: the next member starts once this one runs.
		if i == 0 {
			waitFor(t, members, 3*time.Minute, "postgresql-0 the primary", func() error {
				return primaryIs(ctx, kc.Client, ns, "postgresql-0")
			})
		}
	}
	var top *topology.Topology
	waitFor(t, members, 3*time.Minute, "three members, two replicas streaming, one synchronous", func() error {
		top, err = topology.PostgreSQLCluster(ctx, kc.Client, ns)
		if err != nil {
			return err
		}
		replicas := 0
		for _, m := range top.Members {
			if m.Role == topology.RoleReplica && m.State == "running" {
				replicas++
			}
		}
		if replicas != 2 || !top.Quorum {
			return fmt.Errorf("topology: %s", top.Summary())
		}
		return nil
	})
	t.Logf("before the loss: %s", top.Summary())
	if top.Primary != "postgresql-0" || !top.Healthy() {
		t.Fatalf("topology = %+v", top)
	}
	probeMembers(t, sts, ips)

	admin := secretData(t, c.Client, ns, "onprem-postgresql-admin")
	dsn := func(ip string) string {
		return fmt.Sprintf("postgres://%s:%s@%s/postgres?sslmode=disable&connect_timeout=2",
			url.QueryEscape(string(admin["username"])), url.QueryEscape(string(admin["password"])), net.JoinHostPort(ip, "5432"))
	}
	// The address the Service postgresql sends a client to: the leader
	// lock's Endpoints, which Patroni keeps on the primary.
	serviceAddress := func() (string, error) {
		ep, err := kc.Client.CoreV1().Endpoints(ns).Get(ctx, topology.PostgreSQL, metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				return a.IP, nil
			}
		}
		return "", fmt.Errorf("Endpoints %s has no address", topology.PostgreSQL)
	}
	// onPrimary runs do on a new connection to the primary (one per call,
	// as a service's pool reconnects), bounded by 5 s.
	onPrimary := func(do func(ctx context.Context, conn *pgx.Conn) error) error {
		ip, err := serviceAddress()
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, dsn(ip))
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return do(cctx, conn)
	}
	exec := func(sql string, args ...any) error {
		return onPrimary(func(ctx context.Context, conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, sql, args...)
			return err
		})
	}
	if err := exec("CREATE TABLE records (id int PRIMARY KEY, at timestamptz NOT NULL DEFAULT now())"); err != nil {
		t.Fatal(err)
	}

	// Before the loss, the two states a member's return must survive,
	// both seen on kind when a rejoin failed:
	//   - an admin rotation (`onprem rotate credentials --admin`): the
	//     admin's password changed in the database while every member's
	//     Patroni still holds the one its container started with;
	//   - a cluster installed before the rewind role: the role is gone, so
	//     the primary after the failover must create it (on-role.sh).
	// The old primary then rejoins below only if Patroni checks the new
	// leader and rewinds as the rewind role, which the primary re-created.
	rotated := "rotated-" + strconv.FormatUint(rand.Uint64(), 36)
	if err := exec("SET log_statement = 'none'; ALTER ROLE CURRENT_USER WITH PASSWORD '" + rotated + "'"); err != nil {
		t.Fatalf("changing the admin's password as a rotation does: %v", err)
	}
	admin["password"] = []byte(rotated)
	rewind := secretData(t, c.Client, ns, "onprem-postgresql-rewind")
	if err := exec(fmt.Sprintf("DROP OWNED BY %q; DROP ROLE %q", rewind["username"], rewind["username"])); err != nil {
		t.Fatalf("dropping the rewind role (a cluster from before it): %v", err)
	}

	// A client writes records, one connection each (as a service's pool
	// reconnects), noting every commit the server acknowledged.
	w := startWriter(func(id int) error { return exec("INSERT INTO records (id) VALUES ($1)", id) })
	ackedNow := func() int {
		n, _ := w.Acked()
		return n
	}
	waitFor(t, members, time.Minute, "30 records written", func() error {
		if n := ackedNow(); n < 30 {
			return fmt.Errorf("%d records", n)
		}
		return nil
	})

	sync0 := ""
	for _, m := range top.Members {
		if m.Synchronous {
			sync0 = m.Name
		}
	}
	killed := time.Now()
	members[0].Kill()
	before := ackedNow()
	var newPrimary string
	waitFor(t, members[1:], 2*time.Minute, "a new primary that takes writes", func() error {
		top, err = topology.PostgreSQLCluster(ctx, kc.Client, ns)
		if err != nil {
			return err
		}
		if top.Primary == "" || top.Primary == "postgresql-0" {
			return fmt.Errorf("topology: %s", top.Summary())
		}
		if n := ackedNow(); n <= before {
			return fmt.Errorf("no write acknowledged since the kill (%d)", n)
		}
		newPrimary = top.Primary
		return nil
	})
	serving := time.Since(killed)
	want, failures, lastFail := w.Stop()
	t.Logf("primary postgresql-0 killed: %s promoted (the synchronous standby was %s); writes acknowledged again after %s; %d writes failed meanwhile, the last %s after the kill",
		newPrimary, sync0, serving.Round(100*time.Millisecond), failures, lastFail.Sub(killed).Round(100*time.Millisecond))
	if newPrimary != sync0 {
		t.Errorf("promoted %s, but the synchronous standby was %s: only it is sure to have every commit", newPrimary, sync0)
	}

	// Every acknowledged commit is on the primary, whichever it is now (on
	// a machine this loaded, a new primary that cannot renew its lock in
	// time hands it on again: that costs time, never a commit).
	var ip string
	waitFor(t, members[1:], time.Minute, "the Service postgresql to have an address", func() error {
		ip, err = serviceAddress()
		return err
	})
	if top, err := topology.PostgreSQLCluster(ctx, kc.Client, ns); err == nil && top.Primary != newPrimary {
		t.Logf("the primary moved again, to %s (%s)", top.Primary, top.Summary())
	}
	conn, err := pgx.Connect(ctx, dsn(ip))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := conn.Query(ctx, "SELECT id FROM records")
	if err != nil {
		t.Fatal(err)
	}
	have := map[int]bool{}
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		have[id] = true
	}
	conn.Close(ctx)
	if lost := missing(want, have); len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged writes are not on the new primary: %v", len(lost), len(want), lost)
	}
	t.Logf("all %d acknowledged writes read back from %s", len(want), newPrimary)

	// The node returns: the old primary rejoins as a replica of the new one.
	members[0].Start()
	// Back as a replica means following the primary, not only saying so:
	// Patroni reports a member "running" as a replica while its PostgreSQL
	// cannot stream from a primary whose history forked from its own (what
	// a failed rewind leaves). A record written on the primary now must
	// reach it.
	marker := 1 << 30
	backAsReplica := func(name string) {
		t.Helper()
		var i int
		if _, err := fmt.Sscanf(name, topology.PostgreSQL+"-%d", &i); err != nil || i < 0 || i >= len(ips) {
			t.Fatalf("%q is not one of the members", name)
		}
		marker++
		id := marker
		waitFor(t, members, 3*time.Minute, name+" back as a replica, with the primary's newest record", func() error {
			top, err = topology.PostgreSQLCluster(ctx, kc.Client, ns)
			if err != nil {
				return err
			}
			if !slices.ContainsFunc(top.Members, func(m topology.Member) bool {
				return m.Name == name && m.Role == topology.RoleReplica && m.State == "running" && top.Primary != "" && top.Quorum
			}) {
				return fmt.Errorf("topology: %s", top.Summary())
			}
			if err := exec("INSERT INTO records (id) VALUES ($1) ON CONFLICT DO NOTHING", id); err != nil {
				return fmt.Errorf("writing record %d on the primary: %w", id, err)
			}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			conn, err := pgx.Connect(cctx, dsn(ips[i]))
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			defer conn.Close(ctx)
			var n int
			if err := conn.QueryRow(cctx, "SELECT count(*) FROM records WHERE id = $1", id).Scan(&n); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if n != 1 {
				return fmt.Errorf("%s has not received record %d written on the primary %s (topology: %s)", name, id, top.Primary, top.Summary())
			}
			return nil
		})
	}
	backAsReplica("postgresql-0")
	t.Logf("after the return: %s", top.Summary())
	var grants string
	waitFor(t, members, time.Minute, "the rewind role re-created on the primary with pg_rewind's functions", func() error {
		return onPrimary(func(cctx context.Context, conn *pgx.Conn) error {
			return conn.QueryRow(cctx, `SELECT string_agg(f || '=' || has_function_privilege($1, f, 'EXECUTE'), ' ' ORDER BY f) FROM unnest(ARRAY[
			'pg_catalog.pg_ls_dir(text, boolean, boolean)', 'pg_catalog.pg_stat_file(text, boolean)',
			'pg_catalog.pg_read_binary_file(text)', 'pg_catalog.pg_read_binary_file(text, bigint, bigint, boolean)']) AS f`,
				string(rewind["username"])).Scan(&grants)
		})
	})
	if strings.Contains(grants, "=false") {
		t.Errorf("the rewind role lacks pg_rewind's functions: %s", grants)
	}

	// A primary whose Patroni stalls (an overloaded node, a partition)
	// while its PostgreSQL runs on, the failure seen on kind: past ttl
	// the others elect a new primary; when its loop goes on, Patroni
	// demotes its PostgreSQL and must rejoin as a replica, which needs a
	// login to the new leader (the rewind check). Its superuser password
	// is still the one from before the rotation above.
	stalled := top.Primary
	var si int
	if _, err := fmt.Sscanf(stalled, topology.PostgreSQL+"-%d", &si); err != nil || si < 0 || si >= len(members) {
		t.Fatalf("the primary %q is not one of the members", stalled)
	}
	paused := time.Now()
	members[si].Pause("patroni")
	waitFor(t, members, 2*time.Minute, "a primary other than the stalled "+stalled, func() error {
		top, err = topology.PostgreSQLCluster(ctx, kc.Client, ns)
		if err != nil {
			return err
		}
		if top.Primary == "" || top.Primary == stalled {
			return fmt.Errorf("topology: %s", top.Summary())
		}
		return nil
	})
	t.Logf("%s's Patroni stalled: %s took over after %s", stalled, top.Primary, time.Since(paused).Round(100*time.Millisecond))
	members[si].Resume()
	backAsReplica(stalled)
	t.Logf("after %s's Patroni went on: %s", stalled, top.Summary())
	if !strings.HasPrefix(top.Summary(), "primary "+top.Primary+"; ") {
		t.Errorf("summary %q does not name the primary first", top.Summary())
	}
}

// probeMembers asks each running member's real Patroni what the kubelet
// asks with the rendered container's probes: each must answer 200. The
// startup probe must be the liveness probe's question: the kubelet checks
// liveness only once the startup probe passed, so a startup probe that
// waits for readiness would let a Patroni whose loop stopped while its
// PostgreSQL started stay unnoticed for as long as the probe waits.
func probeMembers(t *testing.T, sts *appsv1.StatefulSet, ips []string) {
	t.Helper()
	var c *corev1.Container
	for i := range sts.Spec.Template.Spec.Containers {
		if sts.Spec.Template.Spec.Containers[i].Name == topology.PostgreSQL {
			c = &sts.Spec.Template.Spec.Containers[i]
		}
	}
	if c == nil {
		t.Fatalf("StatefulSet %s has no container %s", sts.Name, topology.PostgreSQL)
	}
	probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "readiness": c.ReadinessProbe, "liveness": c.LivenessProbe}
	for kind, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Fatalf("container %s: the %s probe is %+v, want an HTTP GET of Patroni's REST API", c.Name, kind, p)
		}
	}
	if c.StartupProbe.HTTPGet.Path != c.LivenessProbe.HTTPGet.Path {
		t.Errorf("container %s: the startup probe asks %s, the liveness probe %s: until the startup probe passes a stopped Patroni loop is not noticed",
			c.Name, c.StartupProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path)
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, ip := range ips {
		for kind, p := range probes {
			port := p.HTTPGet.Port.IntValue()
			for _, cp := range c.Ports {
				if p.HTTPGet.Port.StrVal != "" && cp.Name == p.HTTPGet.Port.StrVal {
					port = int(cp.ContainerPort)
				}
			}
			u := "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + p.HTTPGet.Path
			resp, err := client.Get(u)
			if err != nil {
				t.Fatalf("the %s probe of the member at %s: %v", kind, ip, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("the %s probe of the member at %s (GET %s): %s, want 200", kind, ip, u, resp.Status)
			}
		}
	}
}

func primaryIs(ctx context.Context, c kubernetes.Interface, ns, want string) error {
	top, err := topology.PostgreSQLCluster(ctx, c, ns)
	if err != nil {
		return err
	}
	if top.Primary != want {
		return fmt.Errorf("topology: %s", top.Summary())
	}
	return nil
}

// patroniPod is how pod name of the StatefulSet postgresql runs on this
// machine at ip: Debian's PostgreSQL programs on PATH, and the member's own
// address for Patroni's listeners (the chart's 0.0.0.0 would be shared).
func patroniPod(t *testing.T, c *testcluster.Cluster, ns, name, ip string) testservers.PodSpec {
	t.Helper()
	spec := podSpec(t, c, ns, topology.PostgreSQL, name, ip)
	spec.Env["PATH"] = testservers.PostgreSQLBin(t) + ":" + spec.Env["PATH"]
	spec.Env["PATRONI_POSTGRESQL_LISTEN"] = ip + ":5432"
	spec.Env["PATRONI_RESTAPI_LISTEN"] = ip + ":8008"
	spec.Packages = map[string]string{"patroni": "/usr/bin/patroni"}
	return spec
}
