package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/installer/state"
)

// tokenBytes is the randomness of a registration token (256 bits).
const tokenBytes = 32

// random is where tokens come from (tests replace it).
var random io.Reader = rand.Reader

// newToken returns a registration token: 32 random bytes, base64url
// without padding (43 characters, safe in headers and URLs).
func newToken() ([]byte, error) {
	b := make([]byte, tokenBytes)
	if _, err := io.ReadFull(random, b); err != nil {
		return nil, fmt.Errorf("generating a registration token: %w", err)
	}
	out := make([]byte, base64.RawURLEncoding.EncodedLen(len(b)))
	base64.RawURLEncoding.Encode(out, b)
	clear(b)
	return out, nil
}

// TokenMismatchError says that a runner's token Secret and the platform's
// registration disagree: the agent could not register. Nothing says which
// one is right, so neither is changed.
type TokenMismatchError struct {
	Runner, Namespace, PlatformNamespace string
}

func (e *TokenMismatchError) Error() string {
	return fmt.Sprintf("runner %s: the token in Secret %s/%s on the runner's cluster differs from the one registered in Secret %s/%s (key %s) on the platform's: "+
		"a token is never changed by onprem, so one of them was edited by hand; to start over with a new token, run 'onprem runner uninstall %s' and install it again",
		e.Runner, e.Namespace, TokenSecret, e.PlatformNamespace, Registrations, e.Runner, e.Runner)
}

// ensureToken returns the runner's token, creating its Secret on the
// runner's cluster when it does not exist: with the registered token when
// the platform has one (the runner's namespace was deleted by hand), else
// with a new one. An existing token is never changed.
func ensureToken(ctx context.Context, c kubernetes.Interface, namespace, runner string, registered []byte) (token []byte, created bool, err error) {
	api := c.CoreV1().Secrets(namespace)
	for attempt := 0; attempt < 3; attempt++ {
		cur, err := api.Get(ctx, TokenSecret, metav1.GetOptions{})
		switch {
		case err == nil:
			t := cur.Data[TokenKey]
			if len(t) == 0 {
				return nil, false, fmt.Errorf("runner %s: Secret %s/%s exists without a %s: delete it (kubectl -n %s delete secret %s) and run again",
					runner, namespace, TokenSecret, TokenKey, namespace, TokenSecret)
			}
			if registered != nil && !bytes.Equal(t, registered) {
				return nil, false, &TokenMismatchError{Runner: runner, Namespace: namespace}
			}
			return bytes.Clone(t), false, nil
		case !apierrors.IsNotFound(err):
			return nil, false, fmt.Errorf("runner %s: reading Secret %s/%s: %w", runner, namespace, TokenSecret, err)
		}
		t := bytes.Clone(registered)
		if t == nil {
			if t, err = newToken(); err != nil {
				return nil, false, err
			}
		}
		_, err = api.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      TokenSecret,
				Namespace: namespace,
				Labels: map[string]string{
					secrets.LabelManagedBy: state.ManagedBy,
					secrets.LabelPartOf:    state.ManagedBy,
					secrets.LabelGenerated: "true",
					LabelRunner:            runner,
				},
				Annotations: map[string]string{secrets.AnnotationPurpose: "the registration token of build runner " + runner + " (generated once, never changed)"},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{TokenKey: t},
		}, metav1.CreateOptions{FieldManager: FieldManager})
		if err == nil {
			return t, registered == nil, nil
		}
		clear(t)
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("runner %s: creating Secret %s/%s: %w", runner, namespace, TokenSecret, err)
		}
		// Created meanwhile: read it again.
	}
	return nil, false, fmt.Errorf("runner %s: Secret %s/%s keeps changing; run again", runner, namespace, TokenSecret)
}

// registeredToken returns the token the platform has for a runner (nil if
// none).
func registeredToken(ctx context.Context, c kubernetes.Interface, platformNS, runner string) ([]byte, error) {
	s, err := c.CoreV1().Secrets(platformNS).Get(ctx, Registrations, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the runners' registrations (Secret %s/%s): %w", platformNS, Registrations, err)
	}
	if t, ok := s.Data[runner]; ok && len(t) > 0 {
		return bytes.Clone(t), nil
	}
	return nil, nil
}

// register records the runner's token in the platform's registrations
// Secret (creating it if needed). It changes nothing when the token is
// already there.
func register(ctx context.Context, c kubernetes.Interface, platformNS, runner string, token []byte) error {
	api := c.CoreV1().Secrets(platformNS)
	for attempt := 0; attempt < 3; attempt++ {
		cur, err := api.Get(ctx, Registrations, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = api.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{
					Name:      Registrations,
					Namespace: platformNS,
					Labels: map[string]string{
						secrets.LabelManagedBy: state.ManagedBy,
						secrets.LabelPartOf:    state.ManagedBy,
						secrets.LabelGenerated: "true",
					},
					Annotations: map[string]string{secrets.AnnotationPurpose: "registration tokens of the build runners, one key per runner name; read by runtime-manager"},
				},
				Type: corev1.SecretTypeOpaque,
				Data: map[string][]byte{runner: token},
			}, metav1.CreateOptions{FieldManager: FieldManager})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("runner %s: registering it (creating Secret %s/%s): %w", runner, platformNS, Registrations, err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("runner %s: reading Secret %s/%s: %w", runner, platformNS, Registrations, err)
		}
		if bytes.Equal(cur.Data[runner], token) {
			return nil
		}
		cur = cur.DeepCopy()
		if cur.Data == nil {
			cur.Data = map[string][]byte{}
		}
		cur.Data[runner] = token
		_, err = api.Update(ctx, cur, metav1.UpdateOptions{FieldManager: FieldManager})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("runner %s: registering it (updating Secret %s/%s): %w", runner, platformNS, Registrations, err)
		}
		return nil
	}
	return fmt.Errorf("runner %s: Secret %s/%s keeps changing; run again", runner, platformNS, Registrations)
}

// unregister removes the runner's key from the registrations Secret, and
// the Secret when no runner is left.
func unregister(ctx context.Context, c kubernetes.Interface, platformNS, runner string) error {
	api := c.CoreV1().Secrets(platformNS)
	for attempt := 0; attempt < 3; attempt++ {
		cur, err := api.Get(ctx, Registrations, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("runner %s: reading Secret %s/%s: %w", runner, platformNS, Registrations, err)
		}
		if _, ok := cur.Data[runner]; !ok {
			return nil
		}
		if len(cur.Data) == 1 {
			err = api.Delete(ctx, Registrations, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &cur.ResourceVersion}})
			if apierrors.IsNotFound(err) {
				return nil
			}
		} else {
			cur = cur.DeepCopy()
			delete(cur.Data, runner)
			_, err = api.Update(ctx, cur, metav1.UpdateOptions{FieldManager: FieldManager})
		}
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("runner %s: removing its registration from Secret %s/%s: %w", runner, platformNS, Registrations, err)
		}
		return nil
	}
	return fmt.Errorf("runner %s: Secret %s/%s keeps changing; run again", runner, platformNS, Registrations)
}
