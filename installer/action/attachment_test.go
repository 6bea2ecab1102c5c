package action

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// A third, made-up kind of attachment: a build cache beside the platform,
// a ConfigMap "cache" in its namespace on its cluster. Plugging it into
// the attachment verbs takes its descriptor (and, to upgrade, its own
// upgrade of one); the argument checks, the lock, the not-found and
// recorded-cluster answers, the --forget hint and the listing are the
// verbs'. A real kind keeps its records in a field of state.State; this
// one, which state.State cannot know, keeps them in a map beside it.
type cacheRecord struct{ Server, Kubeconfig, Context, Namespace string }

type cacheStatus struct {
	Name             string
	Reachable, Ready bool
	Problem          string
}

// cacheFixture is the platform's fake cluster (conf, c) with an installed
// platform in namespace onprem, and three caches: a on the platform's
// cluster, b on a cluster whose kubeconfig is gone, c recorded on another
// server than the platform's cluster, which its (empty) ref reaches.
type cacheFixture struct {
	conf    *Configuration
	c       *fake.Clientset
	records map[string]cacheRecord
	kind    *attachmentKind[cacheRecord, cacheStatus]
	// heldBy is the lock's holder when the kind last changed something;
	// uninstalled the cluster each uninstall was given (nil: forgotten).
	heldBy      string
	uninstalled map[string]*kube.Cluster
}

func newCacheFixture(t *testing.T) *cacheFixture {
	t.Helper()
	one := int32(1)
	conf, c := fakeCluster(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "onprem"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "cache-a"}, Data: map[string]string{"version": "2.7.0"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "cache", Namespace: "cache-a"}, Spec: appsv1.DeploymentSpec{Replicas: &one},
			Status: appsv1.DeploymentStatus{ReadyReplicas: 1}},
	)
	if err := state.NewStore(c, "onprem").Save(context.Background(), &state.State{Version: "2.8.0"}); err != nil {
		t.Fatal(err)
	}
	f := &cacheFixture{conf: conf, c: c, uninstalled: map[string]*kube.Cluster{}, records: map[string]cacheRecord{
		"a": {Server: "https://fake.invalid", Namespace: "cache-a"},
		"b": {Server: "https://b.invalid", Kubeconfig: filepath.Join(t.TempDir(), "gone"), Namespace: "cache-b"},
		"c": {Server: "https://elsewhere.invalid", Namespace: "cache-c"},
	}}
	f.kind = &attachmentKind[cacheRecord, cacheStatus]{
		name:    "cache",
		records: func(*state.State) map[string]cacheRecord { return f.records },
		notFound: func(_ *state.State, name string) error {
			return &attachment.NotFoundError{Kind: "cache", Recorded: "installed in", Name: name, Known: attachment.Names(f.records)}
		},
		ref: func(r cacheRecord) config.ClusterRef {
			return config.ClusterRef{Kubeconfig: r.Kubeconfig, Context: r.Context}
		},
		server: func(r cacheRecord) string { return r.Server },
		connect: func(ctx context.Context, name string, ref config.ClusterRef, platform kube.Options, pc *kube.Cluster) (*kube.Cluster, error) {
			return attachment.Connect(ctx, "cache "+name+": its cluster", ref, platform, pc)
		},
		observe: func(ctx context.Context, cl *kube.Cluster, _ *state.State, name string) cacheStatus {
			rec := f.records[name]
			if cl.Server != rec.Server {
				return cacheStatus{Name: name, Problem: "the cluster reached is at " + cl.Server}
			}
			d, err := cl.Client.AppsV1().Deployments(rec.Namespace).Get(ctx, "cache", metav1.GetOptions{})
			if err != nil {
				return cacheStatus{Name: name, Reachable: true, Problem: err.Error()}
			}
			return cacheStatus{Name: name, Reachable: true, Ready: attachment.ReadinessOf(d).OK()}
		},
		unreachable: func(_ *state.State, name string, err error) cacheStatus {
			return cacheStatus{Name: name, Problem: "unreachable: " + err.Error()}
		},
		forgets: "the record",
		uninstall: func(ctx context.Context, p *attachment.Platform, name string, cl *kube.Cluster, _ time.Duration, _ apply.Reporter) (*attachment.Removal, error) {
			f.noteHolder(ctx)
			f.uninstalled[name] = cl
			out := &attachment.Removal{Name: name}
			if cl != nil {
				if err := cl.Client.CoreV1().ConfigMaps(f.records[name].Namespace).Delete(ctx, "cache", metav1.DeleteOptions{}); err != nil {
					return out, err
				}
				out.Removed = append(out.Removed, "its ConfigMap")
			}
			delete(f.records, name)
			if err := p.Store.Save(ctx, p.State); err != nil {
				return out, err
			}
			out.Removed = append(out.Removed, "its record")
			return out, nil
		},
	}
	return f
}

// upgrade is an upgrade of caches: it writes the platform's version into
// the ConfigMap of each on its cluster.
func (f *cacheFixture) upgrade(t *testing.T, all bool, names ...string) *attachmentUpgrade[cacheRecord, cacheStatus, string] {
	return &attachmentUpgrade[cacheRecord, cacheStatus, string]{
		kind: f.kind, AttachmentUpgrade: AttachmentUpgrade{Source: Source{ConfigPath: writeConfig(t, "  version: 2.8.0\n  domain: ci.example.com\n"), Lookup: noEnv},
			Conn: f.conf, Names: names, All: all, LockWait: time.Second},
		upgrade: func(ctx context.Context, _ *Loaded, p *attachment.Platform, name string, rec cacheRecord, _ config.ClusterRef, cl *kube.Cluster) (*string, error) {
			f.noteHolder(ctx)
			cm, err := cl.Client.CoreV1().ConfigMaps(rec.Namespace).Get(ctx, "cache", metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			cm.Data["version"] = p.State.Version
			if _, err := cl.Client.CoreV1().ConfigMaps(rec.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				return nil, err
			}
			res := name + " upgraded"
			return &res, nil
		},
		failed: func(name string, rec cacheRecord, err error) string { return name + " failed on " + rec.Server },
	}
}

// noteHolder notes who holds the installation's lock (heldBy).
func (f *cacheFixture) noteHolder(ctx context.Context) {
	if l, err := f.c.CoordinationV1().Leases("onprem").Get(ctx, state.LeaseName, metav1.GetOptions{}); err == nil && l.Spec.HolderIdentity != nil {
		f.heldBy = *l.Spec.HolderIdentity
	}
}

// otherHolds takes the installation's lock for another onprem.
func (f *cacheFixture) otherHolds(t *testing.T) *state.Lock {
	t.Helper()
	l, err := state.Acquire(context.Background(), f.c, "onprem", state.LockOptions{Holder: "alice@laptop (upgrade)"})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// released fails the test when the installation's lock is still held.
func (f *cacheFixture) released(t *testing.T) {
	t.Helper()
	l, err := state.Acquire(context.Background(), f.c, "onprem", state.LockOptions{Wait: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("the lock was not released: %v", err)
	}
	_ = l.Release(context.Background())
}

// A listing takes no lock: another onprem may hold it.
func TestAThirdKindListsThroughTheGenericVerb(t *testing.T) {
	f := newCacheFixture(t)
	defer f.otherHolds(t).Release(context.Background())
	ns, _, got, err := (&attachmentList[cacheRecord, cacheStatus]{kind: f.kind, Target: Target{Namespace: "onprem", Conn: f.conf}}).Run(context.Background())
	if err != nil || ns != "onprem" || len(got) != 3 {
		t.Fatalf("list: %s %+v %v", ns, got, err)
	}
	if a := got[0]; a != (cacheStatus{Name: "a", Reachable: true, Ready: true}) {
		t.Errorf("a, on the platform's cluster: %+v", a)
	}
	if b := got[1]; b.Name != "b" || b.Reachable || !strings.HasPrefix(b.Problem, "unreachable: cache b: its cluster: ") || !strings.Contains(b.Problem, f.records["b"].Kubeconfig) {
		t.Errorf("b, whose kubeconfig is gone: %+v", b)
	}
	if c := got[2]; c.Name != "c" || c.Reachable || c.Problem != "the cluster reached is at https://fake.invalid" {
		t.Errorf("c, recorded on another cluster: %+v", c)
	}
}

// An uninstall refuses what it must before the lock and under it, reaches
// the cluster as recorded or as given, says how to forget one whose
// cluster is gone, and forgets it without reaching it.
func TestAThirdKindUninstallsThroughTheGenericVerb(t *testing.T) {
	ctx := context.Background()
	f := newCacheFixture(t)
	uninstall := func(name string, forget bool, override config.ClusterRef) (*attachment.Removal, error) {
		return (&attachmentUninstall[cacheRecord, cacheStatus]{kind: f.kind, AttachmentUninstall: AttachmentUninstall{Target: Target{Namespace: "onprem", Conn: f.conf}, Name: name,
			Forget: forget, LockWait: time.Second}, Override: override}).Run(ctx)
	}
	var ie *InputError
	if _, err := uninstall("", false, config.ClusterRef{}); !errors.As(err, &ie) || err.Error() != "name the cache to uninstall" {
		t.Errorf("no name: %v", err)
	}
	if _, err := uninstall("b", true, config.ClusterRef{Context: "x"}); !errors.As(err, &ie) ||
		err.Error() != "--forget does not reach the cache's cluster: leave out --cache-kubeconfig and --cache-context" {
		t.Errorf("--forget with a cluster: %v", err)
	}
	// A name that is not recorded is refused before the lock: another
	// onprem holding it does not change the answer.
	other := f.otherHolds(t)
	if _, err := uninstall("z", false, config.ClusterRef{}); !errors.As(err, &ie) || err.Error() != `no cache "z" is installed in this installation; its caches: a, b, c` {
		t.Errorf("not recorded: %v", err)
	}
	_ = other.Release(ctx)

	// b's cluster cannot be reached: nothing is removed, and the error
	// says how to forget it.
	_, err := uninstall("b", false, config.ClusterRef{})
	var ue *kube.UnreachableError
	if !errors.As(err, &ue) || errors.As(err, &ie) ||
		!strings.HasSuffix(err.Error(), "(if that cluster is gone for good, 'onprem cache uninstall b --forget' removes the record only)") {
		t.Errorf("unreachable: %v", err)
	}
	if _, ok := f.records["b"]; !ok || len(f.uninstalled) > 0 {
		t.Errorf("an unreachable cache was removed: %v", f.uninstalled)
	}
	f.released(t)
	// The cluster given instead of the recorded one is the one reached.
	elsewhere := filepath.Join(t.TempDir(), "elsewhere")
	if _, err := uninstall("c", false, config.ClusterRef{Kubeconfig: elsewhere}); !errors.As(err, &ue) || !strings.Contains(err.Error(), elsewhere) {
		t.Errorf("c through another kubeconfig: %v", err)
	}
	f.released(t)

	if res, err := uninstall("b", true, config.ClusterRef{}); err != nil || res.Name != "b" {
		t.Fatalf("forget: %+v %v", res, err)
	}
	if cl, ok := f.uninstalled["b"]; !ok || cl != nil {
		t.Errorf("forget reached a cluster: %v %v", cl, ok)
	}

	res, err := uninstall("a", false, config.ClusterRef{})
	if err != nil || strings.Join(res.Removed, ", ") != "its ConfigMap, its record" {
		t.Fatalf("a: %+v %v", res, err)
	}
	if pc, _ := f.conf.Cluster(ctx); f.uninstalled["a"] != pc {
		t.Error("a, on the platform's cluster, was not given the platform's connection")
	}
	if _, err := f.c.CoreV1().ConfigMaps("cache-a").Get(ctx, "cache", metav1.GetOptions{}); err == nil {
		t.Error("a's ConfigMap is still there")
	}
	if !strings.Contains(f.heldBy, "cache uninstall") {
		t.Errorf("removed without the lock for 'cache uninstall': holder %q", f.heldBy)
	}
	f.released(t)
	if _, ok := f.records["a"]; ok || len(f.records) != 1 {
		t.Errorf("records left: %v", f.records)
	}
}

// An upgrade checks its names, refuses one that is not recorded before it
// begins, and then upgrades one after the other, under the lock, each on
// the cluster recorded for it.
func TestAThirdKindUpgradesThroughTheGenericVerb(t *testing.T) {
	ctx := context.Background()
	f := newCacheFixture(t)
	var ie *InputError
	if _, err := f.upgrade(t, false).Run(ctx); !errors.As(err, &ie) || err.Error() != "name the caches to upgrade, or give --all" {
		t.Errorf("no names: %v", err)
	}
	if _, err := f.upgrade(t, true, "a").Run(ctx); !errors.As(err, &ie) || err.Error() != "give cache names or --all, not both" {
		t.Errorf("names and --all: %v", err)
	}
	if res, err := f.upgrade(t, false, "a", "z").Run(ctx); !errors.As(err, &ie) || res != nil ||
		err.Error() != `no cache "z" is installed in this installation; its caches: a, b, c` {
		t.Errorf("not recorded: %v %v", res, err)
	}
	if cm, err := f.c.CoreV1().ConfigMaps("cache-a").Get(ctx, "cache", metav1.GetOptions{}); err != nil || cm.Data["version"] != "2.7.0" {
		t.Errorf("a name that is not recorded did not stop the upgrade before it began: %v", err)
	}
	f.released(t)
	// The cluster given instead of the recorded one is the one reached.
	u := f.upgrade(t, false, "c")
	u.Override = config.ClusterRef{Kubeconfig: filepath.Join(t.TempDir(), "elsewhere")}
	var ue *kube.UnreachableError
	if _, err := u.Run(ctx); !errors.As(err, &ue) || !strings.Contains(err.Error(), u.Override.Kubeconfig) {
		t.Errorf("c through another kubeconfig: %v", err)
	}
	f.released(t)

	// One after the other: a is upgraded, b and c fail, each with its
	// own error, joined.
	res, err := f.upgrade(t, true).Run(ctx)
	if want := []string{"a upgraded", "b failed on https://b.invalid", "c failed on https://elsewhere.invalid"}; strings.Join(res, "; ") != strings.Join(want, "; ") {
		t.Errorf("results: %q", res)
	}
	if !errors.As(err, &ue) || !errors.As(err, &ie) || !strings.Contains(err.Error(),
		"cache c runs on the cluster at https://elsewhere.invalid, but the default kubeconfig and context reaches https://fake.invalid: give its kubeconfig and context with --cache-kubeconfig and --cache-context") {
		t.Errorf("failures: %v", err)
	}
	if cm, err := f.c.CoreV1().ConfigMaps("cache-a").Get(ctx, "cache", metav1.GetOptions{}); err != nil || cm.Data["version"] != "2.8.0" {
		t.Errorf("a's ConfigMap: %v", err)
	}
	if !strings.Contains(f.heldBy, "cache upgrade") {
		t.Errorf("upgraded without the lock for 'cache upgrade': holder %q", f.heldBy)
	}
	f.released(t)
}

// An install or upgrade of attachments on a cluster with no platform is
// refused before the lock, naming the platform's flags and the kind's
// own (a runtime's are --runtime-kubeconfig/--runtime-context).
func TestOpenPlatformNotInstalledNamesTheKindsFlags(t *testing.T) {
	for _, kind := range []string{"runner", "runtime"} {
		conf, c := fakeCluster()
		pc, err := conf.Cluster(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		l := &Loaded{Installation: &config.Installation{Spec: config.Spec{Namespace: "onprem"}}}
		_, _, _, err = openPlatform(context.Background(), l, pc, kind, "install", time.Second, time.Minute)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), "no platform is installed in namespace onprem") ||
			!strings.Contains(err.Error(), "the "+kind+"'s cluster is --"+kind+"-kubeconfig/--"+kind+"-context") {
			t.Errorf("%s: %v, want an input error naming --%s-kubeconfig", kind, err, kind)
		}
		if _, err := c.CoreV1().Namespaces().Get(context.Background(), "onprem", metav1.GetOptions{}); err == nil {
			t.Errorf("%s: the refusal created the namespace (the lock was taken)", kind)
		}
	}
}
