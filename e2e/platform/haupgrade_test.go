//go:build linux

package platform

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/Masterminds/semver/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/e2e/images"
	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/chartfetch"
	"onprem.dev/onprem/installer/release"
)

// patchRelease is the release after base that the high-availability
// platform is upgraded to: a patch release (2.8.0 → 2.8.1) whose platform
// images are new, the databases' replicated images among them (so that
// the upgrade rolls every service and every PostgreSQL and Redis member),
// with no migration. No onprem embeds it: its bundle carries its
// manifest, as a vendor's patch release made after the operator's onprem
// does.
func patchRelease(t *testing.T, base *release.Release) *release.Release {
	t.Helper()
	data, err := yaml.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := release.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	rel.Version = semver.MustParse(base.Version).IncPatch().String()
	rel.Date = time.Now().UTC().Format(time.DateOnly)
	rel.UpgradeFrom = fmt.Sprintf(">= %s, < %s", base.Version, rel.Version)
	rel.Notes = "Patch release: the platform's images rebuilt, PostgreSQL's and Redis's replicated ones included; no data changes."
	rel.Migrations = nil
	for i := range rel.Images {
		if rel.Images[i].Platform {
			rel.Images[i].Tag = rel.Version
		}
	}
	if data, err = yaml.Marshal(rel); err != nil {
		t.Fatal(err)
	}
	if rel, err = release.Parse(data); err != nil {
		t.Fatalf("the patch release of %s does not validate: %v", base.Version, err)
	}
	return rel
}

// patchBundle writes the signed bundle of base's patch release
// (patchRelease) from the e2e's images, as the vendor does with the
// library behind 'onprem bundle create' (the command bundles the releases
// its onprem embeds), and pushes it to the ring's registry with 'onprem
// bundle push'. It returns the release's version and the bundle.
func (e *env) patchBundle(ctx context.Context, base string) (version, path string) {
	t := e.t
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	b, err := set.Get(base)
	if err != nil {
		t.Fatal(err)
	}
	rel := patchRelease(t, b)
	if err := images.WriteOCILayout(e.ociLayout, releaseImages(t, rel, e.built)); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(e.dir, "platform-"+rel.Version+".bundle")
	c := action.BundleCreate{
		Source: action.Source{Releases: set.With(rel)}, Version: rel.Version, Output: path, OCILayout: e.ociLayout,
		RuntimeChartRepository: e.chartRepository, RuntimeChart: chartfetch.Options{PlainHTTP: true},
	}
	res, err := c.Run(ctx)
	if err != nil {
		t.Fatalf("bundle create of patch release %s: %v", rel.Version, err)
	}
	if !res.Signed {
		t.Fatalf("the bundle of %s is not signed", rel.Version)
	}
	t.Logf("bundle of patch release %s (its manifest carried; no onprem embeds it): %d images, %.0f MiB, %.1f s",
		rel.Version, res.Images, float64(res.Size)/(1<<20), res.Seconds)
	e.onprem("bundle", "push", path, "--registry", e.registry+"/onprem", "--insecure", "--public-key", e.publicKeyFile)
	return rel.Version, path
}

// upgradeWhileDraining runs 'onprem upgrade apply' to version (bundle) on
// the high-availability platform while every worker is drained in turn, as
// `kubectl drain --ignore-daemonsets --delete-emptydir-data` does (cordon,
// every pod evicted as the PodDisruptionBudgets allow), then uncordoned,
// and every pod waited for until ready, under the node losses' traffic: records
// written and read through the ingress controller, messages published to
// RabbitMQ with confirms, records written to PostgreSQL. The upgrade rolls
// every service and every PostgreSQL and Redis member while the drains
// move them. The requests to the services that fail are counted against
// the goal of none; every change of PostgreSQL's primary and Redis's
// master is counted and bounded (at most one for the upgrade's roll, which
// replaces the primary last, and one per drain); every acknowledged write
// and confirmed message is read back.
func (e *env) upgradeWhileDraining(ctx context.Context, version, bundle string) {
	t := e.t
	workers := e.workerNodes(ctx)
	queueBefore, _ := e.queue(ctx)
	pg := e.startProxyWrites(ctx, "audit-manager", "upgrade")
	pub := e.startPublishing("upgrade")
	// The services' own answers (version: the process, no database) and
	// records written to MongoDB, through the ingress controller.
	rt := e.startRecordTraffic(e.client, []string{"/api/version", "/gitops/api/version"}, nil)
	leaders := e.watchLeaders(ctx, rt.started, "postgresql", "redis")
	endpoints := e.watchEndpoints(ctx, rt.started, "pipelines-api", "gitops-api", "ingress-controller")
	time.Sleep(5 * time.Second)

	type upgraded struct {
		res            action.UpgradeResult
		stdout, stderr string
		err            error
		took           time.Duration
	}
	t0 := time.Now()
	done := make(chan upgraded, 1)
	go func() {
		var u upgraded
		u.stdout, u.stderr, u.err = e.run("upgrade", "apply", "-c", e.haConfig, "--to", version, "--bundle", bundle,
			"--kubeconfig", e.kubeconfig, "--timeout", "15m", "-o", "json")
		u.took = time.Since(t0)
		if u.err == nil {
			u.err = json.Unmarshal([]byte(u.stdout), &u.res)
		}
		done <- u
	}()
	var drains []drainFigures
	for _, node := range workers {
		d0 := time.Now()
		e.cordon(ctx, node, true)
		evicted := e.evictAll(ctx, node)
		drained := time.Since(d0)
		e.cordon(ctx, node, false)
		e.waitPodsReady(ctx, "after node "+node+" was drained and uncordoned")
		d := drainFigures{Node: node, Evicted: evicted, Drained: drained, Back: time.Since(d0), Began: d0.Sub(t0)}
		t.Logf("upgrade while draining: node %s drained %.1f s after the upgrade began, in %.1f s (%d pods evicted); every pod ready again %.1f s after its drain began",
			node, d.Began.Seconds(), drained.Seconds(), evicted, d.Back.Seconds())
		drains = append(drains, d)
	}
	u := <-done
	if u.err != nil {
		t.Fatalf("upgrade apply to %s while the workers were drained: %v\nstderr:\n%s", version, u.err, tailLines(u.stderr, 60))
	}
	if u.res.Version != version {
		t.Fatalf("after the upgrade the platform is at %q, want %s", u.res.Version, version)
	}
	e.waitPodsReady(ctx, "after the upgrade to "+version)
	time.Sleep(5 * time.Second)
	written := rt.stopWriting()
	op := "upgrade to " + version + " while every worker was drained"
	services := rt.stop(op + ": services through the ingress")
	pgWritten, proxy := pg.stop(op + ": PostgreSQL writes (audit-manager)")
	published, publishing := pub.stop(op + ": RabbitMQ publishes (pipelines-api)")
	switchovers := leaders()
	endpointLog := endpoints()
	queueAfter, _ := e.queue(ctx)
	if queueBefore.Leader != queueAfter.Leader {
		switchovers["rabbitmq"] = []string{queueLeaderPod(queueBefore.Leader) + " → " + queueLeaderPod(queueAfter.Leader) + " (first and last)"}
	}
	t.Logf("upgrade while draining: upgrade apply took %.1f s, the drains of %d workers %.1f s; switchovers: %v; %s; PostgreSQL writes (audit-manager): %d sent, %d failed; RabbitMQ publishes: %d sent, %d failed",
		u.took.Seconds(), len(drains), time.Since(t0).Seconds(), switchovers, services, proxy.Sent, proxy.Failed, publishing.Sent, publishing.Failed)
	for _, ex := range append(proxy.Examples, publishing.Examples...) {
		t.Logf("  a database's switchover: %s", ex)
	}
	e.timing.traffic = append(e.timing.traffic, services, proxy, publishing)
	e.timing.drain = &upgradeDrainFigures{Version: version, Upgrade: u.took, Drains: drains, Switchovers: switchovers}
	// No request to the services may fail: every pod that stops leaves
	// its Service's endpoints first (preStop), the ingress controller
	// retries a connection a pod just Ready refused (its network policy
	// not yet programmed). What the services' endpoints were meanwhile is
	// logged beside a failure.
	if services.Failed > 0 {
		t.Errorf("upgrade while draining: %d of %d requests to the services failed (want none): %v", services.Failed, services.Sent, services.Examples)
		t.Logf("the services' endpoints meanwhile (seconds from the traffic's start):\n\t%s", strings.Join(endpointLog, "\n\t"))
	}
	// The upgrade's roll moves the primary once (installer/roll:
	// replicas first, the primary last), and each drain may move it once
	// more: more changes of leader than that is a roll by ordinal (one
	// per member that happened to lead) or a database that flaps.
	for _, db := range []string{"postgresql", "redis"} {
		if n, most := len(switchovers[db]), 1+len(workers); n > most {
			t.Errorf("%s changed leader %d times (at most %d: one for the upgrade's roll, one per drain): %v", db, n, most, switchovers[db])
		}
	}
	e.checkRolled(ctx, version)
	e.checkWritten(written)
	e.checkProxyWritten(ctx, "audit-manager", pgWritten)
	e.checkPublished(published)
}

// checkRolled checks that every member of the replicated databases whose
// image the release changed runs it now (the upgrade rolled them).
func (e *env) checkRolled(ctx context.Context, version string) {
	e.t.Helper()
	for _, db := range []string{"postgresql", "redis"} {
		for _, p := range e.members(ctx, db) {
			if !slices.ContainsFunc(p.Spec.Containers, func(c corev1.Container) bool { return strings.Contains(c.Image, db+"-ha:"+version) }) {
				e.t.Errorf("%s member %s does not run the %s image of %s: %v", db, p.Name, db+"-ha", version, p.Spec.Containers[0].Image)
			}
		}
	}
}

// workerNodes returns the cluster's nodes that are not its control plane,
// by name.
func (e *env) workerNodes(ctx context.Context) []string {
	e.t.Helper()
	l, err := e.cluster.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: "!node-role.kubernetes.io/control-plane"})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, n := range l.Items {
		out = append(out, n.Name)
	}
	slices.Sort(out)
	if len(out) != haWorkers {
		e.t.Fatalf("workers %v, want %d", out, haWorkers)
	}
	return out
}

// watchLeaders looks, every half second, at the member each of dbs' Service
// sends clients to (PostgreSQL's primary, Redis's master) and records each
// change, dated from origin, until the returned func is called, which
// returns them by database.
func (e *env) watchLeaders(ctx context.Context, origin time.Time, dbs ...string) func() map[string][]string {
	changes := map[string][]string{}
	last := map[string]string{}
	for _, db := range dbs {
		last[db], _, _ = e.leaderOrNone(ctx, db)
	}
	stop := poll(ctx, 500*time.Millisecond, func(ctx context.Context) bool {
		for _, db := range dbs {
			pod, _, _ := e.leaderOrNone(ctx, db)
			if pod == "" || pod == last[db] {
				continue
			}
			changes[db] = append(changes[db], fmt.Sprintf("%s → %s at +%.1f s", last[db], pod, time.Since(origin).Seconds()))
			last[db] = pod
		}
		return true
	})
	return func() map[string][]string {
		stop()
		return changes
	}
}

// watchEndpoints records, every quarter second until the returned func is
// called, each change of services' endpoints (an address, its pod and its
// ready, serving and terminating conditions), dated from origin: beside
// the requests that failed, they say where those could have been sent.
func (e *env) watchEndpoints(ctx context.Context, origin time.Time, services ...string) func() []string {
	var changes []string
	cond := func(b *bool) string {
		if b == nil {
			return "?"
		}
		return strconv.FormatBool(*b)
	}
	prev := map[string]string{}
	stop := poll(ctx, 250*time.Millisecond, func(ctx context.Context) bool {
		l, err := e.cluster.Client.DiscoveryV1().EndpointSlices(namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return true
		}
		cur := map[string]string{}
		for _, s := range l.Items {
			svc := s.Labels[discoveryv1.LabelServiceName]
			if !slices.Contains(services, svc) {
				continue
			}
			for _, ep := range s.Endpoints {
				pod := ""
				if ep.TargetRef != nil {
					pod = ep.TargetRef.Name
				}
				for _, a := range ep.Addresses {
					cur[svc+" "+a+" ("+pod+")"] = "ready=" + cond(ep.Conditions.Ready) + " serving=" + cond(ep.Conditions.Serving) + " terminating=" + cond(ep.Conditions.Terminating)
				}
			}
		}
		at := fmt.Sprintf("+%.1f s", time.Since(origin).Seconds())
		var now []string
		for k, v := range cur {
			if prev[k] != v {
				now = append(now, at+" "+k+" "+v)
			}
		}
		for k := range prev {
			if _, ok := cur[k]; !ok {
				now = append(now, at+" "+k+" gone")
			}
		}
		slices.Sort(now)
		changes = append(changes, now...)
		prev = cur
		return true
	})
	return func() []string {
		stop()
		return changes
	}
}

// drainFigures is one worker's drain during the upgrade: when it began
// (from the upgrade's start), how long its pods took to go, and when
// every pod was ready again (from the drain's start).
type drainFigures struct {
	Node                 string
	Evicted              int
	Began, Drained, Back time.Duration
}

// upgradeDrainFigures is the upgrade while draining, for the timing file.
type upgradeDrainFigures struct {
	Version string
	// Upgrade is upgrade apply's time.
	Upgrade     time.Duration
	Drains      []drainFigures
	Switchovers map[string][]string
}

// cordon marks a node unschedulable, or schedulable again.
func (e *env) cordon(ctx context.Context, node string, on bool) {
	e.t.Helper()
	patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
	if _, err := e.cluster.Client.CoreV1().Nodes().Patch(ctx, node, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		e.t.Fatalf("cordon %s (%t): %v", node, on, err)
	}
}

// evictAll evicts every pod on node but DaemonSets' and static ones, each
// asked again every 2 s while a PodDisruptionBudget refuses (429), and
// waits until they are deleted: what kubectl drain does. It returns how
// many it evicted.
func (e *env) evictAll(ctx context.Context, node string) int {
	t := e.t
	pods, err := e.cluster.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var evict []corev1.Pod
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Annotations[corev1.MirrorPodAnnotationKey] != "" {
			continue
		}
		if owner := metav1.GetControllerOf(&p); owner != nil && owner.Kind == "DaemonSet" {
			continue
		}
		evict = append(evict, p)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(evict))
	for _, p := range evict {
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(4 * time.Minute)
			var evicted time.Time
			for {
				evicted = time.Now()
				err := e.cluster.Client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace}})
				switch {
				case err == nil || apierrors.IsNotFound(err):
				case apierrors.IsTooManyRequests(err) && time.Now().Before(deadline):
					time.Sleep(2 * time.Second)
					continue
				default:
					errs <- fmt.Errorf("evicting %s/%s: %w", p.Namespace, p.Name, err)
					return
				}
				break
			}
			for time.Now().Before(deadline) {
				cur, err := e.cluster.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
				if apierrors.IsNotFound(err) || err == nil && cur.UID != p.UID {
					// A pod gone only after its whole grace period was
					// killed at its end: it ignored its stop signal (the
					// Redis keeper and Patroni did). Named; under the
					// drain's load the kubelet may also just be late.
					grace := int64(corev1.DefaultTerminationGracePeriodSeconds)
					if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
						grace = *g
					}
					if took := time.Since(evicted); took >= time.Duration(grace)*time.Second {
						t.Logf("drain of %s: pod %s took %.1f s to stop after its eviction, its whole grace period (%d s): killed, or its kubelet late", node, p.Name, took.Seconds(), grace)
					}
					return
				}
				time.Sleep(time.Second)
			}
			errs <- fmt.Errorf("%s/%s not gone 4 minutes after its eviction", p.Namespace, p.Name)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("draining node %s: %v", node, err)
	}
	return len(evict)
}
