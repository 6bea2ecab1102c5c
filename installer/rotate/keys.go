package rotate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/secrets"
)

// The keys of the platform's keys Secret (credentials.PlatformKeys). A
// service signs with KeySigning and encrypts with KeyEncryption; it
// verifies and decrypts with any key of the matching ring, newline-separated,
// newest first. A Secret without a ring has the one key (as installed
// before key rings existed).
const (
	KeySigning        = "signing-key"
	KeyEncryption     = "encryption-key"
	KeySigningRing    = "signing-keys"
	KeyEncryptionRing = "encryption-keys"
)

// AnnotationKeysStep, on the keys Secret, is the step a key rotation has
// written and whose rollout it has yet to see finished: a run killed
// there is finished by the next one.
const AnnotationKeysStep = "onprem.dev/keys-rotation"

// The steps of a key rotation, as AnnotationKeysStep records them.
const (
	// KeysStaged: the new keys are in the rings, verifying and decrypting
	// only; services still sign and encrypt with the old ones.
	KeysStaged = "staged"
	// KeysSwitched: services sign and encrypt with the new keys.
	KeysSwitched = "switched"
	// KeysRetiring: the rings hold the current keys only.
	KeysRetiring = "retiring"
)

// KeysOptions say how to rotate the platform's signing and encryption
// keys.
type KeysOptions struct {
	Client    kubernetes.Interface
	Namespace string
	// Retire drops every key but the current ones from the rings: tokens
	// and data of older keys are refused from then on.
	Retire bool
	DryRun bool
	// Now stamps the rotation (time.Now when zero).
	Now time.Time
	// RolloutTimeout bounds the wait for each restarted workload (5 min
	// when zero).
	RolloutTimeout time.Duration
	Progress       func(string)
	// Key makes a new key (32 random bytes, base64, when nil).
	Key func() ([]byte, error)
}

// KeysResult is what a key rotation did (or would do). It counts keys
// and never shows one.
type KeysResult struct {
	Secret string `json:"secret"`
	DryRun bool   `json:"dryRun,omitempty"`
	Retire bool   `json:"retire,omitempty"`
	// Changed is false when there was nothing to do (retiring with no old
	// key left).
	Changed bool `json:"changed"`
	// Resumed is the step of a killed run that this one finished.
	Resumed string `json:"resumed,omitempty"`
	// RingBefore and RingAfter count the keys that verify (each ring has
	// as many signing as encryption keys).
	RingBefore int    `json:"ringBefore"`
	RingAfter  int    `json:"ringAfter"`
	Summary    string `json:"summary"`
	// Restarted lists the workloads rolled onto the new rings.
	Restarted []string `json:"restarted,omitempty"`
}

// ring is one kind of key: the current one and every key that verifies.
type ring struct {
	current []byte
	all     [][]byte
}

func readRing(s *corev1.Secret, currentKey, ringKey string) ring {
	r := ring{current: s.Data[currentKey]}
	for _, k := range bytes.Split(s.Data[ringKey], []byte("\n")) {
		if k = bytes.TrimSpace(k); len(k) > 0 {
			r.all = append(r.all, k)
		}
	}
	if len(r.all) == 0 && len(r.current) > 0 {
		r.all = [][]byte{r.current}
	}
	return r
}

func (r ring) encode() []byte { return bytes.Join(r.all, []byte("\n")) }

// staged: the newest key of the ring does not sign yet.
func (r ring) staged() bool { return len(r.all) > 0 && !bytes.Equal(r.all[0], r.current) }

// Keys rotates the platform's signing and encryption keys with an overlap
// in which every service accepts both the old and the new keys:
//
//  1. a new signing key and a new encryption key join the rings, newest
//     first, and every workload that reads the Secret rolls onto them: each
//     pod now verifies and decrypts with the new keys, but still signs and
//     encrypts with the old ones, so a token or datum a new pod makes is
//     one every pod, old or new, accepts;
//  2. the new keys become the ones that sign and encrypt, and the
//     workloads roll again;
//  3. with Retire (a later run, once tokens made before step 2 have
//     expired and old data is re-encrypted), the rings keep only the
//     current keys and the workloads roll: older keys are refused.
//
// Each step is one write of the Secret recording the step
// (AnnotationKeysStep), then the rollout; a killed run is finished by the
// next one. Keys never leave this function.
func Keys(ctx context.Context, o KeysOptions) (*KeysResult, error) {
	now, timeout, say := orNow(o.Now), orFiveMinutes(o.RolloutTimeout), progressOf(o.Progress)
	newKey := o.Key
	if newKey == nil {
		newKey = generateKey
	}
	api := o.Client.CoreV1().Secrets(o.Namespace)
	name := credentials.PlatformKeys
	ref := o.Namespace + "/" + name
	s, err := api.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, refused("secret %s does not exist: the platform has no signing and encryption keys (is it installed in namespace %s?)", ref, o.Namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", ref, err)
	}
	if s.Labels[secrets.LabelGenerated] != "true" {
		return nil, refused("secret %s is your own (it lacks the label %s=true), so onprem never changes it: "+
			"rotate its keys where they come from, then restart the services", ref, secrets.LabelGenerated)
	}
	sign, enc := readRing(s, KeySigning, KeySigningRing), readRing(s, KeyEncryption, KeyEncryptionRing)
	if len(sign.current) == 0 || len(enc.current) == 0 {
		return nil, fmt.Errorf("secret %s lacks %s or %s: run 'onprem install' to complete it, then rotate", ref, KeySigning, KeyEncryption)
	}
	step := s.Annotations[AnnotationKeysStep]
	if step == "" && (sign.staged() || enc.staged()) {
		step = KeysStaged // written by hand or by a run older than the annotation
	}
	if step == KeysRetiring {
		// A retirement was interrupted: finish it, whatever was asked.
		o.Retire = true
	}
	res := &KeysResult{Secret: name, DryRun: o.DryRun, Retire: o.Retire, RingBefore: len(sign.all), Changed: true}
	switch {
	case o.Retire && (step == KeysStaged || step == KeysSwitched):
		return nil, refused("a key rotation in %s is unfinished (%s): run 'onprem rotate keys' to finish it, then retire", ref, step)
	case o.Retire && step == "" && len(sign.all) == 1 && len(enc.all) == 1:
		res.Changed, res.RingAfter = false, 1
		res.Summary = "nothing to retire: the rings hold the current keys only"
		return res, nil
	case o.Retire:
		res.Resumed = stepName(step)
		res.RingAfter = 1
		res.Summary = fmt.Sprintf("retire %d older key(s) of each ring: tokens and data of those keys are refused from then on", len(sign.all)-1)
	case step != "":
		res.Resumed = stepName(step)
		res.RingAfter = len(sign.all)
		res.Summary = "finish the rotation: the newest keys sign and encrypt, the older ones still verify and decrypt"
	default:
		res.RingAfter = len(sign.all) + 1
		res.Summary = "new signing and encryption keys; the old ones still verify and decrypt until 'onprem rotate keys --retire'"
	}
	if o.DryRun {
		res.Restarted, err = consumers(ctx, o.Client, o.Namespace, []string{name}, nil)
		return res, err
	}

	w := &secretSteps{api: api, ref: ref, s: s}
	write := func(what string, change func(*corev1.Secret)) error { return w.write(ctx, what, change) }
	roll := func(why string) error {
		done, err := restartFor(ctx, o.Client, o.Namespace, []string{name}, nil, timeout, why, say)
		for _, d := range done {
			if !slices.Contains(res.Restarted, d) {
				res.Restarted = append(res.Restarted, d)
			}
		}
		return err
	}

	if o.Retire {
		if step != KeysRetiring {
			err := write("retiring the older keys", func(n *corev1.Secret) {
				n.Data[KeySigningRing], n.Data[KeyEncryptionRing] = bytes.Clone(sign.current), bytes.Clone(enc.current)
				n.Annotations[AnnotationKeysStep] = KeysRetiring
			})
			if err != nil {
				return nil, err
			}
			say("%s: the rings hold the current keys only", name)
		}
		if err := roll("the older keys refused"); err != nil {
			return nil, fmt.Errorf("restarting the services without the older keys (run 'onprem rotate keys --retire' again): %w", err)
		}
		if err := write("recording the retirement", func(n *corev1.Secret) { delete(n.Annotations, AnnotationKeysStep) }); err != nil {
			return nil, err
		}
		return res, nil
	}

	if step == "" {
		ns, err := newKey()
		if err != nil {
			return nil, fmt.Errorf("a new signing key: %w", err)
		}
		ne, err := newKey()
		if err != nil {
			return nil, fmt.Errorf("a new encryption key: %w", err)
		}
		sign.all = append([][]byte{ns}, sign.all...)
		enc.all = append([][]byte{ne}, enc.all...)
		err = write("adding the new keys to the rings", func(n *corev1.Secret) {
			n.Data[KeySigningRing], n.Data[KeyEncryptionRing] = sign.encode(), enc.encode()
			n.Annotations[AnnotationKeysStep] = KeysStaged
		})
		if err != nil {
			return nil, err
		}
		step = KeysStaged
		say("%s: new keys staged (they verify and decrypt; the old ones still sign and encrypt)", name)
	}
	if step == KeysStaged {
		if err := roll("the new keys verify, the old ones still sign"); err != nil {
			return nil, fmt.Errorf("restarting the services with the new keys staged (tokens and data still use the old keys; run 'onprem rotate keys' again): %w", err)
		}
		err := write("switching to the new keys", func(n *corev1.Secret) {
			n.Data[KeySigning], n.Data[KeyEncryption] = bytes.Clone(sign.all[0]), bytes.Clone(enc.all[0])
			n.Annotations[AnnotationKeysStep] = KeysSwitched
			n.Annotations[AnnotationRotatedAt] = now.UTC().Format(time.RFC3339)
		})
		if err != nil {
			return nil, err
		}
		step = KeysSwitched
		say("%s: the new keys sign and encrypt", name)
	}
	if err := roll("the new keys sign"); err != nil {
		return nil, fmt.Errorf("restarting the services onto the new signing keys (every pod accepts both keys; run 'onprem rotate keys' again): %w", err)
	}
	if err := write("recording the rotation", func(n *corev1.Secret) { delete(n.Annotations, AnnotationKeysStep) }); err != nil {
		return nil, err
	}
	return res, nil
}

func stepName(step string) string {
	switch step {
	case KeysStaged:
		return "staging the new keys"
	case KeysSwitched:
		return "switching to the new keys"
	case KeysRetiring:
		return "retiring the older keys"
	}
	return ""
}

// KeysDue says whether the platform's keys, generated by onprem, are
// older than maxAge (since their last rotation, else their creation), or
// a rotation of them was interrupted (not a retirement, which only the
// operator asks for): what spec.rotation.keysMaxAgeDays rotates.
func KeysDue(ctx context.Context, c kubernetes.Interface, ns string, maxAge time.Duration, now time.Time) (bool, error) {
	s, err := c.CoreV1().Secrets(ns).Get(ctx, credentials.PlatformKeys, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading secret %s/%s: %w", ns, credentials.PlatformKeys, err)
	}
	if s.Labels[secrets.LabelGenerated] != "true" {
		return false, nil
	}
	switch s.Annotations[AnnotationKeysStep] {
	case KeysStaged, KeysSwitched:
		return true, nil
	case KeysRetiring:
		return false, nil
	}
	since := s.CreationTimestamp.Time
	if t, err := time.Parse(time.RFC3339, s.Annotations[AnnotationRotatedAt]); err == nil {
		since = t
	}
	return now.Sub(since) > maxAge, nil
}

// generateKey makes a key as onprem generates them.
func generateKey() ([]byte, error) {
	data, err := secrets.Generate(credentials.Secret{Name: "rotation", Keys: []credentials.Key{{Name: "k", Kind: credentials.RandomKey}}}, secrets.GenerateOptions{})
	if err != nil {
		return nil, err
	}
	if len(data["k"]) == 0 {
		return nil, errors.New("no key generated")
	}
	return data["k"], nil
}
