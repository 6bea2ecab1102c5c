// Package attachment is what runners and GitOps runtimes share on their
// own cluster, and what a third kind of Helm release that onprem installs
// beside the platform (on its cluster or another one) would share too:
// the marks onprem puts on what it creates for one, the state of its Helm
// release and Deployments, and its removal.
//
// Each kind keeps its own record in the installation's state, its own
// rules (installer/runner, installer/gitops) and its own objects; an
// Attachment names what this package needs of one.
package attachment

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
)

// Platform is the platform's side of an operation on attachments: its
// cluster and namespace, the installation's record (State; read under the
// lock when Store is set) and, when the caller read it, the platform's
// configuration (the TLS and pull Secrets' names).
type Platform struct {
	Cluster      *kube.Cluster
	Namespace    string
	Store        *state.Store
	State        *state.State
	Installation *config.Installation
}

// AnnotationCreatedBy marks a namespace that onprem created for an
// attachment, and so removes with it; a namespace without it is the
// operator's and stays.
const AnnotationCreatedBy = "onprem.dev/created-by"

// Attachment is one installed attachment, as its cluster holds it.
type Attachment struct {
	// Kind names the kind in messages: "runner", "runtime".
	Kind string
	Name string
	// Label marks everything onprem creates for it (with Name as value):
	// onprem.dev/runner, onprem.dev/runtime.
	Label string
	// Release is its Helm release, in Namespaces[0].
	Release string
	// Namespaces are its namespaces, the release's first.
	Namespaces []string
}

func (a Attachment) errorf(format string, args ...any) error {
	return fmt.Errorf(a.Kind+" "+a.Name+": "+format, args...)
}

// ReleaseState reads the attachment's Helm release: its status ("missing"
// when there is none, "unknown" with a problem when it cannot be read)
// and revision.
func (a Attachment) ReleaseState(ctx context.Context, cl *kube.Cluster) (status string, revision int, problem string) {
	info, err := apply.NewHelmReleases(cl.Getter, a.Namespaces[0], nil).Last(ctx, a.Release)
	switch {
	case err != nil:
		return "unknown", 0, "reading its Helm release: " + err.Error()
	case info == nil:
		return "missing", 0, ""
	}
	return info.Status, info.Revision, ""
}

// Readiness is a Deployment's ready and desired replicas.
type Readiness struct {
	Ready   int32 `json:"ready"`
	Desired int32 `json:"desired"`
}

// OK reports a Deployment that wants replicas and has them all ready.
func (r Readiness) OK() bool { return r.Desired > 0 && r.Ready >= r.Desired }

// ReadinessOf is a Deployment's readiness (a nil replica count is one).
func ReadinessOf(d *appsv1.Deployment) Readiness {
	desired := int32(1)
	if d.Spec.Replicas != nil {
		desired = *d.Spec.Replicas
	}
	return Readiness{Ready: d.Status.ReadyReplicas, Desired: desired}
}

// Outcome is what applying an attachment's release did.
type Outcome struct {
	Action   apply.Action
	Revision int
	Error    string
	NotReady []string
	// Status is the record's status after it: "deployed", or "failed:
	// WHY".
	Status string
}

// ApplyRelease applies the attachment's release (component c of
// version, in Namespaces[0]) and waits until every Deployment of it is
// ready (WaitReady), within what is left of timeout since start.
func (a Attachment) ApplyRelease(ctx context.Context, cl *kube.Cluster, version string, c *render.Component, timeout time.Duration, start time.Time, rep apply.Reporter) (Outcome, error) {
	cr, err := apply.ApplyOne(ctx, cl, version, a.Namespaces[0], c, timeout, rep)
	o := Outcome{Action: cr.Action, Revision: cr.Revision, Error: cr.Error, NotReady: cr.NotReady}
	if err == nil {
		if err = a.WaitReady(ctx, cl, Remaining(timeout, start)); err != nil {
			o.Action, o.Error = apply.Failed, err.Error()
		}
	}
	if err != nil {
		o.Status = "failed: " + o.Error
		return o, err
	}
	o.Status = "deployed"
	return o, nil
}

// RecordedKubeconfig is the kubeconfig path of ref as a record keeps it:
// absolute, so that a later command run from another folder reaches the
// same file (as given when it cannot be made absolute).
func RecordedKubeconfig(ref config.ClusterRef) string {
	if ref.Kubeconfig == "" {
		return ""
	}
	if abs, err := filepath.Abs(ref.Kubeconfig); err == nil {
		return abs
	}
	return ref.Kubeconfig
}

// RecordBefore stores rec as records[a.Name] (the records of a's kind in
// p.State) and saves the state before a's release is applied, so that an
// attachment whose first install fails half-way can still be found and
// removed. When the save fails, a new record (existed false) is taken
// back.
func RecordBefore[R any](ctx context.Context, p *Platform, a Attachment, records map[string]R, rec R, existed bool) error {
	records[a.Name] = rec
	if err := p.Store.Save(ctx, p.State); err != nil {
		if !existed {
			delete(records, a.Name)
		}
		return a.errorf("recording it: %w", err)
	}
	return nil
}

// RecordFields says where a record of one kind keeps what an apply
// changes: its status, its Helm revision and when it was last updated.
type RecordFields[R any] func(rec *R) (status *string, revision *int, updated *time.Time)

// ApplyRecorded applies a's release (component c of version: ApplyRelease)
// on cl and records how it ended: rec, with its status (and its revision,
// when the apply succeeded) set, becomes records[a.Name] (SaveRecord,
// stamped with the time when it changed). Its errors name the
// attachment; a failed save is joined to a failed apply.
func ApplyRecorded[R comparable](ctx context.Context, p *Platform, cl *kube.Cluster, a Attachment, records map[string]R, rec R, fields RecordFields[R],
	version string, c *render.Component, timeout time.Duration, start time.Time, rep apply.Reporter) (Outcome, error) {
	out, aerr := a.ApplyRelease(ctx, cl, version, c, timeout, start, rep)
	status, revision, _ := fields(&rec)
	*status = out.Status
	if aerr == nil {
		*revision = out.Revision
	}
	touch := func(r *R) {
		_, _, updated := fields(r)
		*updated = time.Now().UTC()
	}
	if err := SaveRecord(ctx, p.Store, p.State, records, a.Name, rec, touch); err != nil {
		return out, errors.Join(aerr, a.errorf("recording it: %w", err))
	}
	if aerr != nil {
		return out, a.errorf("%w", aerr)
	}
	return out, nil
}

// SaveRecord stores rec as records[name] and saves the state when it
// differs from what records holds, stamping it with touch first (its
// UpdatedAt). The save outlives ctx: the outcome of an apply that was
// cancelled is recorded too.
func SaveRecord[R comparable](ctx context.Context, store *state.Store, st *state.State, records map[string]R, name string, rec R, touch func(*R)) error {
	if cur, ok := records[name]; ok && cur == rec {
		return nil
	}
	touch(&rec)
	records[name] = rec
	return store.Save(context.WithoutCancel(ctx), st)
}

// WaitReady waits until every Deployment of the attachment's release (the
// objects labelled render.ComponentLabel=Release in its namespaces) has
// all the replicas it wants ready, or until timeout. It is the same test
// as the listings' (ReadinessOf), made after Helm's own wait: that wait
// (kstatus) once let a runtime's release through with a Deployment still
// at 0/1, and a listing a moment later said not ready. "Ready" after an
// install means what "ready" means in a listing. Its error does not
// name the attachment (the caller's does).
func (a Attachment) WaitReady(ctx context.Context, cl *kube.Cluster, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = apply.DefaultTimeout
	}
	var waiting []string
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		waiting, lastErr = waiting[:0], nil
		for _, ns := range a.Namespaces {
			if ns == "" {
				continue
			}
			deps, err := cl.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: render.ComponentLabel + "=" + a.Release})
			if err != nil {
				lastErr = err
				return false, nil
			}
			for i := range deps.Items {
				if r := ReadinessOf(&deps.Items[i]); r.Ready < r.Desired {
					waiting = append(waiting, fmt.Sprintf("%s/%s %d/%d", ns, deps.Items[i].Name, r.Ready, r.Desired))
				}
			}
		}
		return len(waiting) == 0, nil
	})
	switch {
	case err == nil:
		return nil
	case lastErr != nil:
		return fmt.Errorf("reading its Deployments: %w", lastErr)
	default:
		return fmt.Errorf("not ready within %s: %s: %w", timeout.Round(time.Second), strings.Join(waiting, ", "), err)
	}
}

// Remaining is what is left of timeout (apply.DefaultTimeout when zero)
// since start, and never less than half a minute: the time a wait after
// the apply gets.
func Remaining(timeout time.Duration, start time.Time) time.Duration {
	if timeout <= 0 {
		timeout = apply.DefaultTimeout
	}
	return max(timeout-time.Since(start), 30*time.Second)
}

// Removal is what an uninstall of an attachment removed, on its cluster
// and the platform's.
type Removal struct {
	Name string `json:"name"`
	// Removed lists what went.
	Removed []string `json:"removed"`
	// Kept lists what stayed (namespaces onprem did not create; with a
	// forget, everything on the attachment's cluster).
	Kept []string `json:"kept,omitempty"`
}

// Remove removes the attachment from its cluster: the Helm release, the
// Secrets and ConfigMaps onprem labelled for it in its namespaces, and
// the namespaces onprem created for it (waited for until gone, so that an
// install right after does not find them terminating). It returns what
// went and what stayed; reporter (optional) sees it as one component.
func (a Attachment) Remove(ctx context.Context, cl *kube.Cluster, timeout time.Duration, reporter apply.Reporter) (removed, kept []string, err error) {
	if timeout <= 0 {
		timeout = apply.DefaultTimeout
	}
	var namespaces []string // never "": that would be every namespace
	for _, ns := range a.Namespaces {
		if ns != "" && !slices.Contains(namespaces, ns) {
			namespaces = append(namespaces, ns)
		}
	}
	if len(namespaces) == 0 {
		return nil, nil, a.errorf("no namespace recorded")
	}
	start := time.Now()
	report := func(ph apply.Phase, err error, action apply.Action) {
		if reporter != nil {
			reporter.Report(apply.Event{Component: a.Release, Phase: ph, Err: err, Action: action, Elapsed: time.Since(start)})
		}
	}
	fail := func(err error) ([]string, []string, error) {
		report(apply.PhaseFailed, err, "")
		return removed, kept, err
	}
	report(apply.PhaseApplying, nil, "")
	if err := apply.NewHelmReleases(cl.Getter, namespaces[0], nil).Uninstall(ctx, a.Release, timeout); err != nil {
		return fail(a.errorf("%w", err))
	}
	removed = append(removed, fmt.Sprintf("Helm release %s/%s", namespaces[0], a.Release))

	sel := metav1.ListOptions{LabelSelector: a.Label + "=" + a.Name + ",app.kubernetes.io/managed-by=" + state.ManagedBy}
	for _, ns := range namespaces {
		if err := cl.Client.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil && !apierrors.IsNotFound(err) {
			return fail(a.errorf("deleting its Secrets in %s: %w", ns, err))
		}
		if err := cl.Client.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil && !apierrors.IsNotFound(err) {
			return fail(a.errorf("deleting its ConfigMaps in %s: %w", ns, err))
		}
		removed = append(removed, "its Secrets and ConfigMaps in "+ns)
	}

	var gone []string
	for _, ns := range slices.Backward(namespaces) {
		cur, err := cl.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fail(a.errorf("reading namespace %s: %w", ns, err))
		}
		if cur.Annotations[AnnotationCreatedBy] != state.ManagedBy || cur.Labels[a.Label] != a.Name {
			kept = append(kept, "namespace "+ns+" (onprem did not create it)")
			continue
		}
		if err := cl.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fail(a.errorf("deleting namespace %s: %w", ns, err))
		}
		gone = append(gone, ns)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, ns := range gone {
			_, err := cl.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err == nil {
				return false, nil
			}
			if !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("still terminating after %s", timeout)
		}
		return fail(a.errorf("waiting for namespaces %v to go: %w", gone, err))
	}
	for _, ns := range gone {
		removed = append(removed, "namespace "+ns)
	}
	report(apply.PhaseReady, nil, "removed")
	return removed, kept, nil
}
