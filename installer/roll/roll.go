// Package roll replaces the pods of a StatefulSet whose update strategy is
// OnDelete one at a time, the replicas of a replicated database first and
// its primary last.
//
// A StatefulSet's own rolling update goes by ordinal, highest first,
// whatever each member does: when the primary is not member 0 (after any
// failover), it is restarted early, hands its role to a replica of the old
// revision, and that replica is restarted in its turn, so the primary
// moves twice or more and writes fail at each move. The replicated
// PostgreSQL and Redis run OnDelete instead (charts/postgresql,
// charts/redis), and onprem rolls them here: each replica is evicted and
// waited for until its replacement is ready at the new revision, then the
// primary, whose preStop hands its role to an updated synchronous replica.
// One change of primary per roll.
//
// Evictions go through the PodDisruptionBudget, so a roll and a drain of
// the same nodes never take down more members together than it allows;
// nothing is evicted unless every member is ready.
package roll

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/topology"
)

// Options says where and how to roll.
type Options struct {
	Client    kubernetes.Interface
	Namespace string
	// Progress receives a line for each member replaced and each new
	// reason to wait ("replacing postgresql-2 (replica; 3 of 3 pods of
	// the previous revision)"); may be nil.
	Progress func(string)
	// IsPrimary names the member replaced last (default:
	// topology.IsPrimary, the role labels of PostgreSQL and Redis).
	IsPrimary func(*corev1.Pod) bool
	// Interval between two looks at the pods (default 1 s).
	Interval time.Duration
}

// StatefulSet rolls the StatefulSet name: nothing to do unless its update
// strategy is OnDelete (or it does not exist); otherwise it returns once
// it has every replica, each ready and of the update revision, replacing
// the others one at a time. It waits as long as ctx lets it, and says what
// it was waiting for when ctx ends first.
func StatefulSet(ctx context.Context, o Options, name string) error {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.IsPrimary == nil {
		o.IsPrimary = topology.IsPrimary
	}
	r := &roller{o: o, name: name}
	t := time.NewTicker(o.Interval)
	defer t.Stop()
	for {
		done, err := r.step(ctx)
		if done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			why := r.waiting
			if why == "" {
				why = "the API server had not answered its first look at the StatefulSet and its pods"
			}
			return fmt.Errorf("rolling StatefulSet %s/%s (%s; the members already replaced are kept, and running the same command again finishes the roll): %w",
				o.Namespace, name, why, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// Pending says why the OnDelete StatefulSet s with pods is not rolled
// out yet ("" when it is), and which pod to evict next (nil when none may
// be now).
func Pending(s *appsv1.StatefulSet, pods []corev1.Pod, isPrimary func(*corev1.Pod) bool) (string, *corev1.Pod) {
	want := int32(1)
	if s.Spec.Replicas != nil {
		want = *s.Spec.Replicas
	}
	rev := s.Status.UpdateRevision
	if s.Status.ObservedGeneration < s.Generation || rev == "" {
		return "its controller has not seen the change yet", nil
	}
	var live, stale []*corev1.Pod
	for i := range pods {
		p := &pods[i]
		if !ownedBy(p, s) {
			continue
		}
		if p.DeletionTimestamp != nil {
			return "pod " + p.Name + " is terminating", nil
		}
		live = append(live, p)
	}
	if int32(len(live)) < want {
		return fmt.Sprintf("%d of %d pods exist", len(live), want), nil
	}
	for _, p := range live {
		if !topology.PodReady(p) {
			return "pod " + p.Name + " is not ready", nil
		}
		if p.Labels[appsv1.ControllerRevisionHashLabelKey] != rev {
			stale = append(stale, p)
		}
	}
	if len(stale) == 0 {
		// Every member is ready and current; done once the controller
		// counts them too, so that what status and kubectl show right
		// after agrees (its count lags the pods' by a moment).
		if s.Status.ReadyReplicas < want {
			return fmt.Sprintf("the StatefulSet's status counts %d of %d pods ready", s.Status.ReadyReplicas, want), nil
		}
		return "", nil
	}
	// Replicas first, highest ordinal first (as a rolling update would);
	// the primary last.
	slices.SortFunc(stale, func(a, b *corev1.Pod) int {
		pa, pb := isPrimary(a), isPrimary(b)
		if pa != pb {
			if pa {
				return 1
			}
			return -1
		}
		return ordinal(b.Name) - ordinal(a.Name)
	})
	return fmt.Sprintf("%d of %d pods of the previous revision", len(stale), len(live)), stale[0]
}

type roller struct {
	o       Options
	name    string
	waiting string
	// evicted is the pod evicted last and its UID, until a pod of that
	// name with another UID exists.
	evicted    string
	evictedUID types.UID
}

func (r *roller) say(format string, args ...any) {
	if r.o.Progress != nil {
		r.o.Progress(fmt.Sprintf(format, args...))
	}
}

// wait records why the roll waits, and says so when the reason changed.
func (r *roller) wait(why string) {
	if why != r.waiting {
		r.waiting = why
		r.say("waiting: %s", why)
	}
}

func (r *roller) step(ctx context.Context) (bool, error) {
	c, ns := r.o.Client, r.o.Namespace
	s, err := c.AppsV1().StatefulSets(ns).Get(ctx, r.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		if ctx.Err() != nil {
			return false, nil // the caller reports ctx's end
		}
		return false, fmt.Errorf("reading StatefulSet %s/%s: %w", ns, r.name, err)
	case s.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType:
		return true, nil
	}
	sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
	if err != nil {
		return false, fmt.Errorf("StatefulSet %s/%s: its selector: %w", ns, r.name, err)
	}
	list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		if ctx.Err() != nil {
			return false, nil
		}
		return false, fmt.Errorf("listing the pods of StatefulSet %s/%s: %w", ns, r.name, err)
	}
	if r.evicted != "" {
		// Replaced: a pod of that name again, or none to come (the
		// StatefulSet scaled below its ordinal meanwhile).
		replaced := s.Spec.Replicas != nil && int32(ordinal(r.evicted)) >= *s.Spec.Replicas
		for _, p := range list.Items {
			replaced = replaced || (p.Name == r.evicted && p.UID != r.evictedUID && p.DeletionTimestamp == nil)
		}
		if !replaced {
			r.wait("pod " + r.evicted + " is being replaced")
			return false, nil
		}
		r.evicted = ""
	}
	why, next := Pending(s, list.Items, r.o.IsPrimary)
	if why == "" {
		return true, nil
	}
	if next == nil {
		r.wait(why)
		return false, nil
	}
	role := "replica"
	if r.o.IsPrimary(next) {
		role = "primary"
	}
	ev := &policyv1.Eviction{
		ObjectMeta:    metav1.ObjectMeta{Name: next.Name, Namespace: ns},
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &next.UID}},
	}
	err = c.CoreV1().Pods(ns).EvictV1(ctx, ev)
	switch {
	case err == nil:
		r.evicted, r.evictedUID, r.waiting = next.Name, next.UID, ""
		r.say("replacing %s (%s; %s)", next.Name, role, why)
		return false, nil
	case apierrors.IsTooManyRequests(err):
		// The budget allows no disruption now: another member is down
		// (a drain of its node, say).
		r.wait("the PodDisruptionBudget allows no eviction of " + next.Name + " now")
		return false, nil
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return false, nil // gone or replaced meanwhile: look again
	case ctx.Err() != nil:
		return false, nil
	}
	return false, fmt.Errorf("evicting %s/%s to roll StatefulSet %s: %w", ns, next.Name, r.name, err)
}

// StatefulSets rolls every StatefulSet named in names, one after the
// other.
func StatefulSets(ctx context.Context, o Options, names []string) error {
	var errs []error
	for _, n := range names {
		if err := StatefulSet(ctx, o, n); err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}

func ownedBy(p *corev1.Pod, s *appsv1.StatefulSet) bool {
	for _, ref := range p.OwnerReferences {
		if ref.Controller != nil && *ref.Controller && ref.Kind == "StatefulSet" && ref.Name == s.Name {
			return true
		}
	}
	return false
}

// ordinal is a StatefulSet pod's ordinal (-1 when its name has none).
func ordinal(name string) int {
	i := strings.LastIndexByte(name, '-')
	n, err := strconv.Atoi(name[i+1:])
	if i < 0 || err != nil {
		return -1
	}
	return n
}
