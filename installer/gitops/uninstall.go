package gitops

import (
	"context"
	"fmt"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/kube"
)

// UninstallResult is what an uninstall removed.
type UninstallResult = attachment.Removal

// CheckUninstall refuses to remove the configuration runtime while other
// runtimes exist, naming the command that moves the designation first.
func CheckUninstall(p *Platform, name string) error {
	if _, ok := p.State.Runtimes[name]; !ok {
		return NotFound(p.State, name)
	}
	rc := p.State.RuntimeConfig
	if rc == nil || rc.ConfigRuntime != name || len(p.State.Runtimes) == 1 {
		return nil
	}
	var others []string
	for _, n := range Names(p.State) {
		if n != name {
			others = append(others, n)
		}
	}
	return &attachment.ConflictError{Msg: fmt.Sprintf("runtime %s holds the configuration of all runtimes, and runtimes %v still use it: "+
		"designate another one first with 'onprem runtime designate-config %s', then uninstall %s", name, others, others[0], name)}
}

// Uninstall removes a runtime: on its cluster (cl) the Helm release (with
// the Argo CD objects of its CRDs: Git sources, managed clusters' Secrets
// stay with the namespace), the Git credentials and the namespace if onprem
// created it (waited for until gone); then its record. The configuration
// repository is left as it is: it is the operator's data. With cl nil (the
// cluster is gone for good) only the record is removed.
func Uninstall(ctx context.Context, p *Platform, name string, cl *kube.Cluster, o Options) (*UninstallResult, error) {
	if err := CheckUninstall(p, name); err != nil {
		return nil, err
	}
	rec := p.State.Runtimes[name]
	if o.Timeout <= 0 {
		o.Timeout = apply.DefaultTimeout
	}
	out := &UninstallResult{Name: name}
	if cl == nil {
		out.Kept = append(out.Kept, fmt.Sprintf("everything on the runtime's cluster (%s, namespace %s)", rec.Server, rec.Namespace))
	} else {
		if cl.Server != rec.Server {
			return nil, &attachment.ConflictError{Msg: fmt.Sprintf("runtime %s runs on the cluster at %s, but the cluster given reaches %s: "+
				"give its kubeconfig and context, or --forget it if that cluster is gone", name, rec.Server, cl.Server)}
		}
		if err := attachmentOf(name, rec).RemoveInto(ctx, cl, o.Timeout, o.Reporter, out); err != nil {
			return out, err
		}
	}
	delete(p.State.Runtimes, name)
	rcBefore := p.State.RuntimeConfig
	if len(p.State.Runtimes) == 0 {
		// The last runtime: the next one may use another repository.
		p.State.RuntimeConfig = nil
	}
	if err := p.Store.Save(ctx, p.State); err != nil {
		p.State.Runtimes[name], p.State.RuntimeConfig = rec, rcBefore
		return out, fmt.Errorf("runtime %s: removing its record: %w", name, err)
	}
	out.Removed = append(out.Removed, "its record in the installation's state")
	if rcBefore != nil && rcBefore.URL != "" {
		out.Kept = append(out.Kept, "the configuration repository "+rcBefore.URL+" and its content")
	}
	return out, nil
}
