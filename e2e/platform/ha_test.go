//go:build linux

package platform

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"onprem.dev/onprem/e2e/kindcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/preflight"
)

// The high-availability step runs on the disaster-recovery cluster: a
// control plane and haWorkers workers, where a lost node is NotReady after
// haNodeGrace (kindcluster.WithNodeGracePeriod; Kubernetes' default of
// 50 s alone would keep a dead node's pods in their Services' endpoints
// longer than the 30 s the platform has to serve again).
const (
	haWorkers   = 3
	haNodeGrace = 16 * time.Second
	// haServeGoal is the goal: the platform serves again within
	// it after a node is lost. Reported, not asserted (the test asserts
	// that it serves again at all, and that no acknowledged write is
	// lost).
	haServeGoal = 30 * time.Second
)

// haMongoSecret is the connection Secret of the external MongoDB the HA
// platform uses: the ring has no MongoDB server with replica sets (its
// stand-in, FerretDB, has none), so MongoDB is the operator's own, outside
// the cluster, as docs/availability.md allows.
const haMongoSecret = "e2e-mongodb"

// haRedisKey is the key written to the single Redis before the move to
// high availability and read back after it.
const haRedisKey = "e2e-moved-to-high"

// TestHighAvailability is the kind ring's test of spec.availability high
// (highAvailability), on a cluster of its own: a control plane and
// haWorkers workers. It is not part of 'make e2e', which CI runs: on CI's
// 2-core machine it took longer than CI allows beside the rest (more than
// 50 minutes alone, its rollouts slower than their timeouts), so it runs
// with 'make e2e-ha' until the machine or the test is made to fit (see
// docs/testing.md).
func TestHighAvailability(t *testing.T) {
	if os.Getenv(kindcluster.SkipEnv) == "1" {
		t.Skipf("%s=1: the kind end-to-end test is skipped", kindcluster.SkipEnv)
	}
	ctx := context.Background()
	e := &env{t: t, dir: t.TempDir(), timing: &timing{}}
	t0 := time.Now()
	e.logStep("start", 0, "TestHighAvailability")
	set := e.build(ctx)
	e.step("create the kind cluster with "+fmt.Sprint(haWorkers)+" workers", func() {
		e.cluster = kindcluster.Start(t, kindcluster.WithStartTimeout(10*time.Minute),
			kindcluster.WithWorkers(haWorkers), kindcluster.WithNodeGracePeriod(haNodeGrace))
		e.kubeconfig = e.cluster.Kubeconfig
	})
	e.step("start a registry the nodes can reach", func() {
		e.startRegistry(ctx, e.cluster.Name+"-control-plane")
		// The external MongoDB's Secret goes in the platform's
		// namespace before the install.
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
		if _, err := e.cluster.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})
	var bundles map[string]string
	e.step("bundle create and bundle push", func() { bundles = e.makeBundles(set, []string{last}) })
	e.highAvailability(ctx, last, bundles[last])
	e.timing.total = time.Since(t0)
	e.timing.steps = e.steps
	path, text := e.timing.write(t, "high-availability-timing.txt")
	t.Logf("timing figures (%s):\n%s", path, text)
}

// highAvailability installs version afresh on the cluster's three workers
// (after the single platform's uninstall), with one server per database,
// writes records, and moves it to spec.availability high with `onprem
// install` (every record read back after the move); rotates every
// credential under traffic; then kills, one at a time and under traffic,
// the node that holds the PostgreSQL primary, the one that holds the
// Redis master and the one that holds the RabbitMQ queue's leader: each
// time the platform serves again, every write
// acknowledged before and during the loss is read back, and the lost
// member rejoins once its node starts again. Then it upgrades the
// platform to a patch release while every worker is drained in turn
// (upgradeWhileDraining).
func (e *env) highAvailability(ctx context.Context, version, bundle string) {
	t := e.t
	records := map[string]string{}
	e.step("high availability: "+version+" installed afresh with one server per database (MongoDB external), records written", func() {
		hostIP, err := e.cluster.HostIP(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mongo := testservers.MongoDBAt(t, hostIP, "e2e-admin", "e2e-admin-password")
		host, port, err := net.SplitHostPort(mongo)
		if err != nil {
			t.Fatal(err)
		}
		e.putSecret(ctx, haMongoSecret, map[string]string{"host": host, "port": port, "username": "e2e-admin", "password": "e2e-admin-password"})
		e.haConfig = e.writeConfig("onprem-ha.yaml", version, "")
		e.appendConfig(e.haConfig, fmt.Sprintf(`  databases:
    mongodb:
      mode: external
      external: {secretName: %s, cidrs: ["%s/32"], port: %s}
`, haMongoSecret, hostIP, port))
		var res action.InstallResult
		e.onpremJSON(&res, "install", "-c", e.haConfig, "--bundle", bundle, "--kubeconfig", e.kubeconfig, "--timeout", "8m")
		if res.Version != version {
			t.Fatalf("installed version %q, want %s", res.Version, version)
		}
		t.Logf("single: installed in %s", res.Elapsed.Round(time.Second))
		e.ingressClient(ctx)
		e.allowAPIServerProxy(ctx)
		for i := range 5 {
			key := fmt.Sprintf("before-the-move-%d", i)
			records[key] = fmt.Sprintf("written to the single servers, record %d", i)
			e.putRecord(ctx, key, records[key])
		}
		if got := strings.TrimSpace(e.redis(ctx, "SET", haRedisKey, "kept by the move")); got != "OK" {
			t.Fatalf("redis SET: %q", got)
		}
	})
	e.step("high availability: single → high by onprem install: diff names the moves first; every record and the Redis key after", func() {
		e.appendConfig(e.haConfig, "  availability: high\n")
		var plan struct {
			Moves []string `json:"availabilityMoves"`
		}
		e.onpremJSON(&plan, "diff", "-c", e.haConfig, "--bundle", bundle, "--kubeconfig", e.kubeconfig)
		if len(plan.Moves) != 3 {
			t.Fatalf("diff names the moves %q, want PostgreSQL's, RabbitMQ's and Redis's (MongoDB is external)", plan.Moves)
		}
		t.Logf("diff: %s", strings.Join(plan.Moves, "; "))
		var rep struct {
			Findings []struct{ ID, Result, Message string }
		}
		e.onpremJSON(&rep, "preflight", "-c", e.haConfig, "--bundle", bundle, "--kubeconfig", e.kubeconfig)
		for _, f := range rep.Findings {
			if strings.Contains(f.ID, "availability") || strings.Contains(f.ID, "nodes") {
				t.Logf("preflight %s: %s: %s", f.ID, f.Result, f.Message)
			}
		}
		// The move's backup goes to the test's folder, not the home's.
		var res action.InstallResult
		e.onpremJSON(&res, "install", "-c", e.haConfig, "--bundle", bundle, "--kubeconfig", e.kubeconfig, "--timeout", "12m",
			"--move-dir", filepath.Join(e.dir, "availability-moves"))
		if res.Version != version {
			t.Fatalf("installed version %q, want %s", res.Version, version)
		}
		if res.Move == nil || strings.Join(res.Move.Databases, ",") != "postgresql,rabbitmq,redis" {
			t.Fatalf("install moved %+v, want postgresql, rabbitmq and redis", res.Move)
		}
		t.Logf("high availability: moved %v in %s (the services stopped %s)", res.Move.Databases, res.Elapsed.Round(time.Second), res.Move.Downtime.Round(time.Second))
		e.timing.move = res.Move.Downtime
		e.checkRecords(ctx, records)
		if got := strings.TrimSpace(e.redis(ctx, "GET", haRedisKey)); got != "kept by the move" {
			t.Fatalf("redis key %s after the move: %q", haRedisKey, got)
		}
	})
	e.allReady(version)
	e.step("high availability: every database member on a node of its own", func() {
		for _, db := range []string{"postgresql", "redis", "rabbitmq"} {
			nodes := map[string]string{}
			for _, p := range e.members(ctx, db) {
				if other, ok := nodes[p.Spec.NodeName]; ok {
					t.Fatalf("%s: %s and %s both on node %s", db, other, p.Name, p.Spec.NodeName)
				}
				nodes[p.Spec.NodeName] = p.Name
			}
			if len(nodes) != haWorkers {
				t.Fatalf("%s: %d members on nodes %v, want %d", db, len(nodes), nodes, haWorkers)
			}
		}
		e.checkService("/api", "pipelines-api", version, "mongodb", "redis", "rabbitmq")
		e.checkQuorumQueue(ctx)
	})
	e.step("high availability: NetworkPolicies: the members' peer ports answer only their peers, their client ports only their clients", func() {
		e.replicatedNetworkPolicies(ctx)
	})
	e.step("high availability: every credential rotated under traffic: no request fails, each old password refused on every member", func() {
		e.rotateReplicated(ctx, records)
	})
	e.step("high availability: a backup of the replicated platform, after the rotation", func() {
		e.backUpReplicated()
	})
	e.step("high availability: the PostgreSQL primary's node lost under traffic", func() {
		e.loseNode(ctx, "postgresql")
	})
	e.step("high availability: the Redis master's node lost under traffic", func() {
		e.loseNode(ctx, "redis")
	})
	e.step("high availability: the node of the RabbitMQ queue's leader lost under traffic", func() {
		e.loseNode(ctx, "rabbitmq")
	})
	var patch, patchBundle string
	e.step("high availability: the bundle of a patch release of "+version+", which no onprem embeds", func() {
		patch, patchBundle = e.patchBundle(ctx, version)
	})
	e.step("high availability: upgrade "+version+" → "+patch+" while every worker is drained in turn, under traffic", func() {
		e.upgradeWhileDraining(ctx, patch, patchBundle)
	})
	e.allReady(patch)
	e.step("high availability: a support bundle after the failovers: no secret in it (the replication and Sentinel ones included), analyzed offline", func() {
		e.supportBundle(ctx, patchBundle, false)
	})
}

// members returns the pods of a database's StatefulSet.
func (e *env) members(ctx context.Context, db string) []corev1.Pod {
	e.t.Helper()
	out, err := e.membersOrErr(ctx, db)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// membersOrErr is members for the pollers that run beside a step (in
// goroutines, where a failed list must not fail the test: one in flight
// when the step ends and cancels its context did, in CI).
func (e *env) membersOrErr(ctx context.Context, db string) ([]corev1.Pod, error) {
	l, err := e.cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + db})
	if err != nil {
		return nil, fmt.Errorf("listing %s's pods: %w", db, err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if strings.HasPrefix(p.Name, db+"-") && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

// leader returns the member a database's Service sends clients to (for
// PostgreSQL and Redis with high availability, Patroni and the keepers
// point the Service's Endpoints at the primary or master, which the
// cluster mirrors into its EndpointSlices) and its node.
func (e *env) leader(ctx context.Context, db string) (pod, node string) {
	e.t.Helper()
	pod, node, addrs := e.leaderOrNone(ctx, db)
	if pod == "" || len(addrs) != 1 {
		e.t.Fatalf("%s's Service sends clients to %v, want the address of one member, its primary", db, addrs)
	}
	return pod, node
}

// leaderOrNone is leader without failing: "" while the Service's
// endpoints name no member (during a failover), with the addresses they
// name.
func (e *env) leaderOrNone(ctx context.Context, db string) (pod, node string, addrs []string) {
	l, err := e.cluster.Client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=" + db})
	if err != nil {
		return "", "", nil
	}
	for _, s := range l.Items {
		for _, ep := range s.Endpoints {
			addrs = append(addrs, ep.Addresses...)
		}
	}
	if len(addrs) == 0 {
		return "", "", nil
	}
	members, err := e.membersOrErr(ctx, db)
	if err != nil {
		return "", "", addrs
	}
	for _, p := range members {
		if p.Status.PodIP == addrs[0] {
			return p.Name, p.Spec.NodeName, addrs
		}
	}
	return "", "", addrs
}

// loseNode kills the node that holds db's leading member (PostgreSQL's
// primary and Redis's master, the one their Service sends clients to; for
// RabbitMQ, whose nodes all serve, the leader of pipelines-api's quorum
// queue) while records are written and read through the ingress
// controller (MongoDB, through pipelines-api and gitops-api), messages
// published to RabbitMQ with confirms (pipelines-api) and records written
// to PostgreSQL (audit-manager, through the API server's service proxy);
// it measures how long the platform failed, reads back every acknowledged
// write and confirmed message, and starts the node again until every pod
// is back.
func (e *env) loseNode(ctx context.Context, db string) {
	t := e.t
	// leading is the member leading now ("" during an election), asked of
	// the members off the lost node.
	leading := func(lost string) string {
		if db == "rabbitmq" {
			q, _ := e.queueOff(ctx, lost)
			return queueLeaderPod(q.Leader)
		}
		p, _, _ := e.leaderOrNone(ctx, db)
		return p
	}
	var primary, node string
	if db == "rabbitmq" {
		primary, node = e.queueLeader(ctx)
	} else {
		primary, node = e.leader(ctx, db)
	}
	t.Logf("%s: %s leads, on node %s; the cluster's DNS on %s", db, primary, node, e.clusterDNSNodes(ctx))

	pg := e.startProxyWrites(ctx, "audit-manager", db)
	pub := e.startPublishing(db)
	// The reads ask each service whether every database it uses answers
	// (readyz: MongoDB, Redis and RabbitMQ), through the ingress
	// controller.
	rt := e.startRecordTraffic(e.client, []string{"/api/readyz", "/gitops/api/readyz"},
		map[string]string{"/api/readyz": "pipelines-api", "/gitops/api/readyz": "gitops-api"})
	time.Sleep(5 * time.Second) // writes acknowledged before the loss too

	killed := time.Now()
	if err := e.cluster.KillNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	seen := e.watchLostNode(ctx, node)
	// Serving again: another member leads, and writes through every path
	// succeed for 15 s in a row.
	var newPrimary string
	waitUntil(t, db+": another member leads after node "+node+" was killed", 3*time.Minute, func() bool {
		p := leading(node)
		if p != "" && p != primary {
			newPrimary = p
			return true
		}
		return false
	})
	led := time.Since(killed)
	waitUntil(t, db+": 15 s without a failed request after the loss", 3*time.Minute, func() bool {
		return time.Since(maxTime(rt.lastFailure(), pg.lastFailure(), pub.lastFailure(), killed)) > 15*time.Second
	})
	written := rt.stopWriting()
	ingress := rt.stop(db + " leader's node lost: ingress")
	pgWritten, proxy := pg.stop(db + " leader's node lost: PostgreSQL writes (audit-manager)")
	published, publishing := pub.stop(db + " leader's node lost: RabbitMQ publishes (pipelines-api)")

	// Serving again: the last request that failed was sent then, and
	// every request sent after it succeeded. A request sent just before
	// the lost node's pods left their endpoints waits for the client's
	// timeout (15 s) and fails only then (ended).
	served := maxTime(rt.lastFailureSent(), pg.lastFailureSent(), pub.lastFailureSent(), killed).Sub(killed)
	ended := maxTime(rt.lastFailure(), pg.lastFailure(), pub.lastFailure(), killed).Sub(killed)
	notReady, podsOut, held := seen()
	t.Logf("%s: node %s NotReady %s after the kill, its pods (%s) out of their Services' endpoints %s after", db, node, since(notReady, killed), strings.Join(held, " "), since(podsOut, killed))
	verdict := "within"
	if served > haServeGoal {
		verdict = "over"
	}
	t.Logf("%s: node %s killed; %s leads after %.1f s; the platform served again %.1f s after the kill (%s the goal of %s; the last failed request ended %.1f s after it); %s; PostgreSQL writes (audit-manager): %d sent, %d failed; RabbitMQ publishes: %d sent, %d failed",
		db, node, newPrimary, led.Seconds(), served.Seconds(), verdict, haServeGoal, ended.Seconds(), ingress, proxy.Sent, proxy.Failed, publishing.Sent, publishing.Failed)
	for _, ex := range append(append(ingress.Examples, proxy.Examples...), publishing.Examples...) {
		t.Logf("  failed: %s", ex)
	}
	var last []string
	for _, c := range append(append(rt.lastFailures(), pg.lastFailures()...), pub.lastFailures()...) {
		last = append(last, fmt.Sprintf("%s %.1f s", c.Cause, c.At.Sub(killed).Seconds()))
	}
	if len(last) > 0 {
		t.Logf("%s: the last failure after the kill, by what failed: %s", db, strings.Join(last, ", "))
		for _, ex := range append(append(rt.lastExamples, pg.lastExamples...), pub.lastExamples...) {
			t.Logf("  failed last: %s", ex)
		}
	}
	e.timing.traffic = append(e.timing.traffic, ingress, proxy, publishing)
	e.timing.failovers = append(e.timing.failovers, failover{DB: db, Node: node, Led: led, Served: served, Ended: ended, NotReady: sinceOrZero(notReady, killed)})

	// Every acknowledged write is there.
	e.checkWritten(written)
	e.checkProxyWritten(ctx, "audit-manager", pgWritten)
	e.checkPublished(published)
	// While the node is down, doctor names the database that runs with a
	// member short, with its fix.
	short := "runs with a member down"
	if db == "rabbitmq" {
		short = "runs with a node down"
	}
	e.doctorFinding("database-replication", db, short, doctor.Warning)

	if db == "rabbitmq" {
		e.waitRabbitMQSawLoss(ctx, node)
	}
	if err := e.cluster.StartNode(ctx, node); err != nil {
		t.Fatal(err)
	}
	// Every pod the node held is back before the next loss, as an
	// operator would wait: a Sentinel still starting there is a vote
	// short, and the next master's loss would wait for it.
	e.waitPodsReady(ctx, "after node "+node+" started")
	t.Logf("%s: every pod ready again after node %s started, %s still leads", db, node, newPrimary)
}

// clusterDNSNodes names where the cluster's DNS pods run: the kind
// cluster keeps them on the control-plane node (kindcluster.
// DNSNodeSelector), which no step kills; a loss log that says otherwise
// explains lookups that time out.
func (e *env) clusterDNSNodes(ctx context.Context) string {
	pods, err := e.cluster.Client.CoreV1().Pods(preflight.DNSNamespace).List(ctx, metav1.ListOptions{LabelSelector: preflight.DNSSelector})
	if err != nil {
		return "(not listed: " + err.Error() + ")"
	}
	var where []string
	for _, p := range pods.Items {
		where = append(where, p.Name+" "+p.Spec.NodeName)
	}
	return strings.Join(where, ", ")
}

// watchLostNode follows a killed node until the returned function is
// called, which tells when the node was first seen NotReady and when none
// of its pods was ready any more (so none in a Service's ready
// endpoints): the part of a loss that the cluster's grace period decides,
// not the platform.
func (e *env) watchLostNode(ctx context.Context, node string) func() (notReady, podsOut time.Time, held []string) {
	var mu sync.Mutex
	var nr, out time.Time
	var names []string
	stop := poll(ctx, 250*time.Millisecond, func(ctx context.Context) bool {
		now := time.Now()
		if n, err := e.cluster.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err == nil && nr.IsZero() &&
			kindcluster.NodeReadyCondition(n).Status != corev1.ConditionTrue {
			mu.Lock()
			nr = now
			mu.Unlock()
		}
		pods, err := e.cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
		if err != nil {
			return true
		}
		anyReady := false
		var held []string
		for i := range pods.Items {
			anyReady = anyReady || podReady(&pods.Items[i])
			held = append(held, pods.Items[i].Name)
		}
		mu.Lock()
		names = held
		if !anyReady {
			out = now
		}
		mu.Unlock()
		return anyReady
	})
	return func() (time.Time, time.Time, []string) {
		stop()
		mu.Lock()
		defer mu.Unlock()
		return nr, out, names
	}
}

// poll calls f every interval, from now, in a goroutine of its own, until f
// returns false or the returned stop is called (which waits for a call in
// progress).
func poll(ctx context.Context, interval time.Duration, f func(ctx context.Context) (more bool)) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for f(ctx) {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// sinceOrZero is t's time after from, zero when t is.
func sinceOrZero(t, from time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return t.Sub(from)
}

// since is t's time after from, or "never seen" when t is zero.
func since(t, from time.Time) string {
	if t.IsZero() {
		return "never seen"
	}
	return fmt.Sprintf("%.1f s", t.Sub(from).Seconds())
}

// waitPodsReady waits until every running pod of the platform is ready
// again (after what).
func (e *env) waitPodsReady(ctx context.Context, after string) {
	waitUntil(e.t, "every pod of the platform ready again "+after, 5*time.Minute, func() bool {
		l, err := e.cluster.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, p := range l.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed && !podReady(&p) {
				return false
			}
		}
		return true
	})
}

// failover is one node loss's figures for the timing file: when the node
// was NotReady, when another member led, when the last request that failed
// was sent (Served: every later one succeeded) and when it ended.
type failover struct {
	DB, Node                     string
	NotReady, Led, Served, Ended time.Duration
}

// proxyWrites writes records to a service through the API server's service
// proxy at trafficRate/2, remembering each one acknowledged.
type proxyWrites struct {
	*traffic
	mu      sync.Mutex
	written map[string]string
}

func (e *env) startProxyWrites(ctx context.Context, service, tag string) *proxyWrites {
	tr, ctx := newTraffic(ctx)
	pw := &proxyWrites{traffic: tr, written: map[string]string{}}
	pw.run(ctx, 2*time.Second/trafficRate, false, func(ctx context.Context, i int) {
		key := fmt.Sprintf("ha-%s-%d", tag, i)
		value := fmt.Sprintf("written while %s lost a node, request %d", tag, i)
		sent := time.Now()
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := e.cluster.Client.CoreV1().RESTClient().Put().
			AbsPath("/api/v1/namespaces", namespace, "services", service+":http", "proxy", "records", key).
			Body([]byte(value)).DoRaw(rctx)
		rcancel()
		if ctx.Err() != nil {
			return
		}
		pw.recordSent(service+"/records (write)", sent, err)
		if err == nil {
			pw.mu.Lock()
			pw.written[key] = value
			pw.mu.Unlock()
		}
	})
	return pw
}

// stop ends the writes and returns those acknowledged and the figures.
func (pw *proxyWrites) stop(operation string) (map[string]string, trafficResult) {
	r := pw.traffic.stop(operation)
	pw.mu.Lock()
	defer pw.mu.Unlock()
	return pw.written, r
}

// checkProxyWritten reads each record back from the service.
func (e *env) checkProxyWritten(ctx context.Context, service string, written map[string]string) {
	e.t.Helper()
	for key, want := range written {
		// A read may reach a replica of the service on the lost node
		// (the API server's proxy picks any endpoint): what is checked
		// is that the record is there, so a read that fails is tried
		// again, for up to a minute.
		var data []byte
		var err error
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
			data, err = e.cluster.Client.CoreV1().RESTClient().Get().
				AbsPath("/api/v1/namespaces", namespace, "services", service+":http", "proxy", "records", key).DoRaw(ctx)
			if err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			e.t.Fatalf("reading back record %s from %s: %v", key, service, err)
		}
		var got struct {
			Values map[string]string `json:"values"`
		}
		decodeJSON(e.t, data, &got)
		if got.Values["postgresql"] != want {
			e.t.Fatalf("record %s acknowledged by %s, lost: %v", key, service, got.Values)
		}
	}
	e.t.Logf("%d record(s) acknowledged by %s read back from PostgreSQL", len(written), service)
}

// lastFailureSent is when the last request that failed was sent (zero:
// none failed).
func (tr *traffic) lastFailureSent() time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.lastFailSent
}

// lastFailure is when the traffic last failed (zero: never).
func (tr *traffic) lastFailure() time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.failed == 0 {
		return time.Time{}
	}
	return tr.lastFail
}

func maxTime(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitUntil polls ok every half second until it holds, failing the test
// after limit.
func waitUntil(t interface {
	Helper()
	Fatalf(string, ...any)
}, what string, limit time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, limit)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// apiServerProxyPolicy is the NetworkPolicy the test adds, as an operator
// would, so that the API server's service proxy reaches audit-manager (the
// test's way to PostgreSQL records): the platform admits nothing to a
// worker service, and kube-router lets only a pod's own node in past
// that, which was the API server's node while the cluster had one.
const apiServerProxyPolicy = "e2e-api-server-proxy"

// allowAPIServerProxy admits the control plane's node (its address and its
// pods' range, whichever the API server's connections leave from) to
// audit-manager's port.
func (e *env) allowAPIServerProxy(ctx context.Context) {
	e.t.Helper()
	cp, err := e.cluster.Client.CoreV1().Nodes().Get(ctx, e.cluster.Name+"-control-plane", metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	var from []networkingv1.NetworkPolicyPeer
	for _, a := range cp.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			from = append(from, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: a.Address + "/32"}})
		}
	}
	for _, c := range cp.Spec.PodCIDRs {
		from = append(from, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
	}
	port := intstr.FromInt32(8080)
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: apiServerProxyPolicy, Namespace: namespace},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "audit-manager"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: from, Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}},
		},
	}
	_, err = e.cluster.Client.NetworkingV1().NetworkPolicies(namespace).Create(ctx, np, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		e.t.Fatal(err)
	}
	// kube-router programs a policy within seconds.
	waitUntil(e.t, "the API server's service proxy reaching audit-manager", 2*time.Minute, func() bool {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := e.cluster.Client.CoreV1().RESTClient().Get().
			AbsPath("/api/v1/namespaces", namespace, "services", "audit-manager:http", "proxy", "healthz").DoRaw(rctx)
		return err == nil
	})
}
