package action

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
)

// AttachmentUpgrade is what bringing attachments to the installed
// platform version takes, whatever their kind (RunnerUpgrade and
// RuntimeUpgrade add how their cluster is reached, and their own).
type AttachmentUpgrade struct {
	// Source is the platform's configuration.
	Source
	// Cluster is the platform's cluster.
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn *Configuration
	// Names of the attachments; All: every recorded one.
	Names []string
	All   bool
	// Timeout bounds each one's wait to become ready.
	Timeout   time.Duration
	LockWait  time.Duration
	LockLease time.Duration
	Reporter  apply.Reporter
}

// attachmentUpgrade brings attachments of one kind to the installed
// platform version (RunnerUpgrade, RuntimeUpgrade), each on its own
// cluster. Res is the kind's result of one.
type attachmentUpgrade[R, S, Res any] struct {
	kind *attachmentKind[R, S]
	AttachmentUpgrade
	// Override reaches the attachment's cluster instead of as recorded
	// (one attachment only).
	Override config.ClusterRef
	// oneOnly names the kind's own flags that, like the cluster's, apply
	// to one attachment (they are named in the refusal of more);
	// oneOnlyGiven says whether any of them was given.
	oneOnly      []string
	oneOnlyGiven bool

	// check is the kind's own check of its options, after the names' and
	// before anything is read (nil: none). A runtime reads its new
	// tokens there too.
	check func() error
	// loaded checks the configuration once read (nil: nothing more).
	loaded func(l *Loaded) error
	// upgrade upgrades the attachment name, recorded as rec, on its
	// cluster cl (reached by ref, and checked to be the recorded one),
	// under the lock; failed is the result of one that failed without a
	// result of its own.
	upgrade func(ctx context.Context, l *Loaded, p *attachment.Platform, name string, rec R, ref config.ClusterRef, cl *kube.Cluster) (*Res, error)
	failed  func(name string, rec R, err error) Res
}

// Run upgrades the attachments one after the other; one that fails does
// not stop the others, and the error joins every failure.
func (a *attachmentUpgrade[R, S, Res]) Run(ctx context.Context) ([]Res, error) {
	k := a.kind
	switch {
	case a.All && len(a.Names) > 0:
		return nil, inputErr(fmt.Errorf("give %s names or --all, not both", k.name))
	case !a.All && len(a.Names) == 0:
		return nil, inputErr(fmt.Errorf("name the %ss to upgrade, or give --all", k.name))
	}
	if len(a.Names) != 1 && (!a.Override.IsPlatformCluster() || a.oneOnlyGiven) {
		// --all with one cluster's flags would send every one there.
		flags := append([]string{"--" + k.name + "-kubeconfig", "--" + k.name + "-context"}, a.oneOnly...)
		return nil, inputErr(fmt.Errorf("%s and %s apply to one %s: upgrade the others on their own",
			strings.Join(flags[:len(flags)-1], ", "), flags[len(flags)-1], k.name))
	}
	if a.check != nil {
		if err := a.check(); err != nil {
			return nil, err
		}
	}
	l, err := a.Source.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if a.loaded != nil {
		if err := a.loaded(l); err != nil {
			return nil, err
		}
	}
	pc, err := connect(ctx, a.Conn, a.Cluster)
	if err != nil {
		return nil, err
	}
	p, unlock, ctx, err := openPlatform(ctx, l, pc, k.name, "upgrade", a.LockWait, a.LockLease)
	if err != nil {
		return nil, err
	}
	defer unlock()
	names, err := namesToUpgrade(a.All, a.Names, attachment.Names(k.records(p.State)), func(n string) error {
		return k.notFound(p.State, n)
	})
	if err != nil {
		return nil, err
	}
	return upgradeEach(names, func(n string) (*Res, error) {
		rec := k.records(p.State)[n]
		ref := clusterRef(k.ref(rec), a.Override)
		cl, err := k.connect(ctx, n, ref, a.Cluster, pc)
		if err != nil {
			return nil, err
		}
		if err := recordedCluster(k.name, n, k.server(rec), ref, cl); err != nil {
			return nil, err
		}
		return a.upgrade(ctx, l, p, n, rec, ref, cl)
	}, func(n string, err error) Res {
		return a.failed(n, k.records(p.State)[n], err)
	})
}

// namesToUpgrade are the attachments an upgrade names (all recorded ones
// with all); a name that is not recorded is refused (notFound) before
// anything is touched.
func namesToUpgrade(all bool, names, recorded []string, notFound func(string) error) ([]string, error) {
	if all {
		return recorded, nil
	}
	for _, n := range names {
		if !slices.Contains(recorded, n) {
			return nil, inputErr(notFound(n))
		}
	}
	return names, nil
}

// upgradeEach upgrades the named attachments one after the other with
// one: one that fails does not stop the others; a failure without a
// result of its own gets failed's, and the error joins every failure.
func upgradeEach[R any](names []string, one func(string) (*R, error), failed func(string, error) R) ([]R, error) {
	var out []R
	var errs []error
	for _, n := range names {
		res, err := one(n)
		if res != nil {
			out = append(out, *res)
		}
		if err != nil {
			errs = append(errs, err)
			if res == nil {
				out = append(out, failed(n, err))
			}
		}
	}
	return out, errors.Join(errs...)
}

// recordedCluster refuses a cluster that is not the one the attachment
// was recorded on, naming the flags that reach the right one.
func recordedCluster(kind, name, server string, ref config.ClusterRef, cl *kube.Cluster) error {
	if cl.Server == server {
		return nil
	}
	return inputErr(fmt.Errorf("%s %s runs on the cluster at %s, but %s reaches %s: give its kubeconfig and context with --%s-kubeconfig and --%s-context",
		kind, name, server, describeOptions(ref), cl.Server, kind, kind))
}
