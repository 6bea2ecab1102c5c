package runner

import (
	"context"
	"fmt"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/kube"
)

// UninstallResult is what an uninstall removed.
type UninstallResult = attachment.Removal

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
		return nil, NotFound(p.State, name)
	}
	if o.Timeout <= 0 {
		o.Timeout = apply.DefaultTimeout
	}
	out := &UninstallResult{Name: name}
	if cl == nil {
		out.Kept = append(out.Kept, fmt.Sprintf("everything on the runner's cluster (%s, namespaces %s and %s)", rec.Server, rec.Namespace, rec.EngineNamespace))
	} else {
		if cl.Server != rec.Server {
			return nil, &attachment.ConflictError{Msg: fmt.Sprintf("runner %s runs on the cluster at %s, but the cluster given reaches %s: "+
				"give its kubeconfig and context (--runner-kubeconfig, --runner-context), or --forget it if that cluster is gone",
				name, rec.Server, cl.Server)}
		}
		if err := attachmentOf(name, rec).RemoveInto(ctx, cl, o.Timeout, o.Reporter, out); err != nil {
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
