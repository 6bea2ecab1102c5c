package action

import (
	"context"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// attachmentKind is one kind of attachment (something onprem installs
// beside the platform, on its cluster or another one, and records in the
// installation's state: runners, runnerKind; GitOps runtimes,
// runtimeKind) as the attachment verbs see it: R is its record in the
// state, S its status in a listing. The verbs (attachmentList) hold the
// flow, the messages and the exit codes every kind shares; a kind gives
// them this, and keeps its own rules in its own package
// (installer/runner, installer/gitops).
type attachmentKind[R, S any] struct {
	// name names the kind in messages, in its commands ('onprem NAME
	// uninstall') and in its flags (--NAME-kubeconfig, --NAME-context):
	// "runner", "runtime".
	name string
	// records are its records in st, by name.
	records func(st *state.State) map[string]R
	// ref is how a record says the attachment's cluster is reached.
	ref func(rec R) config.ClusterRef
	// connect reaches the attachment's cluster by ref (the platform's
	// connection pc itself when ref names no other cluster), its error
	// saying what that cluster is for; connectListed is connect in a
	// listing (nil: connect).
	connect, connectListed func(ctx context.Context, name string, ref config.ClusterRef, platform kube.Options, pc *kube.Cluster) (*kube.Cluster, error)
	// observe is the attachment's status read on its cluster cl;
	// unreachable its status when that cluster cannot be reached.
	observe     func(ctx context.Context, cl *kube.Cluster, st *state.State, name string) S
	unreachable func(st *state.State, name string, err error) S
}
