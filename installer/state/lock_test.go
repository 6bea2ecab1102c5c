package state

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/version"
)

func TestDefaultHolder(t *testing.T) {
	h := DefaultHolder("install")
	re := regexp.MustCompile(`^\S+@\S+ pid (\d+) \(onprem (\S+) install\)$`)
	m := re.FindStringSubmatch(h)
	if m == nil {
		t.Fatalf("DefaultHolder = %q, want user@host pid N (onprem VERSION install)", h)
	}
	if m[1] != fmt.Sprint(os.Getpid()) || m[2] != version.Version {
		t.Errorf("DefaultHolder = %q", h)
	}
	if got := DefaultHolder(""); !strings.HasSuffix(got, "(onprem "+version.Version+")") {
		t.Errorf("DefaultHolder(\"\") = %q", got)
	}
}

func TestHeldErrorMessage(t *testing.T) {
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	e := &HeldError{Namespace: "platform", Holder: "ana@ops-1 pid 42 (onprem 0.1.0 upgrade)", Since: since,
		Expires: since.Add(30 * time.Second), Waited: 2 * time.Minute}
	msg := e.Error()
	for _, want := range []string{
		"is held by ana@ops-1 pid 42 (onprem 0.1.0 upgrade) since " + since.Local().Format(time.RFC3339),
		"it expires at " + since.Add(30*time.Second).Local().Format(time.RFC3339) + " if that process is gone",
		"waited 2m0s",
		"if you are sure no other onprem is running, wait or delete the Lease: kubectl -n platform delete lease onprem-lock",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q\nlacks %q", msg, want)
		}
	}
}

func TestLockOptions(t *testing.T) {
	o := LockOptions{}
	if err := o.defaults(); err != nil {
		t.Fatal(err)
	}
	if o.Wait != 2*time.Minute || o.LeaseDuration != 30*time.Second || o.RenewEvery != 10*time.Second || o.Poll != time.Second || o.Holder == "" {
		t.Errorf("defaults = %+v", o)
	}
	o = LockOptions{LeaseDuration: 1500 * time.Millisecond}
	if err := o.defaults(); err != nil || o.LeaseDuration != 2*time.Second {
		t.Errorf("1.5s lease = %v, %v; want rounded up to 2s", o.LeaseDuration, err)
	}
	for _, bad := range []LockOptions{
		{LeaseDuration: 500 * time.Millisecond},
		{LeaseDuration: 10 * time.Second, RenewEvery: 5 * time.Second},
		{LeaseDuration: 10 * time.Second, RenewEvery: -time.Second},
		{Wait: -time.Second},
	} {
		if err := bad.defaults(); err == nil {
			t.Errorf("options %+v accepted", bad)
		}
	}
}

// TestLockLostWhenRenewalFails: an API server that stops accepting the
// renewals makes Lost fire before the lease could expire.
func TestLockLostWhenRenewalFails(t *testing.T) {
	c := fake.NewClientset()
	var failing atomic.Bool
	c.PrependReactor("update", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failing.Load() {
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	ctx := context.Background()
	l, err := Acquire(ctx, c, "platform", LockOptions{Holder: "h", LeaseDuration: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().Namespaces().Get(ctx, "platform", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace not created: %v", err)
	}
	// Renewals work for a while.
	time.Sleep(1500 * time.Millisecond)
	if l.Err() != nil {
		t.Fatalf("lost while renewals work: %v", l.Err())
	}
	failing.Store(true)
	start := time.Now()
	select {
	case <-l.Lost():
	case <-time.After(4 * time.Second):
		t.Fatal("Lost() did not fire while renewals failed")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Lost fired %s after renewals began to fail, after the 2s lease could have expired", d)
	}
	if err := l.Err(); err == nil || !strings.Contains(err.Error(), "could not renew") || !strings.Contains(err.Error(), "request timed out") {
		t.Errorf("Err() = %v", err)
	}
	failing.Store(false)
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release = %v", err)
	}
}

// ReadLock shows who holds the lock without taking it: nothing when there
// is no Lease or it is free, the holder and expiry when held, and whether
// the holder stopped renewing it.
func TestReadLock(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	c := fake.NewClientset()
	if st, err := ReadLock(ctx, c, "onprem", now); st != nil || err != nil {
		t.Fatalf("no Lease: %+v, %v", st, err)
	}
	holder, seconds := "ops@host pid 42 (onprem upgrade)", int32(30)
	acquired := metav1.NewMicroTime(now.Add(-time.Minute))
	renewed := metav1.NewMicroTime(now.Add(-10 * time.Second))
	le := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName, Namespace: "onprem"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &seconds, AcquireTime: &acquired, RenewTime: &renewed}}
	if _, err := c.CoordinationV1().Leases("onprem").Create(ctx, le, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := ReadLock(ctx, c, "onprem", now)
	if err != nil || st == nil || st.Holder != holder || !st.Since.Equal(acquired.Time) || !st.Expires.Equal(renewed.Add(30*time.Second)) || st.Expired {
		t.Fatalf("held: %+v, %v", st, err)
	}
	if st, _ := ReadLock(ctx, c, "onprem", now.Add(time.Minute)); st == nil || !st.Expired {
		t.Errorf("a minute later, without renewal: %+v", st)
	}
	empty := ""
	le.Spec.HolderIdentity = &empty
	if _, err := c.CoordinationV1().Leases("onprem").Update(ctx, le, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, err := ReadLock(ctx, c, "onprem", now); st != nil || err != nil {
		t.Errorf("released: %+v, %v", st, err)
	}
}
