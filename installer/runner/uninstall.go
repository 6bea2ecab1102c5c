package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// UninstallResult is what an uninstall removed.
type UninstallResult struct {
	Name string `json:"name"`
	// Removed lists what went, on both clusters.
	Removed []string `json:"removed"`
	// Kept lists what stayed (namespaces onprem did not create; with
	// Forget, everything on the runner's cluster).
	Kept []string `json:"kept,omitempty"`
}

// Uninstall removes a runner: on its cluster (cl) the Helm release, the
// token Secret, the copies of the platform's CA and pull Secret, and the
// namespaces onprem created for it (waited for until gone); then its
// registration with the platform and its record. With cl nil (the
// runner's cluster is gone for good) only the platform's side is removed.
// Something that fails on the runner's cluster leaves the registration
// and the record in place, so that a re-run finishes the job.
func Uninstall(ctx context.Context, p *Platform, name string, cl *kube.Cluster, o Options) (*UninstallResult, error) {
	rec, ok := p.State.Runners[name]
	if !ok {
		return nil, &NotFoundError{Name: name, Known: Names(p.State)}
	}
	if o.Timeout <= 0 {
		o.Timeout = apply.DefaultTimeout
	}
	out := &UninstallResult{Name: name}
	if cl == nil {
		out.Kept = append(out.Kept, fmt.Sprintf("everything on the runner's cluster (%s, namespaces %s and %s)", rec.Server, rec.Namespace, rec.EngineNamespace))
	} else {
		if cl.Server != rec.Server {
			return nil, &ConflictError{fmt.Sprintf("runner %s runs on the cluster at %s, but the cluster given reaches %s: "+
				"give its kubeconfig and context (--runner-kubeconfig, --runner-context), or --forget it if that cluster is gone",
				name, rec.Server, cl.Server)}
		}
		if err := removeRemote(ctx, cl, name, rec, o, out); err != nil {
			return out, err
		}
	}
	if err := unregister(ctx, p.Cluster.Client, p.Namespace, name); err != nil {
		return out, err
	}
	out.Removed = append(out.Removed, fmt.Sprintf("its registration (key %s of Secret %s/%s)", name, p.Namespace, Registrations))
	delete(p.State.Runners, name)
	if err := p.Store.Save(ctx, p.State); err != nil {
		p.State.Runners[name] = rec
		return out, fmt.Errorf("runner %s: removing its record: %w", name, err)
	}
	out.Removed = append(out.Removed, "its record in the installation's state")
	return out, nil
}

func removeRemote(ctx context.Context, cl *kube.Cluster, name string, rec state.Runner, o Options, out *UninstallResult) error {
	start := time.Now()
	if o.Reporter != nil {
		o.Reporter.Report(apply.Event{Component: rec.Release, Phase: apply.PhaseApplying})
	}
	fail := func(err error) error {
		if o.Reporter != nil {
			o.Reporter.Report(apply.Event{Component: rec.Release, Phase: apply.PhaseFailed, Err: err, Elapsed: time.Since(start)})
		}
		return err
	}
	if err := apply.NewHelmReleases(cl.Getter, rec.Namespace, nil).Uninstall(ctx, rec.Release, o.Timeout); err != nil {
		return fail(fmt.Errorf("runner %s: %w", name, err))
	}
	out.Removed = append(out.Removed, fmt.Sprintf("Helm release %s/%s", rec.Namespace, rec.Release))

	// The token Secret, the pull Secret copies and the CA ConfigMap: what
	// onprem put there for this runner, by label.
	sel := metav1.ListOptions{LabelSelector: LabelRunner + "=" + name + ",app.kubernetes.io/managed-by=" + state.ManagedBy}
	for _, ns := range []string{rec.Namespace, rec.EngineNamespace} {
		if err := cl.Client.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil && !apierrors.IsNotFound(err) {
			return fail(fmt.Errorf("runner %s: deleting its Secrets in %s: %w", name, ns, err))
		}
		if err := cl.Client.CoreV1().ConfigMaps(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, sel); err != nil && !apierrors.IsNotFound(err) {
			return fail(fmt.Errorf("runner %s: deleting its ConfigMaps in %s: %w", name, ns, err))
		}
	}
	out.Removed = append(out.Removed, fmt.Sprintf("Secret %s/%s (the token)", rec.Namespace, TokenSecret))

	var gone []string
	for _, ns := range []string{rec.EngineNamespace, rec.Namespace} {
		cur, err := cl.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fail(fmt.Errorf("runner %s: reading namespace %s: %w", name, ns, err))
		}
		if cur.Annotations[AnnotationCreatedBy] != state.ManagedBy || cur.Labels[LabelRunner] != name {
			out.Kept = append(out.Kept, "namespace "+ns+" (onprem did not create it)")
			continue
		}
		if err := cl.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fail(fmt.Errorf("runner %s: deleting namespace %s: %w", name, ns, err))
		}
		gone = append(gone, ns)
	}
	// Wait until the namespaces are gone, so that installing the runner
	// again right away does not find them terminating.
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, o.Timeout, true, func(ctx context.Context) (bool, error) {
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
			err = fmt.Errorf("still terminating after %s", o.Timeout)
		}
		return fail(fmt.Errorf("runner %s: waiting for namespaces %v to go: %w", name, gone, err))
	}
	for _, ns := range gone {
		out.Removed = append(out.Removed, "namespace "+ns)
	}
	if o.Reporter != nil {
		o.Reporter.Report(apply.Event{Component: rec.Release, Phase: apply.PhaseReady, Action: "removed", Elapsed: time.Since(start)})
	}
	return nil
}
