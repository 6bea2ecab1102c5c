package action

import (
	"context"
	"time"

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

// attachmentKind is what a listing needs of one kind of attachment: how
// to reach one's cluster, and its status when reached or not.
type attachmentKind[S any] struct {
	connect     func(ctx context.Context, name string, platform kube.Options) (*kube.Cluster, error)
	unreachable func(name string, err error) S
	observe     func(ctx context.Context, cl *kube.Cluster, name string) S
}

// observeEach is the status of each named attachment, each on its
// cluster, reached within timeout (default 5 s); one that cannot be
// reached shows as unreachable. Only a cancelled ctx fails it.
func observeEach[S any](ctx context.Context, k attachmentKind[S], names []string, platform kube.Options, timeout time.Duration) ([]S, error) {
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	platform.Timeout = timeout
	out := []S{}
	for _, n := range names {
		cl, err := k.connect(ctx, n, platform)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			out = append(out, k.unreachable(n, err))
			continue
		}
		out = append(out, k.observe(ctx, cl, n))
	}
	return out, nil
}
