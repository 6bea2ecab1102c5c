package action

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// fakeCluster is a connection over a fake clientset holding objs: what a
// verb needs to be run without an API server, as long as it does not reach
// Helm (no Getter).
func fakeCluster(objs ...runtime.Object) (*Configuration, *fake.Clientset) {
	c := fake.NewClientset(objs...)
	return Connected(&kube.Cluster{Client: c, Server: "https://fake.invalid", ServerVersion: "v1.36.0"}), c
}

// The connection is made once and kept; a failed one is not kept.
func TestConfigurationConnectsOnce(t *testing.T) {
	ctx := context.Background()
	conf, _ := fakeCluster()
	a, err := conf.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := conf.Cluster(ctx)
	if a != b {
		t.Error("a second call connected again")
	}
	if configuration(conf, kube.Options{Kubeconfig: "elsewhere"}) != conf {
		t.Error("a verb's Conn is not the configuration it works with")
	}

	missing := NewConfiguration(kube.Options{Kubeconfig: filepath.Join(t.TempDir(), "absent")})
	for range 2 {
		_, err := missing.Cluster(ctx)
		var ue *kube.UnreachableError
		if !errors.As(err, &ue) || ue.Reason != kube.ReasonKubeconfigMissing {
			t.Fatalf("missing kubeconfig: %v", err)
		}
	}
	if missing.cluster != nil {
		t.Error("a failed connection was kept")
	}
}

func isNotInstalled(t *testing.T, err error, ns string) {
	t.Helper()
	var ni *NotInstalledError
	var ie *InputError
	if !errors.As(err, &ni) || ni.Namespace != ns || !errors.As(err, &ie) {
		t.Fatalf("want the not-installed input error for %s, got %v", ns, err)
	}
}

// Rollback in a namespace with no record: the one not-installed answer,
// given under the lock, which is released.
func TestRollbackNotInstalled(t *testing.T) {
	conf, c := fakeCluster()
	_, err := (&Rollback{Target: Target{Namespace: "onprem", Conn: conf}, LockWait: time.Second}).Run(context.Background())
	isNotInstalled(t, err, "onprem")
	// Released: another onprem takes it at once.
	l, err := state.Acquire(context.Background(), c, "onprem", state.LockOptions{Wait: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("the lock was not released: %v", err)
	}
	_ = l.Release(context.Background())
}

// A lock held by another onprem refuses the verb, naming the holder;
// nothing is read or changed.
func TestRollbackRefusedWhileLocked(t *testing.T) {
	conf, c := fakeCluster()
	ctx := context.Background()
	other, err := state.Acquire(ctx, c, "onprem", state.LockOptions{Holder: "alice@laptop (upgrade)"})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Release(ctx)
	_, err = (&Rollback{Target: Target{Namespace: "onprem", Conn: conf}, LockWait: 50 * time.Millisecond}).Run(ctx)
	var held *state.HeldError
	if !errors.As(err, &held) || held.Holder != "alice@laptop (upgrade)" {
		t.Fatalf("want the lock refused, got %v", err)
	}
}

// The verbs that read an installation answer the same for a namespace
// without one.
func TestNotInstalledAnswers(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "onprem"}}
	for name, run := range map[string]func(*Configuration) error{
		"rotate list": func(conf *Configuration) error {
			_, err := (&RotateList{Target: Target{Namespace: "onprem", Conn: conf}}).Run(ctx)
			return err
		},
		"rotate certificates --dry-run": func(conf *Configuration) error {
			_, err := (&RotateCertificates{Target: Target{Namespace: "onprem", Conn: conf}, DryRun: true}).Run(ctx)
			return err
		},
		"rotate keys --dry-run": func(conf *Configuration) error {
			_, err := (&RotateKeys{Target: Target{Namespace: "onprem", Conn: conf}, DryRun: true}).Run(ctx)
			return err
		},
		"rotate certificates": func(conf *Configuration) error {
			_, err := (&RotateCertificates{Target: Target{Namespace: "onprem", Conn: conf}, LockWait: time.Second}).Run(ctx)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			conf, _ := fakeCluster(ns)
			isNotInstalled(t, run(conf), "onprem")
		})
	}
}

// Uninstall refuses a namespace that does not exist, before it takes the
// lock (which would create it).
func TestUninstallMissingNamespace(t *testing.T) {
	conf, c := fakeCluster()
	_, err := (&Uninstall{Target: Target{Namespace: "elsewhere", Conn: conf}}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "nothing to uninstall there") {
		t.Fatalf("want the missing namespace refused, got %v", err)
	}
	if _, err := c.CoreV1().Namespaces().Get(context.Background(), "elsewhere", metav1.GetOptions{}); err == nil {
		t.Error("the namespace was created")
	}
	if l, _ := c.CoordinationV1().Leases("elsewhere").List(context.Background(), metav1.ListOptions{}); l != nil && len(l.Items) > 0 {
		t.Errorf("a lock was taken: %v", l.Items)
	}
}

// The record of a namespace without one is empty; LoadInstalled refuses
// it with the one not-installed answer.
func TestLoadNotInstalled(t *testing.T) {
	conf, _ := fakeCluster()
	_, _, st, err := conf.Load(context.Background(), "onprem")
	if err != nil {
		t.Fatal(err)
	}
	if st.Stored() || st.Version != "" {
		t.Fatalf("record: %+v", st)
	}
	_, _, _, err = conf.LoadInstalled(context.Background(), "onprem")
	isNotInstalled(t, err, "onprem")
}
