//go:build linux

package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/e2e/testcluster"
)

// TestAgainstTestCluster runs the store and the lock against a real
// kube-apiserver: one cluster, a namespace per case, cases in parallel.
func TestAgainstTestCluster(t *testing.T) {
	tc := testcluster.Start(t)
	c := tc.Client

	for name, fn := range map[string]func(*testing.T, kubernetes.Interface, string){
		"StoreRoundTrip":           testStoreRoundTrip,
		"StoreConflict":            testStoreConflict,
		"StoreCorrupt":             testStoreCorrupt,
		"LockHeld":                 testLockHeld,
		"LockTakeOverAfterCrash":   testLockTakeOverAfterCrash,
		"LockReleaseThenAcquire":   testLockReleaseThenAcquire,
		"LockLostWhenDeleted":      testLockLostWhenDeleted,
		"LockLostWhenTaken":        testLockLostWhenTaken,
		"LockOneWinner":            testLockOneWinner,
		"LockNamespaceTerminating": testLockNamespaceTerminating,
	} {
		ns := strings.ToLower(name)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, c, ns)
		})
	}
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func createNamespace(t *testing.T, c kubernetes.Interface, ns string) {
	t.Helper()
	_, err := c.CoreV1().Namespaces().Create(testCtx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func testStoreRoundTrip(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := testCtx(t)
	// Load before the namespace exists: empty, no error.
	s := NewStore(c, ns)
	st, err := s.Load(ctx)
	if err != nil || st.Stored() || st.Version != "" {
		t.Fatalf("Load without a namespace = %+v, %v", st, err)
	}
	createNamespace(t, c, ns)

	st.Installation = "acme"
	st.ConfigDigest = "sha256:0123"
	if err := s.Begin(ctx, st, Operation{Kind: KindInstall, Version: "1.4.0", Components: []string{"ingress", "mongodb"},
		SkippedChecks: []string{"dns"}}); err != nil {
		t.Fatal(err)
	}
	st.Components["mongodb"] = Component{Chart: "mongodb", ChartVersion: "16.4.0", Release: "mongodb", Revision: 1,
		Digest: "sha256:feed", Status: "deployed", UpdatedAt: time.Now().UTC()}
	st.Components["ingress"] = Component{Chart: "ingress", ChartVersion: "1.0.0", Release: "ingress", Revision: 3, Status: "deployed"}
	if err := s.Finish(ctx, st, OutcomeSucceeded, "2 components installed"); err != nil {
		t.Fatal(err)
	}

	// Another operator's machine sees the same record.
	got, err := NewStore(c, ns).Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(st)
	have, _ := json.Marshal(got)
	if string(want) != string(have) {
		t.Errorf("round trip differs:\nsaved  %s\nloaded %s", want, have)
	}
	if got.Version != "1.4.0" || got.History[0].Outcome != OutcomeSucceeded || got.Components["ingress"].Revision != 3 {
		t.Errorf("loaded %+v", got)
	}

	sec, err := c.CoreV1().Secrets(ns).Get(ctx, SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sec.Type != "onprem.dev/state" || sec.Labels["app.kubernetes.io/managed-by"] != "onprem" || !json.Valid(sec.Data["state.json"]) {
		t.Errorf("secret: type %q labels %v", sec.Type, sec.Labels)
	}

	// Labels and annotations added by others survive a Save.
	sec.Annotations = map[string]string{"team": "platform"}
	if _, err := c.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got.ConfigDigest = "sha256:4567"
	if err := s.Save(ctx, got); err != nil {
		t.Fatal(err)
	}
	sec, _ = c.CoreV1().Secrets(ns).Get(ctx, SecretName, metav1.GetOptions{})
	if sec.Annotations["team"] != "platform" || !strings.Contains(string(sec.Data[DataKey]), "sha256:4567") {
		t.Errorf("after Save: annotations %v data %s", sec.Annotations, sec.Data[DataKey])
	}

	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Load(ctx); err != nil || st.Stored() {
		t.Errorf("Load after Delete = %+v, %v", st, err)
	}
	if err := s.Delete(ctx); err != nil {
		t.Errorf("second Delete = %v", err)
	}
}

func testStoreConflict(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := testCtx(t)
	createNamespace(t, c, ns)
	a, b := NewStore(c, ns), NewStore(c, ns)

	// Two first installs racing: both see no record; the second create loses.
	sa, _ := a.Load(ctx)
	sb, _ := b.Load(ctx)
	sa.Installation, sb.Installation = "a", "b"
	if err := a.Save(ctx, sa); err != nil {
		t.Fatal(err)
	}
	err := b.Save(ctx, sb)
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) {
		t.Fatalf("second create = %T %v, want *ConflictError", err, err)
	}
	if !strings.Contains(err.Error(), "changed by someone else") || !strings.Contains(err.Error(), ns+"/onprem-state") {
		t.Errorf("message %q", err)
	}

	// Two updates from the same version: the second loses, nothing is overwritten.
	s1, _ := a.Load(ctx)
	s2, _ := b.Load(ctx)
	s1.ConfigDigest = "one"
	s2.ConfigDigest = "two"
	if err := a.Save(ctx, s1); err != nil {
		t.Fatal(err)
	}
	if err := b.Save(ctx, s2); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale update = %v, want a conflict", err)
	}
	cur, _ := a.Load(ctx)
	if cur.ConfigDigest != "one" || cur.Installation != "a" {
		t.Errorf("record after the conflict = %+v", cur)
	}
	// A writer that saved keeps its version: it can save again.
	s1.ConfigDigest = "three"
	if err := a.Save(ctx, s1); err != nil {
		t.Errorf("second save of the winner = %v", err)
	}
	// Reloading resolves the conflict.
	s2, _ = b.Load(ctx)
	s2.ConfigDigest = "four"
	if err := b.Save(ctx, s2); err != nil {
		t.Errorf("save after reload = %v", err)
	}
	// Deleted under a writer: a conflict too, not a silent re-create.
	if err := a.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Save(ctx, s2); !errors.Is(err, ErrConflict) {
		t.Errorf("save after delete = %v, want a conflict", err)
	}
}

func testStoreCorrupt(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := testCtx(t)
	createNamespace(t, c, ns)
	_, err := c.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName},
		Type:       SecretType,
		Data:       map[string][]byte{DataKey: []byte(`{"version": 1.4}`)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewStore(c, ns).Load(ctx)
	var ce *CorruptError
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), "kubectl -n "+ns+" get secret onprem-state -o jsonpath=") {
		t.Errorf("Load of a corrupt record = %v", err)
	}
}

func lease(t *testing.T, c kubernetes.Interface, ns string) *coordLease {
	t.Helper()
	le, err := c.CoordinationV1().Leases(ns).Get(testCtx(t), LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return &coordLease{holder: holderOf(le), transitions: *le.Spec.LeaseTransitions, renew: le.Spec.RenewTime.Time, rv: le.ResourceVersion}
}

type coordLease struct {
	holder      string
	transitions int32
	renew       time.Time
	rv          string
}

func acquire(t *testing.T, c kubernetes.Interface, ns string, o LockOptions) *Lock {
	t.Helper()
	l, err := Acquire(testCtx(t), c, ns, o)
	if err != nil {
		t.Fatalf("Acquire(%s) = %v", o.Holder, err)
	}
	return l
}

func testLockHeld(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := testCtx(t)
	// The namespace does not exist yet: Acquire creates it.
	a := acquire(t, c, ns, LockOptions{Holder: DefaultHolder("install"), LeaseDuration: 3 * time.Second})
	if _, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		t.Fatalf("namespace not created: %v", err)
	}
	if le := lease(t, c, ns); le == nil || le.holder != a.Holder() {
		t.Fatalf("lease = %+v", le)
	}

	start := time.Now()
	_, err := Acquire(ctx, c, ns, LockOptions{Holder: "bob@laptop pid 7 (onprem 0.1.0 upgrade)", Wait: 4 * time.Second,
		LeaseDuration: 3 * time.Second, Poll: 300 * time.Millisecond})
	elapsed := time.Since(start)
	var he *HeldError
	if !errors.As(err, &he) {
		t.Fatalf("second Acquire = %T %v, want *HeldError", err, err)
	}
	if elapsed < 4*time.Second || elapsed > 8*time.Second {
		t.Errorf("second Acquire gave up after %s, want about the 4s wait", elapsed)
	}
	if he.Holder != a.Holder() || !strings.Contains(err.Error(), a.Holder()) || he.Namespace != ns {
		t.Errorf("HeldError names %q (%v), want %q", he.Holder, err, a.Holder())
	}
	if !he.Expires.After(he.Since) || time.Until(he.Expires) > 4*time.Second || time.Since(he.Since) > time.Minute {
		t.Errorf("Since %s Expires %s", he.Since, he.Expires)
	}
	if !strings.Contains(err.Error(), "kubectl -n "+ns+" delete lease onprem-lock") {
		t.Errorf("message lacks the kubectl command: %v", err)
	}
	// The holder kept renewing through the 4s (longer than its 3s lease).
	select {
	case <-a.Lost():
		t.Fatalf("holder lost its lock: %v", a.Err())
	default:
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if le := lease(t, c, ns); le != nil {
		t.Errorf("lease after Release = %+v", le)
	}
	if err := a.Release(ctx); err != nil {
		t.Errorf("second Release = %v", err)
	}
}

func testLockTakeOverAfterCrash(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := testCtx(t)
	a := acquire(t, c, ns, LockOptions{Holder: "killed", LeaseDuration: 2 * time.Second})
	a.stopRenewing() // as if the process was killed: the Lease stays
	left := lease(t, c, ns)

	b := acquire(t, c, ns, LockOptions{Holder: "rerun", LeaseDuration: 2 * time.Second, Wait: 20 * time.Second, Poll: 200 * time.Millisecond})
	took := time.Now()
	defer b.Release(ctx)
	if expiry := left.renew.Add(2 * time.Second); took.Before(expiry) {
		t.Errorf("taken over at %s, before the lease expired at %s", took, expiry)
	}
	if d := took.Sub(left.renew); d > 8*time.Second {
		t.Errorf("takeover took %s after the last renewal of a 2s lease", d)
	}
	le := lease(t, c, ns)
	if le.holder != "rerun" || le.transitions != 1 {
		t.Errorf("lease after takeover = %+v", le)
	}
	// The new holder renews: a third one cannot take it even after several
	// lease durations.
	_, err := Acquire(ctx, c, ns, LockOptions{Holder: "third", LeaseDuration: 2 * time.Second, Wait: 5 * time.Second, Poll: 200 * time.Millisecond})
	var he *HeldError
	if !errors.As(err, &he) || he.Holder != "rerun" {
		t.Errorf("third Acquire = %v, want held by rerun", err)
	}
	// The crashed lock's Release (if its process came back) touches nothing.
	if err := a.Release(ctx); err != nil {
		t.Errorf("Release of the crashed lock = %v", err)
	}
	if le := lease(t, c, ns); le == nil || le.holder != "rerun" {
		t.Errorf("lease = %+v", le)
	}
}

func testLockReleaseThenAcquire(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := testCtx(t)
	a := acquire(t, c, ns, LockOptions{Holder: "first"})
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	b := acquire(t, c, ns, LockOptions{Holder: "second", Wait: 30 * time.Second})
	defer b.Release(ctx)
	if d := time.Since(start); d > time.Second {
		t.Errorf("Acquire after Release took %s, want immediate", d)
	}
	if le := lease(t, c, ns); le.holder != "second" {
		t.Errorf("holder = %s", le.holder)
	}
}

func testLockLostWhenDeleted(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := testCtx(t)
	a := acquire(t, c, ns, LockOptions{Holder: "victim", LeaseDuration: 3 * time.Second})
	if a.Err() != nil {
		t.Fatal(a.Err())
	}
	if err := c.CoordinationV1().Leases(ns).Delete(ctx, LeaseName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() did not fire after the Lease was deleted")
	}
	if err := a.Err(); err == nil || !strings.Contains(err.Error(), "deleted") {
		t.Errorf("Err() = %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Errorf("Release after loss = %v", err)
	}
}

func testLockLostWhenTaken(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := testCtx(t)
	a := acquire(t, c, ns, LockOptions{Holder: "alice", LeaseDuration: 3 * time.Second})
	// Someone forcibly writes themselves into the Lease.
	patch := []byte(`{"metadata":{"annotations":{"onprem.dev/lock-token":"other"}},"spec":{"holderIdentity":"mallory"}}`)
	if _, err := c.CoordinationV1().Leases(ns).Patch(ctx, LeaseName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-a.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("Lost() did not fire after the Lease was taken")
	}
	if err := a.Err(); err == nil || !strings.Contains(err.Error(), "mallory") {
		t.Errorf("Err() = %v", err)
	}
	// Release leaves mallory's Lease alone and says so.
	if err := a.Release(ctx); err == nil || !strings.Contains(err.Error(), "mallory") {
		t.Errorf("Release = %v, want an error naming mallory", err)
	}
	if le := lease(t, c, ns); le == nil || le.holder != "mallory" {
		t.Errorf("lease after Release = %+v", le)
	}
}

// testLockOneWinner: several processes find the same expired Lease at once;
// exactly one takes it.
func testLockOneWinner(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := testCtx(t)
	dead := acquire(t, c, ns, LockOptions{Holder: "dead", LeaseDuration: 2 * time.Second})
	dead.stopRenewing()

	const n = 5
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		winners []*Lock
		helds   []*HeldError
		others  []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := Acquire(ctx, c, ns, LockOptions{Holder: fmt.Sprintf("taker-%d", i), LeaseDuration: 2 * time.Second,
				Wait: 8 * time.Second, Poll: 50 * time.Millisecond})
			mu.Lock()
			defer mu.Unlock()
			var he *HeldError
			switch {
			case err == nil:
				winners = append(winners, l)
			case errors.As(err, &he):
				helds = append(helds, he)
			default:
				others = append(others, err)
			}
		}()
	}
	wg.Wait()
	if len(winners) != 1 || len(helds) != n-1 || len(others) != 0 {
		t.Fatalf("%d winners, %d held errors, other errors %v", len(winners), len(helds), others)
	}
	for _, he := range helds {
		if he.Holder != winners[0].Holder() {
			t.Errorf("HeldError names %s, the winner is %s", he.Holder, winners[0].Holder())
		}
	}
	if err := winners[0].Release(ctx); err != nil {
		t.Error(err)
	}
}

// testLockNamespaceTerminating: while the namespace is being deleted (held
// by a finalizer) no lock can be taken and Acquire says why; once it is
// gone, Acquire recreates it.
func testLockNamespaceTerminating(t *testing.T, c kubernetes.Interface, ns string) {
	ctx := testCtx(t)
	createNamespace(t, c, ns)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pin", Finalizers: []string{"onprem.dev/test"}}}
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := Acquire(ctx, c, ns, LockOptions{Holder: "early", Wait: 2 * time.Second, Poll: 200 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "namespace "+ns+" is being deleted") {
		t.Fatalf("Acquire in a terminating namespace = %v", err)
	}

	// Let the namespace go; an Acquire waiting meanwhile gets the lock in
	// the recreated namespace.
	done := make(chan error, 1)
	var l *Lock
	go func() {
		var err error
		l, err = Acquire(ctx, c, ns, LockOptions{Holder: "patient", Wait: 60 * time.Second, Poll: 200 * time.Millisecond})
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, "pin", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Acquire once the namespace is gone = %v", err)
	}
	defer l.Release(ctx)
	nsObj, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || nsObj.DeletionTimestamp != nil {
		t.Errorf("namespace = %+v, %v", nsObj, err)
	}
}
