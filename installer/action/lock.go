package action

import (
	"context"
	"errors"
	"time"

	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// lockInstallation takes the installation's lock and returns a context
// that is cancelled if the lock is lost, and the function that releases it.
func lockInstallation(ctx context.Context, cl *kube.Cluster, namespace, verb string, wait, lease time.Duration) (context.Context, func(), error) {
	lock, err := state.Acquire(ctx, cl.Client, namespace, state.LockOptions{Holder: state.DefaultHolder(verb), Wait: wait, LeaseDuration: lease})
	if err != nil {
		return nil, nil, err
	}
	lctx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-lock.Lost():
			cancel(errors.New("lost the installation lock (another onprem took it over, or the API server was unreachable for longer than the lease)"))
		case <-lctx.Done():
		}
	}()
	return lctx, func() {
		cancel(nil)
		lock.Release(context.WithoutCancel(ctx))
	}, nil
}

// held is an installation under its lock, with its record as read under
// it.
type held struct {
	store  *state.Store
	st     *state.State
	unlock func()
}

// lockAndLoad takes the installation's lock (see lockInstallation) and
// reads its record.
func lockAndLoad(ctx context.Context, cl *kube.Cluster, namespace, verb string, wait, lease time.Duration) (context.Context, *held, error) {
	ctx, unlock, err := lockInstallation(ctx, cl, namespace, verb, wait, lease)
	if err != nil {
		return nil, nil, err
	}
	store := state.NewStore(cl.Client, namespace)
	st, err := store.Load(ctx)
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return ctx, &held{store: store, st: st, unlock: unlock}, nil
}
