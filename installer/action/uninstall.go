package action

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/version"
)

// Uninstall removes the platform's components in reverse dependency order.
// Without Purge it keeps the data: PersistentVolumeClaims, the generated
// secrets (so a reinstall finds the same credentials) and the state record.
// With Purge it deletes those and the namespace too.
type Uninstall struct {
	Target
	// Purge also deletes volumes, generated secrets, the state and the
	// namespace. It must be confirmed by the caller (Confirmed).
	Purge     bool
	Confirmed bool
	// Timeout bounds each component's removal.
	Timeout   time.Duration
	LockWait  time.Duration
	LockLease time.Duration
	Reporter  apply.Reporter
}

// UninstallResult is what an uninstall did.
type UninstallResult struct {
	Namespace string   `json:"namespace"`
	Removed   []string `json:"removed"`
	// Kept describes what stays (without --purge).
	Kept   []string `json:"kept,omitempty"`
	Purged bool     `json:"purged,omitempty"`
}

// ErrNotConfirmed is returned when Purge is asked without confirmation.
var ErrNotConfirmed = errors.New("--purge deletes every volume, generated secret and the namespace: confirm with --yes")

// Run uninstalls.
func (u *Uninstall) Run(ctx context.Context) (*UninstallResult, error) {
	if u.Purge && !u.Confirmed {
		return nil, inputErr(ErrNotConfirmed)
	}
	if u.Timeout <= 0 {
		u.Timeout = apply.DefaultTimeout
	}
	rep := u.Reporter
	if rep == nil {
		rep = apply.NewLineReporter(discard{})
	}
	ns, err := u.Target.namespace(ctx)
	if err != nil {
		return nil, err
	}
	cl, err := connect(ctx, u.Conn, u.Cluster)
	if err != nil {
		return nil, err
	}
	if _, err := cl.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		return nil, fmt.Errorf("namespace %s: %w (nothing to uninstall there; give --namespace or -c)", ns, err)
	}
	lock, err := state.Acquire(ctx, cl.Client, ns, state.LockOptions{Holder: state.DefaultHolder("uninstall"), Wait: u.LockWait, LeaseDuration: u.LockLease})
	if err != nil {
		return nil, err
	}
	defer lock.Release(context.WithoutCancel(ctx))
	store := state.NewStore(cl.Client, ns)
	st, err := store.Load(ctx)
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	if err := store.Begin(ctx, st, state.Operation{Kind: state.KindUninstall, FromVersion: st.Version, Started: time.Now(), Installer: version.Version, Host: host}); err != nil {
		return nil, err
	}
	releases := apply.NewHelmReleases(cl.Getter, ns, nil)
	order := orderedComponents(st)
	// Releases the state does not know of (an install killed before it
	// recorded them) go first.
	if names, err := releases.List(ctx); err == nil {
		for _, n := range names {
			if !slices.Contains(order, n) {
				order = append(order, n)
			}
		}
	}
	slices.Reverse(order)
	out := &UninstallResult{Namespace: ns}
	for _, name := range order {
		start := time.Now()
		rep.Report(apply.Event{Component: name, Phase: apply.PhaseApplying})
		if err := releases.Uninstall(ctx, name, u.Timeout); err != nil {
			rep.Report(apply.Event{Component: name, Phase: apply.PhaseFailed, Err: err, Elapsed: time.Since(start)})
			_ = store.Finish(context.WithoutCancel(ctx), st, state.OutcomeFailed, err.Error())
			return out, err
		}
		delete(st.Components, name)
		out.Removed = append(out.Removed, name)
		rep.Report(apply.Event{Component: name, Phase: apply.PhaseReady, Action: "removed", Elapsed: time.Since(start)})
	}
	if !u.Purge {
		out.Kept = []string{
			"PersistentVolumeClaims (the databases' data)",
			"generated secrets (a reinstall reuses the same credentials)",
			"the state record and the namespace " + ns,
		}
		if err := store.Finish(ctx, st, state.OutcomeSucceeded, fmt.Sprintf("%d components removed; data kept", len(out.Removed))); err != nil {
			return out, err
		}
		return out, nil
	}
	if err := purge(ctx, cl, ns); err != nil {
		return out, err
	}
	out.Purged = true
	return out, nil
}

// purge deletes what an uninstall keeps, and the namespace.
func purge(ctx context.Context, cl *kube.Cluster, ns string) error {
	c := cl.Client.CoreV1()
	var errs []error
	if err := c.PersistentVolumeClaims(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=onprem"}); err != nil {
		errs = append(errs, fmt.Errorf("deleting volumes: %w", err))
	}
	if err := c.Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "onprem.dev/generated=true"}); err != nil {
		errs = append(errs, fmt.Errorf("deleting generated secrets: %w", err))
	}
	if err := state.NewStore(cl.Client, ns).Delete(ctx); err != nil {
		errs = append(errs, fmt.Errorf("deleting the state: %w", err))
	}
	if err := c.Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		errs = append(errs, fmt.Errorf("deleting namespace %s: %w", ns, err))
	}
	return errors.Join(errs...)
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
