package action

import (
	"context"
	"fmt"
	"time"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
)

// AttachmentUninstall is what removing an attachment takes, whatever its
// kind (RunnerUninstall and RuntimeUninstall add how their cluster is
// reached).
type AttachmentUninstall struct {
	// Target is the platform (cluster, namespace).
	Target
	Name string
	// Forget removes only the platform's side (a runner's registration
	// and record, a runtime's record), for an attachment whose cluster is
	// gone for good.
	Forget    bool
	Timeout   time.Duration
	LockWait  time.Duration
	LockLease time.Duration
	Reporter  apply.Reporter
}

// attachmentUninstall removes an attachment of one kind from its cluster
// and from the platform's side (RunnerUninstall, RuntimeUninstall).
type attachmentUninstall[R, S any] struct {
	kind *attachmentKind[R, S]
	AttachmentUninstall
	// Override reaches the attachment's cluster instead of as recorded.
	Override config.ClusterRef
}

// Run uninstalls the attachment.
func (a *attachmentUninstall[R, S]) Run(ctx context.Context) (*attachment.Removal, error) {
	k := a.kind
	if a.Name == "" {
		return nil, inputErr(fmt.Errorf("name the %s to uninstall", k.name))
	}
	if a.Forget && !a.Override.IsPlatformCluster() {
		return nil, inputErr(fmt.Errorf("--forget does not reach the %[1]s's cluster: leave out --%[1]s-kubeconfig and --%[1]s-context", k.name))
	}
	peeked, locked := k.uninstallPeeked, k.uninstallLocked
	if peeked == nil {
		peeked = k.recorded
	}
	if locked == nil {
		locked = k.recorded
	}
	ns, conf, pc, err := targetCluster(ctx, a.Target, a.Conn, a.Cluster)
	if err != nil {
		return nil, err
	}
	st, err := peekState(ctx, pc, ns)
	if err != nil {
		return nil, err
	}
	if err := peeked(&attachment.Platform{Cluster: pc, Namespace: ns, State: st}, a.Name); err != nil {
		return nil, err
	}
	ctx, h, err := conf.lockAndLoad(ctx, ns, k.name+" uninstall", a.LockWait, a.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	p := &attachment.Platform{Cluster: pc, Namespace: ns, Store: h.store, State: h.st}
	if err := locked(p, a.Name); err != nil {
		return nil, err
	}
	var cl *kube.Cluster
	if !a.Forget {
		ref := clusterRef(k.ref(k.records(p.State)[a.Name]), a.Override)
		if cl, err = k.connect(ctx, a.Name, ref, a.Cluster, pc); err != nil {
			return nil, fmt.Errorf("%w (if that cluster is gone for good, 'onprem %s uninstall %s --forget' removes %s only)", err, k.name, a.Name, k.forgets)
		}
	}
	return k.uninstall(ctx, p, a.Name, cl, a.Timeout, a.Reporter)
}
