package state

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"os/user"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/version"
)

// Defaults of LockOptions.
const (
	DefaultLockWait      = 2 * time.Minute
	DefaultLeaseDuration = 30 * time.Second
	DefaultLockPoll      = time.Second
)

// tokenAnnotation holds a random token of the Lock that holds the Lease, so
// that two processes with the same Holder text (pid 1 in two containers of
// the same name) are still told apart.
const tokenAnnotation = "onprem.dev/lock-token"

// LockOptions tune Acquire.
type LockOptions struct {
	// Holder names the holder in the Lease and in a *HeldError;
	// DefaultHolder("") when empty.
	Holder string
	// Wait bounds how long Acquire waits for a held lock; DefaultLockWait
	// when zero.
	Wait time.Duration
	// LeaseDuration is how long the lock outlives its last renewal (whole
	// seconds, rounded up); DefaultLeaseDuration when zero.
	LeaseDuration time.Duration
	// RenewEvery is how often the lease is renewed; LeaseDuration/3 when
	// zero. It must be shorter than LeaseDuration/2.
	RenewEvery time.Duration
	// Poll is how often a held lock is looked at; DefaultLockPoll when
	// zero.
	Poll time.Duration
}

func (o *LockOptions) defaults() error {
	if o.Holder == "" {
		o.Holder = DefaultHolder("")
	}
	if o.Wait == 0 {
		o.Wait = DefaultLockWait
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration = DefaultLeaseDuration
	}
	if o.LeaseDuration < time.Second {
		return fmt.Errorf("state: lock lease duration %s is shorter than a second", o.LeaseDuration)
	}
	o.LeaseDuration = time.Duration(math.Ceil(o.LeaseDuration.Seconds())) * time.Second
	if o.RenewEvery == 0 {
		o.RenewEvery = o.LeaseDuration / 3
	}
	if o.RenewEvery <= 0 || 2*o.RenewEvery >= o.LeaseDuration {
		return fmt.Errorf("state: lock renewal every %s must be shorter than half the lease duration %s", o.RenewEvery, o.LeaseDuration)
	}
	if o.Poll <= 0 {
		o.Poll = DefaultLockPoll
	}
	if o.Wait < 0 {
		return fmt.Errorf("state: negative lock wait %s", o.Wait)
	}
	return nil
}

// DefaultHolder describes this process for the lock:
// "user@host pid N (onprem VERSION op)".
func DefaultHolder(op string) string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "uid " + strconv.Itoa(os.Getuid())
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	what := "onprem " + version.Version
	if op != "" {
		what += " " + op
	}
	return fmt.Sprintf("%s@%s pid %d (%s)", name, host, os.Getpid(), what)
}

// HeldError says that another holder kept the lock for all of Wait.
type HeldError struct {
	Namespace string
	Holder    string
	Since     time.Time // when the holder took the lock
	Expires   time.Time // when the lock expires if its holder stops renewing it
	Waited    time.Duration
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("another onprem is working on this installation: the lock (Lease %s/%s) is held by %s since %s; "+
		"it expires at %s if that process is gone (waited %s); "+
		"if you are sure no other onprem is running, wait or delete the Lease: kubectl -n %s delete lease %s",
		e.Namespace, LeaseName, e.Holder, e.Since.Local().Format(time.RFC3339), e.Expires.Local().Format(time.RFC3339),
		e.Waited.Round(time.Second), e.Namespace, LeaseName)
}

// Lock is a held lock. Release it when the operation is over.
type Lock struct {
	client    kubernetes.Interface
	namespace string
	holder    string
	token     string
	opts      LockOptions

	mu    sync.Mutex // guards lease, stopped
	lease *coordinationv1.Lease

	lost     chan struct{}
	lostOnce sync.Once
	lostErr  error

	cancel  context.CancelFunc
	done    chan struct{}
	stopped bool
}

// Acquire takes the installation's lock: the Lease onprem-lock in
// namespace. It creates the namespace if it does not exist (a bare one; the
// installer labels it later), so that the lock works on a first install.
//
// A missing or released Lease is taken at once. A Lease held by another
// holder is taken over when it has expired — its renewTime plus its
// leaseDurationSeconds is in the past — and, as a guard against clocks that
// disagree between machines, Acquire has also seen it unchanged for half
// its lease duration (a live holder renews more often than that). Creation
// and takeover are guarded by the API server (create fails if it exists,
// update carries the resourceVersion that was read), so of two processes
// trying at once only one wins. Otherwise Acquire polls every o.Poll until
// o.Wait has passed and returns a *HeldError naming the holder.
//
// Once taken, a goroutine renews the Lease every o.RenewEvery until
// Release. If the Lease is deleted or taken by someone else, or cannot be
// renewed in time (the next attempt would come after it expired), Lost is
// closed: the caller must stop changing the cluster.
func Acquire(ctx context.Context, c kubernetes.Interface, namespace string, o LockOptions) (*Lock, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	tok := make([]byte, 16)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	l := &Lock{client: c, namespace: namespace, holder: o.Holder, token: hex.EncodeToString(tok), opts: o,
		lost: make(chan struct{})}
	if err := l.ensureNamespace(ctx); err != nil {
		return nil, err
	}

	start := time.Now()
	deadline := start.Add(o.Wait)
	leases := c.CoordinationV1().Leases(namespace)
	var (
		seenRV   string    // resourceVersion of the other holder's Lease last seen
		seenAt   time.Time // when it was first seen (monotonic clock)
		held     *HeldError
		terminat error // the namespace is being deleted
	)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		now := time.Now()
		cur, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			created, err := leases.Create(ctx, l.newLease(now), metav1.CreateOptions{FieldManager: ManagedBy})
			switch {
			case err == nil:
				return l.start(created), nil
			case apierrors.IsAlreadyExists(err):
				continue // someone else was faster: look at theirs
			case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
				terminat = err
			case apierrors.IsNotFound(err): // the namespace went away meanwhile
				if err := l.ensureNamespace(ctx); err != nil {
					return nil, err
				}
				continue
			default:
				return nil, fmt.Errorf("creating the onprem lock (Lease %s/%s): %w", namespace, LeaseName, err)
			}
		case err != nil:
			return nil, fmt.Errorf("reading the onprem lock (Lease %s/%s): %w", namespace, LeaseName, err)
		default:
			if cur.ResourceVersion != seenRV {
				seenRV, seenAt = cur.ResourceVersion, now
			}
			holder := ""
			if cur.Spec.HolderIdentity != nil {
				holder = *cur.Spec.HolderIdentity
			}
			expires := l.expiry(cur)
			free := holder == ""
			expired := now.After(expires) && now.Sub(seenAt) >= l.leaseDuration(cur)/2
			if free || expired {
				taken, err := leases.Update(ctx, l.takeOver(cur, now), metav1.UpdateOptions{FieldManager: ManagedBy})
				switch {
				case err == nil:
					return l.start(taken), nil
				case apierrors.IsConflict(err), apierrors.IsNotFound(err):
					continue // someone else changed it first: look again
				default:
					return nil, fmt.Errorf("taking over the onprem lock (Lease %s/%s) from %s: %w", namespace, LeaseName, holder, err)
				}
			}
			since := cur.CreationTimestamp.Time
			if cur.Spec.AcquireTime != nil {
				since = cur.Spec.AcquireTime.Time
			}
			held = &HeldError{Namespace: namespace, Holder: holder, Since: since, Expires: expires}
		}

		remaining := time.Until(deadline)
		if remaining <= 0 {
			waited := time.Since(start)
			if held != nil {
				held.Waited = waited
				return nil, held
			}
			return nil, fmt.Errorf("cannot take the onprem lock: namespace %s is being deleted (waited %s); run the command again once `kubectl get namespace %s` no longer finds it: %w",
				namespace, waited.Round(time.Second), namespace, terminat)
		}
		held, terminat = nil, nil
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(min(o.Poll, remaining)):
		}
	}
}

// ensureNamespace creates the namespace if it does not exist. Without the
// right to read namespaces it carries on: creating the Lease will say
// whether the namespace is there.
func (l *Lock) ensureNamespace(ctx context.Context) error {
	nss := l.client.CoreV1().Namespaces()
	_, err := nss.Get(ctx, l.namespace, metav1.GetOptions{})
	if err == nil || apierrors.IsForbidden(err) {
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading namespace %s: %w", l.namespace, err)
	}
	_, err = nss.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: l.namespace}},
		metav1.CreateOptions{FieldManager: ManagedBy})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s for the onprem lock: %w", l.namespace, err)
	}
	return nil
}

func (l *Lock) leaseSeconds() int32 { return int32(l.opts.LeaseDuration / time.Second) }

// leaseDuration is the duration the Lease itself states (its holder's), or
// ours if it states none.
func (l *Lock) leaseDuration(le *coordinationv1.Lease) time.Duration {
	if le.Spec.LeaseDurationSeconds != nil && *le.Spec.LeaseDurationSeconds > 0 {
		return time.Duration(*le.Spec.LeaseDurationSeconds) * time.Second
	}
	return l.opts.LeaseDuration
}

// expiry is when le expires if its holder stops renewing it.
func (l *Lock) expiry(le *coordinationv1.Lease) time.Time {
	last := le.CreationTimestamp.Time
	if le.Spec.AcquireTime != nil {
		last = le.Spec.AcquireTime.Time
	}
	if le.Spec.RenewTime != nil {
		last = le.Spec.RenewTime.Time
	}
	return last.Add(l.leaseDuration(le))
}

func (l *Lock) newLease(now time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(now)
	secs, zero := l.leaseSeconds(), int32(0)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name:        LeaseName,
			Namespace:   l.namespace,
			Labels:      map[string]string{ManagedByLabel: ManagedBy},
			Annotations: map[string]string{tokenAnnotation: l.token},
		},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       &l.holder,
			LeaseDurationSeconds: &secs,
			AcquireTime:          &t,
			RenewTime:            &t,
			LeaseTransitions:     &zero,
		},
	}
}

func (l *Lock) takeOver(cur *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	le := cur.DeepCopy()
	t := metav1.NewMicroTime(now)
	secs := l.leaseSeconds()
	transitions := int32(1)
	if le.Spec.LeaseTransitions != nil {
		transitions = *le.Spec.LeaseTransitions + 1
	}
	if le.Annotations == nil {
		le.Annotations = map[string]string{}
	}
	if le.Labels == nil {
		le.Labels = map[string]string{}
	}
	le.Annotations[tokenAnnotation] = l.token
	le.Labels[ManagedByLabel] = ManagedBy
	le.Spec.HolderIdentity = &l.holder
	le.Spec.LeaseDurationSeconds = &secs
	le.Spec.AcquireTime = &t
	le.Spec.RenewTime = &t
	le.Spec.LeaseTransitions = &transitions
	return le
}

// ours reports whether le is held by this Lock.
func (l *Lock) ours(le *coordinationv1.Lease) bool {
	return le.Spec.HolderIdentity != nil && *le.Spec.HolderIdentity == l.holder &&
		le.Annotations[tokenAnnotation] == l.token
}

func (l *Lock) start(le *coordinationv1.Lease) *Lock {
	l.lease = le
	ctx, cancel := context.WithCancel(context.Background())
	l.cancel, l.done = cancel, make(chan struct{})
	go l.renewLoop(ctx)
	return l
}

// Holder is the holder text written in the Lease.
func (l *Lock) Holder() string { return l.holder }

// Lost is closed when the lock is lost while held: the Lease was deleted or
// taken by someone else, or could not be renewed before it would expire.
// It is not closed by Release.
func (l *Lock) Lost() <-chan struct{} { return l.lost }

// Err says why the lock was lost; nil while it is held.
func (l *Lock) Err() error {
	select {
	case <-l.lost:
		return l.lostErr
	default:
		return nil
	}
}

func (l *Lock) markLost(err error) {
	l.lostOnce.Do(func() {
		l.lostErr = fmt.Errorf("lost the onprem lock (Lease %s/%s): %w", l.namespace, LeaseName, err)
		close(l.lost)
	})
}

var errNotOurs = errors.New("the lock is no longer ours")

func (l *Lock) renewLoop(ctx context.Context) {
	defer close(l.done)
	tick := time.NewTicker(l.opts.RenewEvery)
	defer tick.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := l.renew(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case err == nil:
			lastOK = time.Now()
		case errors.Is(err, errNotOurs):
			l.markLost(err)
			return
		case time.Since(lastOK)+l.opts.RenewEvery >= l.opts.LeaseDuration:
			// The next attempt would come after the Lease expired:
			// give up now, before anyone else may take it over.
			l.markLost(fmt.Errorf("could not renew it for %s: %w", time.Since(lastOK).Round(time.Second), err))
			return
		}
	}
}

// renew writes a new renewTime, guarded by the resourceVersion last written.
func (l *Lock) renew(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.opts.RenewEvery)
	defer cancel()
	leases := l.client.CoordinationV1().Leases(l.namespace)
	l.mu.Lock()
	cur := l.lease
	l.mu.Unlock()
	for attempt := 0; ; attempt++ {
		le := cur.DeepCopy()
		t := metav1.NewMicroTime(time.Now())
		le.Spec.RenewTime = &t
		updated, err := leases.Update(ctx, le, metav1.UpdateOptions{FieldManager: ManagedBy})
		switch {
		case err == nil:
			l.mu.Lock()
			l.lease = updated
			l.mu.Unlock()
			return nil
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: the Lease was deleted", errNotOurs)
		case apierrors.IsConflict(err) && attempt == 0:
			// Changed by someone: still ours (labels edited)? Then retry
			// on the fresh copy.
			fresh, gerr := leases.Get(ctx, LeaseName, metav1.GetOptions{})
			if apierrors.IsNotFound(gerr) {
				return fmt.Errorf("%w: the Lease was deleted", errNotOurs)
			}
			if gerr != nil {
				return gerr
			}
			if !l.ours(fresh) {
				return fmt.Errorf("%w: it is now held by %s", errNotOurs, holderOf(fresh))
			}
			cur = fresh
		default:
			return err
		}
	}
}

func holderOf(le *coordinationv1.Lease) string {
	if le.Spec.HolderIdentity == nil || *le.Spec.HolderIdentity == "" {
		return "nobody"
	}
	return *le.Spec.HolderIdentity
}

// stopRenewing stops the renewal without releasing: the Lease is left
// behind as by a killed process. For tests.
func (l *Lock) stopRenewing() {
	l.mu.Lock()
	stopped := l.stopped
	l.stopped = true
	l.mu.Unlock()
	if !stopped {
		l.cancel()
		<-l.done
	}
}

// Release stops the renewal and deletes the Lease if it is still ours; a
// Lease taken by someone else meanwhile is left alone and reported as an
// error. Release is idempotent, and works even when ctx is already
// canceled (a deferred Release after Ctrl-C): it then takes at most 10s.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return nil
	}
	l.stopped = true
	l.mu.Unlock()
	l.cancel()
	<-l.done

	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
	}
	leases := l.client.CoordinationV1().Leases(l.namespace)
	for attempt := 0; attempt < 5; attempt++ {
		cur, err := leases.Get(ctx, LeaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("releasing the onprem lock (Lease %s/%s): %w", l.namespace, LeaseName, err)
		}
		if !l.ours(cur) {
			return fmt.Errorf("the onprem lock (Lease %s/%s) was not released: it had been taken over by %s", l.namespace, LeaseName, holderOf(cur))
		}
		uid, rv := cur.UID, cur.ResourceVersion
		err = leases.Delete(ctx, LeaseName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
		switch {
		case err == nil, apierrors.IsNotFound(err):
			return nil
		case apierrors.IsConflict(err):
			continue // changed between Get and Delete: look again
		default:
			return fmt.Errorf("releasing the onprem lock (Lease %s/%s): %w", l.namespace, LeaseName, err)
		}
	}
	return fmt.Errorf("releasing the onprem lock (Lease %s/%s): it kept changing", l.namespace, LeaseName)
}

// LockState is the installation's lock as another reader sees it.
type LockState struct {
	// Holder is who holds it ("" when it is free or there is none).
	Holder string `json:"holder,omitempty"`
	// Since is when the holder took it; Expires when it expires if the
	// holder stops renewing it.
	Since   time.Time `json:"since,omitzero"`
	Expires time.Time `json:"expires,omitzero"`
	// Expired: the holder stopped renewing it (a killed onprem); the next
	// onprem takes it over.
	Expired bool `json:"expired,omitempty"`
}

// ReadLock reads the installation's lock without taking it: nil when it is
// free.
func ReadLock(ctx context.Context, c kubernetes.Interface, namespace string, now time.Time) (*LockState, error) {
	le, err := c.CoordinationV1().Leases(namespace).Get(ctx, LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the onprem lock (Lease %s/%s): %w", namespace, LeaseName, err)
	}
	if le.Spec.HolderIdentity == nil || *le.Spec.HolderIdentity == "" {
		return nil, nil
	}
	l := &Lock{opts: LockOptions{LeaseDuration: DefaultLeaseDuration}}
	st := &LockState{Holder: *le.Spec.HolderIdentity, Since: le.CreationTimestamp.Time, Expires: l.expiry(le)}
	if le.Spec.AcquireTime != nil {
		st.Since = le.Spec.AcquireTime.Time
	}
	st.Expired = now.After(st.Expires)
	return st, nil
}
