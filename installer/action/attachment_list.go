package action

import (
	"context"
	"time"

	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// listed is what a listing of attachments reads: the platform's namespace,
// its cluster and the installation's record (no lock: it only reads).
func (t *Target) listed(ctx context.Context) (string, *kube.Cluster, *state.State, error) {
	ns, err := t.namespace(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	pc, err := connect(ctx, t.Conn, t.Cluster)
	if err != nil {
		return "", nil, nil, err
	}
	st, err := state.NewStore(pc.Client, ns).Load(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	return ns, pc, st, nil
}

// attachmentList lists the attachments of one kind recorded in the
// installation's state, each with its status on its own cluster
// (RunnerList, RuntimeList).
type attachmentList[R, S any] struct {
	kind *attachmentKind[R, S]
	Target
	// Timeout bounds the connection to each one's cluster (default 5 s).
	Timeout time.Duration
}

// Run lists them (no lock: it only reads): the platform's namespace, the
// record they were read from and their statuses, by name. One whose
// cluster cannot be reached shows as unreachable; only a cancelled ctx
// fails the listing then.
func (a *attachmentList[R, S]) Run(ctx context.Context) (string, *state.State, []S, error) {
	k := a.kind
	ns, pc, st, err := a.Target.listed(ctx)
	if err != nil {
		return "", nil, nil, err
	}
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	platform := a.Cluster
	platform.Timeout = timeout
	connect := k.connectListed
	if connect == nil {
		connect = k.connect
	}
	records := k.records(st)
	out := []S{}
	for _, n := range attachment.Names(records) {
		cl, err := connect(ctx, n, k.ref(records[n]), platform, pc)
		if err != nil {
			if ctx.Err() != nil {
				return "", nil, nil, ctx.Err()
			}
			out = append(out, k.unreachable(st, n, err))
			continue
		}
		out = append(out, k.observe(ctx, cl, st, n))
	}
	return ns, st, out, nil
}
