package action

import (
	"context"
	"fmt"
	"time"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// attachmentKind is one kind of attachment (something onprem installs
// beside the platform, on its cluster or another one, and records in the
// installation's state: runners, runnerKind; GitOps runtimes,
// runtimeKind) as the attachment verbs see it: R is its record in the
// state, S its status in a listing. The verbs (attachmentList,
// attachmentUpgrade, attachmentUninstall) hold the flow, the messages and
// the exit codes every kind shares; a kind gives them this, and keeps its
// own rules in its own package (installer/runner, installer/gitops).
type attachmentKind[R, S any] struct {
	// name names the kind in messages, in its commands ('onprem NAME
	// uninstall') and in its flags (--NAME-kubeconfig, --NAME-context):
	// "runner", "runtime".
	name string
	// records are its records in st, by name.
	records func(st *state.State) map[string]R
	// notFound says that no attachment of the kind called name is
	// recorded in st (an *attachment.NotFoundError).
	notFound func(st *state.State, name string) error
	// ref is how a record says the attachment's cluster is reached;
	// server is the API server of that cluster, as recorded.
	ref    func(rec R) config.ClusterRef
	server func(rec R) string
	// connect reaches the attachment's cluster by ref (the platform's
	// connection pc itself when ref names no other cluster), its error
	// saying what that cluster is for; connectListed is connect in a
	// listing (nil: connect).
	connect, connectListed func(ctx context.Context, name string, ref config.ClusterRef, platform kube.Options, pc *kube.Cluster) (*kube.Cluster, error)
	// observe is the attachment's status read on its cluster cl;
	// unreachable its status when that cluster cannot be reached.
	observe     func(ctx context.Context, cl *kube.Cluster, st *state.State, name string) S
	unreachable func(st *state.State, name string, err error) S

	// uninstallPeeked checks an uninstall of name against the record read
	// before the lock (so that a refusal neither waits for the lock nor
	// creates the namespace that taking it would), uninstallLocked
	// against the record read under it; both answer input errors. nil:
	// the attachment must be recorded (recorded).
	uninstallPeeked, uninstallLocked func(p *attachment.Platform, name string) error
	// forgets says what an uninstall with --forget removes, for the hint
	// given when the attachment's cluster cannot be reached: "the
	// platform's side", "the record".
	forgets string
	// uninstall removes the attachment name: from its cluster cl (nil: it
	// is forgotten, its cluster left alone), then from the platform's
	// side p, under the lock. Its errors are marked as the kind marks
	// them (inputErr).
	uninstall func(ctx context.Context, p *attachment.Platform, name string, cl *kube.Cluster, timeout time.Duration, reporter apply.Reporter) (*attachment.Removal, error)
}

// recorded refuses, with the kind's not-found input error, an attachment
// name that p's record does not hold.
func (k *attachmentKind[R, S]) recorded(p *attachment.Platform, name string) error {
	if _, ok := k.records(p.State)[name]; !ok {
		return inputErr(k.notFound(p.State, name))
	}
	return nil
}

// clusterRef is how an attachment's cluster is reached: by override when
// it is given (a kubeconfig path or a context name may differ on this
// machine from the ones recorded), else as recorded.
func clusterRef(recorded, override config.ClusterRef) config.ClusterRef {
	if !override.IsPlatformCluster() {
		return override
	}
	return recorded
}

// openPlatform takes the installation's lock on the platform's cluster and
// reads its record, for an install or upgrade (verb) of attachments of a
// kind ("runner", "runtime": the lock is held as "KIND VERB"); the
// platform must be installed, else the refusal names the kind's own
// cluster flags beside the platform's.
func openPlatform(ctx context.Context, l *Loaded, pc *kube.Cluster, kind, verb string, wait, lease time.Duration) (*attachment.Platform, func(), context.Context, error) {
	ns := l.Installation.Spec.Namespace
	notInstalled := func() error {
		return inputErr(fmt.Errorf("no platform is installed in namespace %s of the cluster at %s (%s): install it first with 'onprem install', "+
			"or point --kubeconfig/--context at the platform's cluster (the %[4]s's cluster is --%[4]s-kubeconfig/--%[4]s-context)",
			ns, pc.Server, describeOptions(config.ClusterRef{Kubeconfig: pc.Kubeconfig, Context: pc.Context}), kind))
	}
	// A look before the lock, which would create the namespace.
	if st, err := peekState(ctx, pc, ns); err != nil {
		return nil, nil, nil, err
	} else if st.Version == "" {
		return nil, nil, nil, notInstalled()
	}
	lctx, h, err := lockAndLoad(ctx, pc, ns, kind+" "+verb, wait, lease)
	if err != nil {
		return nil, nil, nil, err
	}
	if h.st.Version == "" {
		h.unlock()
		return nil, nil, nil, notInstalled()
	}
	return &attachment.Platform{Cluster: pc, Namespace: ns, Store: h.store, State: h.st, Installation: l.Installation}, h.unlock, lctx, nil
}
