package rotate

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
)

// secretSteps writes one Secret step by step, each write an Update
// guarded by the version the previous one returned: a run killed between
// two writes has left the first, which the next run reads.
type secretSteps struct {
	api typedcorev1.SecretInterface
	ref string
	s   *corev1.Secret
}

// write applies change to a copy of the Secret and updates it; what says
// what the write is, for its error.
func (w *secretSteps) write(ctx context.Context, what string, change func(*corev1.Secret)) error {
	n := w.s.DeepCopy()
	if n.Annotations == nil {
		n.Annotations = map[string]string{}
	}
	if n.Data == nil {
		n.Data = map[string][]byte{}
	}
	change(n)
	s, err := w.api.Update(ctx, n, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("%s in %s: %w", what, w.ref, err)
	}
	w.s = s
	return nil
}

// waitMounted polls holds every 2 seconds until it says yes, for timeout
// at most: the kubelet bringing a mounted Secret up to date. An error of
// holds that is fatal ends the wait at once; any other is retried, and
// the last one, with secret redacted, explains a timeout.
func waitMounted(ctx context.Context, timeout time.Duration, fatal error, secret []byte, holds func(context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		ok, err := holds(ctx)
		if errors.Is(err, fatal) {
			return false, err
		}
		last = err
		return ok, nil
	})
	if err != nil && last != nil && !errors.Is(err, fatal) {
		err = fmt.Errorf("%w (last: %v)", err, redactErr(last, secret))
	}
	return err
}

// progressOf makes a step reporter of a Progress function (nil: silent).
func progressOf(p func(string)) func(string, ...any) {
	return func(format string, args ...any) {
		if p != nil {
			p(fmt.Sprintf(format, args...))
		}
	}
}

// orNow is now, or time.Now when it is zero.
func orNow(now time.Time) time.Time {
	if now.IsZero() {
		return time.Now()
	}
	return now
}

// orFiveMinutes is d, or 5 minutes when it is not positive: the default
// wait for a rollout or a mounted Secret.
func orFiveMinutes(d time.Duration) time.Duration {
	if d <= 0 {
		return 5 * time.Minute
	}
	return d
}

// nextPassword makes sure the Secret holds a next password (keyNextPassword),
// generating one with newPassword and writing it when it has none (a run
// that was killed after writing it finds it there and uses it), and
// returns the current password and the next one.
func (w *secretSteps) nextPassword(ctx context.Context, newPassword func() ([]byte, error)) (current, next []byte, err error) {
	if len(w.s.Data[keyNextPassword]) == 0 {
		pw, err := newPassword()
		if err != nil {
			return nil, nil, fmt.Errorf("a new password for %s: %w", w.ref, err)
		}
		if err := w.write(ctx, "writing the next password", func(n *corev1.Secret) { n.Data[keyNextPassword] = pw }); err != nil {
			return nil, nil, err
		}
	}
	return w.s.Data["password"], w.s.Data[keyNextPassword], nil
}
