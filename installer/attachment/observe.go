package attachment

import (
	"context"
	"time"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/kube"
)

// Observed is what every kind of attachment reads of one on its cluster
// before its own workloads.
type Observed struct {
	// Reachable: cl is the cluster the record names (server). When not,
	// Problem says why and nothing else is known.
	Reachable bool
	// Release is Helm's status of its release, Revision its revision (0
	// when unknown).
	Release  string
	Revision int
	Problem  string
}

// Into sets a status's fields to what was observed (its revision only
// when the release's is known) and says whether the attachment's cluster
// was reached.
func (o Observed) Into(reachable *bool, release *string, revision *int, problem *string) bool {
	*reachable, *release, *problem = o.Reachable, o.Release, o.Problem
	if o.Revision > 0 {
		*revision = o.Revision
	}
	return o.Reachable
}

// Observe checks that cl is the attachment's cluster (the record's
// server) and reads its Helm release (ReleaseState). It never fails: what
// it cannot read is said in Problem.
func (a Attachment) Observe(ctx context.Context, cl *kube.Cluster, server string) Observed {
	if cl.Server != server {
		return Observed{Problem: "the cluster reached is at " + cl.Server + ", not the " + a.Kind + "'s " + server}
	}
	o := Observed{Reachable: true}
	o.Release, o.Revision, o.Problem = a.ReleaseState(ctx, cl)
	return o
}

// RemoveInto removes the attachment from its cluster (Remove) and adds
// what went and what stayed to out.
func (a Attachment) RemoveInto(ctx context.Context, cl *kube.Cluster, timeout time.Duration, reporter apply.Reporter, out *Removal) error {
	removed, kept, err := a.Remove(ctx, cl, timeout, reporter)
	out.Removed = append(out.Removed, removed...)
	out.Kept = append(out.Kept, kept...)
	return err
}
