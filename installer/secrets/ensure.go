package secrets

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"onprem.dev/onprem/installer/credentials"
)

// Labels and annotations of the Secrets Ensure creates.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	LabelPartOf    = "app.kubernetes.io/part-of"
	// LabelGenerated marks a Secret whose values onprem generated; only
	// such a Secret is ever completed by Ensure or read by Values.
	LabelGenerated = "onprem.dev/generated"
	// AnnotationPurpose says what the Secret is for (credentials.Secret.Purpose).
	AnnotationPurpose = "onprem.dev/purpose"
	// AnnotationPublicKeys lists, comma separated, the keys of a generated
	// Secret whose values are not secret (user and database names, the
	// certificates); Values leaves them out so that Redact does not hide
	// ordinary words. A Secret without it has no public key.
	AnnotationPublicKeys = "onprem.dev/public-keys"

	onprem = "onprem"
)

// maxAttempts bounds how often Ensure re-reads one Secret that keeps
// changing under it (another installer creating or completing it).
const maxAttempts = 8

// Report says what Ensure did, by Secret name, each list in plan order.
type Report struct {
	// Created lists the Secrets that did not exist and were generated.
	Created []string
	// Completed lists existing generated Secrets that got missing keys;
	// their existing keys kept their values.
	Completed []string
	// Unchanged lists the generated Secrets that already had every key.
	Unchanged []string
	// Provided lists the operator's own Secrets (not labelled
	// onprem.dev/generated) of a planned name that have every planned key:
	// they are used as they are and never modified.
	Provided []string
}

type outcome int

const (
	created outcome = iota
	completed
	unchanged
	provided
)

func (r *Report) add(o outcome, name string) {
	switch o {
	case created:
		r.Created = append(r.Created, name)
	case completed:
		r.Completed = append(r.Completed, name)
	case unchanged:
		r.Unchanged = append(r.Unchanged, name)
	case provided:
		r.Provided = append(r.Provided, name)
	}
}

// Ensure creates every planned Secret that does not exist, and adds keys
// missing from an existing one; it never changes an existing value.
//
// It first reads every planned Secret and checks the existing ones; if
// any cannot be used (the operator's own Secret without every planned key,
// a wrong type, an immutable Secret or a TLS pair with keys missing), it
// returns every such problem and changes nothing. Then it creates and
// completes Secrets in plan order; another installer doing the same at once
// is detected (AlreadyExists, Conflict) and its values are kept. If an API
// call fails midway, the Report says what was done; running Ensure again
// finishes the job without changing it.
//
// A key that exists, even with an empty value, is kept as it is.
func Ensure(ctx context.Context, c kubernetes.Interface, namespace string, plan []credentials.Secret, o GenerateOptions) (Report, error) {
	if err := validatePlan(plan); err != nil {
		return Report{}, err
	}
	api := c.CoreV1().Secrets(namespace)

	current := make([]*corev1.Secret, len(plan))
	var problems []error
	for i, s := range plan {
		cur, err := api.Get(ctx, s.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return Report{}, fmt.Errorf("reading Secret %s/%s: %w", namespace, s.Name, err)
		}
		if _, _, err := inspect(cur, s); err != nil {
			problems = append(problems, err)
		}
		current[i] = cur
	}
	if len(problems) > 0 {
		return Report{}, fmt.Errorf("no Secret was changed:\n%w", errors.Join(problems...))
	}

	var r Report
	for i, s := range plan {
		out, err := ensureOne(ctx, api, namespace, s, current[i], o)
		if err != nil {
			return r, err
		}
		r.add(out, s.Name)
	}
	return r, nil
}

// ensureOne makes one planned Secret exist with every key. cur is the
// Secret as last read, nil if it was not found.
func ensureOne(ctx context.Context, api typedcorev1.SecretInterface, ns string, s credentials.Secret, cur *corev1.Secret, o GenerateOptions) (outcome, error) {
	known := true // cur reflects a read (nil: not found)
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			if attempt > maxAttempts {
				return 0, fmt.Errorf("secret %s/%s kept changing while onprem was creating or completing it (%d attempts); run again", ns, s.Name, maxAttempts)
			}
			if err := pause(ctx, attempt); err != nil {
				return 0, err
			}
		}
		if !known {
			got, err := api.Get(ctx, s.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
				cur = nil
			case err != nil:
				return 0, fmt.Errorf("reading Secret %s/%s: %w", ns, s.Name, err)
			default:
				cur = got
			}
			known = true
		}

		if cur == nil {
			data, err := Generate(s, o)
			if err != nil {
				return 0, err
			}
			_, err = api.Create(ctx, newSecret(ns, s, data), metav1.CreateOptions{})
			clearData(data)
			switch {
			case err == nil:
				return created, nil
			case apierrors.IsAlreadyExists(err):
				// Another installer was first: use what it made.
				known = false
				continue
			default:
				return 0, fmt.Errorf("creating Secret %s/%s: %w", ns, s.Name, err)
			}
		}

		out, missing, err := inspect(cur, s)
		if err != nil {
			return 0, err
		}
		if len(missing) == 0 {
			return out, nil
		}
		add, err := generate(s.Name, missing, o)
		if err != nil {
			return 0, err
		}
		upd := cur.DeepCopy() // carries cur's resourceVersion: the Update fails if the Secret changed since
		if upd.Data == nil {
			upd.Data = map[string][]byte{}
		}
		for k, v := range add {
			upd.Data[k] = v
		}
		if pub := publicKeys(missing); len(pub) > 0 {
			if upd.Annotations == nil {
				upd.Annotations = map[string]string{}
			}
			upd.Annotations[AnnotationPublicKeys] = joinKeys(append(splitKeys(upd.Annotations[AnnotationPublicKeys]), pub...))
		}
		_, err = api.Update(ctx, upd, metav1.UpdateOptions{})
		clearData(add)
		switch {
		case err == nil:
			return completed, nil
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			// Changed or deleted since it was read: look again.
			known = false
			continue
		default:
			return 0, fmt.Errorf("adding key(s) %s to Secret %s/%s: %w", keyNames(missing), ns, s.Name, err)
		}
	}
}

// pause waits a little before attempt (2, 3, ...), longer each time, with
// jitter so that racing installers drift apart.
func pause(ctx context.Context, attempt int) error {
	d := 10 * time.Millisecond << min(attempt-2, 6)
	d += rand.N(d/2 + 1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// inspect decides what an existing Secret of planned Secret s is and which
// planned keys it lacks. It returns an error, naming the Secret and keys
// only, when the Secret must not or cannot be completed.
func inspect(cur *corev1.Secret, s credentials.Secret) (outcome, []credentials.Key, error) {
	ref := cur.Namespace + "/" + cur.Name
	var missing []credentials.Key
	for _, k := range s.Keys {
		if _, ok := cur.Data[k.Name]; !ok {
			missing = append(missing, k)
		}
	}
	want, got := secretType(s.Type), cur.Type
	if got == "" {
		got = corev1.SecretTypeOpaque
	}

	if cur.Labels[LabelGenerated] != "true" {
		if len(missing) > 0 {
			return 0, nil, fmt.Errorf("secret %s exists but was not generated by onprem (it lacks the label %s=true), so onprem never modifies it; "+
				"it is planned to hold the %s and lacks key(s) %s. "+
				"Rename or delete it and onprem will generate it; or, if it is meant to hold your own values, make sure it has all of the keys %s",
				ref, LabelGenerated, s.Purpose, keyNames(missing), keyNames(s.Keys))
		}
		if got != want {
			return 0, nil, fmt.Errorf("secret %s exists but was not generated by onprem (it lacks the label %s=true), so onprem never modifies it; "+
				"it has type %s where the %s needs type %s. Rename or delete it and onprem will generate it, or recreate it with type %s",
				ref, LabelGenerated, got, s.Purpose, want, want)
		}
		return provided, nil, nil
	}

	if got != want {
		return 0, nil, fmt.Errorf("secret %s was generated by onprem with type %s but the %s needs type %s; onprem never changes an existing Secret. "+
			"Delete it to have it generated again with new values, if nothing depends on its values yet",
			ref, got, s.Purpose, want)
	}
	if len(missing) == 0 {
		return unchanged, nil, nil
	}
	var pairHas, pairLacks []string
	for _, k := range s.Keys {
		if k.Kind != credentials.TLSPair {
			continue
		}
		if _, ok := cur.Data[k.Name]; ok {
			pairHas = append(pairHas, k.Name)
		} else {
			pairLacks = append(pairLacks, k.Name)
		}
	}
	if len(pairHas) > 0 && len(pairLacks) > 0 {
		return 0, nil, fmt.Errorf("secret %s holds only part of its TLS pair (has %s, lacks %s); onprem cannot add to a certificate and key without changing the rest. "+
			"Restore the missing key(s), or delete the Secret to have a new CA and certificate generated (clients must then trust the new %s)",
			ref, strings.Join(pairHas, ", "), strings.Join(pairLacks, ", "), KeyCACert)
	}
	if cur.Immutable != nil && *cur.Immutable {
		return 0, nil, fmt.Errorf("secret %s is immutable and lacks key(s) %s, which onprem cannot add. "+
			"Recreate it with its current values plus the missing key(s), or delete it to have it generated again with new values",
			ref, keyNames(missing))
	}
	return completed, missing, nil
}

// newSecret is the Secret Ensure creates for s with data.
func newSecret(ns string, s credentials.Secret, data map[string][]byte) *corev1.Secret {
	sec := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      s.Name,
			Namespace: ns,
			Labels: map[string]string{
				LabelManagedBy: onprem,
				LabelPartOf:    onprem,
				LabelGenerated: "true",
			},
			Annotations: map[string]string{AnnotationPurpose: s.Purpose},
		},
		Type: secretType(s.Type),
		Data: data,
	}
	if pub := publicKeys(s.Keys); len(pub) > 0 {
		sec.Annotations[AnnotationPublicKeys] = joinKeys(pub)
	}
	return sec
}

func secretType(t string) corev1.SecretType {
	if t == "" {
		return corev1.SecretTypeOpaque
	}
	return corev1.SecretType(t)
}

// publicKeys are the keys whose values are not secret: fixed names and the
// certificates.
func publicKeys(keys []credentials.Key) []string {
	var out []string
	for _, k := range keys {
		if k.Kind == credentials.Fixed || (k.Kind == credentials.TLSPair && (k.Name == KeyTLSCert || k.Name == KeyCACert)) {
			out = append(out, k.Name)
		}
	}
	return out
}

func splitKeys(s string) []string {
	var out []string
	for _, k := range strings.Split(s, ",") {
		if k = strings.TrimSpace(k); k != "" {
			out = append(out, k)
		}
	}
	return out
}

func joinKeys(keys []string) string {
	keys = slices.Clone(keys)
	sort.Strings(keys)
	return strings.Join(slices.Compact(keys), ",")
}

func keyNames(keys []credentials.Key) string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Name
	}
	return strings.Join(names, ", ")
}

func clearData(m map[string][]byte) {
	for _, v := range m {
		clear(v)
	}
}

// validatePlan rejects a plan Ensure could only half carry out.
func validatePlan(plan []credentials.Secret) error {
	var errs []error
	seen := map[string]bool{}
	for _, s := range plan {
		if msgs := validation.IsDNS1123Subdomain(s.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("planned Secret %q: invalid name: %s", s.Name, strings.Join(msgs, "; ")))
			continue
		}
		if seen[s.Name] {
			errs = append(errs, fmt.Errorf("planned Secret %s: planned twice", s.Name))
		}
		seen[s.Name] = true
		if len(s.Keys) == 0 {
			errs = append(errs, fmt.Errorf("planned Secret %s: no keys", s.Name))
		}
		keys := map[string]bool{}
		for _, k := range s.Keys {
			if msgs := validation.IsConfigMapKey(k.Name); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("planned Secret %s: key %q: %s", s.Name, k.Name, strings.Join(msgs, "; ")))
			}
			if keys[k.Name] {
				errs = append(errs, fmt.Errorf("planned Secret %s: key %s planned twice", s.Name, k.Name))
			}
			keys[k.Name] = true
			switch k.Kind {
			case credentials.Password, credentials.RandomKey:
			case credentials.Fixed:
				if k.Value == "" {
					errs = append(errs, fmt.Errorf("planned Secret %s: fixed key %s has no value", s.Name, k.Name))
				}
			case credentials.TLSPair:
				if !isTLSKey(k.Name) {
					errs = append(errs, fmt.Errorf("planned Secret %s: key %s: a %s key must be one of %s, %s, %s", s.Name, k.Name, k.Kind, KeyTLSCert, KeyTLSKey, KeyCACert))
				}
			default:
				errs = append(errs, fmt.Errorf("planned Secret %s: key %s: unknown kind %q (valid: %s, %s, %s, %s)", s.Name, k.Name, k.Kind,
					credentials.Password, credentials.RandomKey, credentials.Fixed, credentials.TLSPair))
			}
		}
	}
	return errors.Join(errs...)
}
