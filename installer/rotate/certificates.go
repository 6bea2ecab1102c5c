package rotate

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/secrets"
)

// Mode is what a certificate rotation changes.
type Mode string

const (
	// Renew signs a new serving certificate (and key) under the same CA:
	// no client changes anything.
	Renew Mode = "renew"
	// NewCA makes a new CA (its key replaces ca.key) and adds it to
	// ca.crt beside the old ones; the serving certificate stays as it is,
	// so that nothing fails while clients take the new ca.crt.
	NewCA Mode = "new-ca"
	// RetireCA keeps in ca.crt only the CA whose key onprem holds (the
	// newest), and signs a new serving certificate with it if the one
	// served is under an old CA: after it, the old CA validates nothing
	// that reads ca.crt.
	RetireCA Mode = "retire-ca"
)

// RefusedError is a rotation refused before anything changed, for a
// reason the operator fixes (exit code 2 in the CLI).
type RefusedError struct{ Reason string }

func (e *RefusedError) Error() string { return e.Reason }

func refused(format string, args ...any) error {
	return &RefusedError{Reason: fmt.Sprintf(format, args...)}
}

// CertificatesOptions say which certificate to rotate and how.
type CertificatesOptions struct {
	Client    kubernetes.Interface
	Namespace string
	// Secret is the TLS Secret (credentials.TLS when empty).
	Secret string
	Mode   Mode
	// DryRun computes and reports the change without writing it.
	DryRun bool
	// Now is the clock of the new certificates (time.Now when zero).
	Now time.Time
}

// CertificatesResult is what a certificate rotation did (or, in a dry
// run, would do).
type CertificatesResult struct {
	Secret  string `json:"secret"`
	Mode    Mode   `json:"mode"`
	DryRun  bool   `json:"dryRun,omitempty"`
	Changed bool   `json:"changed"`
	// Summary says what changed, in one sentence.
	Summary string              `json:"summary"`
	Before  []certs.Certificate `json:"before"`
	After   []certs.Certificate `json:"after,omitempty"`
	// TrustedCAs is how many CAs ca.crt holds afterwards.
	TrustedCAs int `json:"trustedCAs"`
}

// Certificates rotates the platform's self-signed certificate (see Mode).
// The operator's own certificate (a Secret onprem did not generate) is
// refused: it is renewed where it comes from.
func Certificates(ctx context.Context, o CertificatesOptions) (*CertificatesResult, error) {
	name := o.Secret
	if name == "" {
		name = credentials.TLS
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	switch o.Mode {
	case Renew, NewCA, RetireCA:
	default:
		return nil, refused("certificate rotation mode %q: use %s, %s or %s", o.Mode, Renew, NewCA, RetireCA)
	}
	ref := o.Namespace + "/" + name
	cur, err := o.Client.CoreV1().Secrets(o.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, refused("secret %s does not exist: onprem makes it when the platform is installed with tls.mode selfSigned; is the platform installed in %s?", ref, o.Namespace)
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s: %w", ref, err)
	}
	if cur.Labels[secrets.LabelGenerated] != "true" {
		return nil, refused("secret %s is the operator's own certificate (it lacks the label %s=true), so onprem never changes it: "+
			"renew it where it comes from (your CA or cert-manager) and update the Secret", ref, secrets.LabelGenerated)
	}
	if cur.Type != corev1.SecretTypeTLS {
		return nil, refused("secret %s has type %s, not %s: it holds no certificate to rotate", ref, cur.Type, corev1.SecretTypeTLS)
	}
	leaf, err := firstCert(cur.Data[secrets.KeyTLSCert])
	if err != nil {
		return nil, refused("secret %s: %s: %v; delete the Secret and run 'onprem install' to have a new CA and certificate made", ref, secrets.KeyTLSCert, err)
	}
	if len(leaf.DNSNames) == 0 {
		return nil, refused("secret %s: the certificate names no DNS name to renew it for", ref)
	}
	domain := leaf.DNSNames[0]
	cas := certs.X509(cur.Data[secrets.KeyCACert])

	res := &CertificatesResult{Secret: name, Mode: o.Mode, DryRun: o.DryRun, Before: certs.InSecret(cur)}
	data := map[string][]byte{}
	for k, v := range cur.Data {
		data[k] = v
	}
	noKey := func(what string) error {
		return refused("secret %s holds no key of its CA (onprem kept none before this version, or the key does not match ca.crt), "+
			"so %s: first make a new CA with 'onprem rotate certificates --ca'", ref, what)
	}
	switch o.Mode {
	case Renew:
		caPEM, caKey, ok := signingCA(cas, cur.Data[secrets.KeyCAKey])
		if !ok {
			return nil, noKey("no certificate can be signed that clients already trust")
		}
		cert, key, err := secrets.SignServing(domain, caPEM, caKey, now)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", ref, err)
		}
		data[secrets.KeyTLSCert], data[secrets.KeyTLSKey] = cert, key
		res.Summary = fmt.Sprintf("a new serving certificate for %s under the CA %q", domain, subjectOf(caPEM))
	case NewCA:
		caPEM, caKey, err := secrets.NewCA(domain, now)
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", ref, err)
		}
		bundle := bytes.Clone(caPEM)
		kept := 0
		for _, ca := range cas {
			if now.Before(ca.NotAfter) {
				bundle = append(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})...)
				kept++
			}
		}
		data[secrets.KeyCACert], data[secrets.KeyCAKey] = bundle, caKey
		res.Summary = fmt.Sprintf("a new CA, trusted in ca.crt beside %d old one(s); the serving certificate stays as it is until "+
			"'onprem rotate certificates --retire-ca', so clients have time to take the new ca.crt", kept)
	case RetireCA:
		caPEM, caKey, ok := signingCA(cas, cur.Data[secrets.KeyCAKey])
		if !ok {
			return nil, noKey("there is no current CA to keep")
		}
		current := certs.X509(caPEM)[0]
		if len(cas) == 1 && leaf.CheckSignatureFrom(current) == nil {
			res.TrustedCAs = 1
			res.Summary = "ca.crt trusts one CA, the serving certificate's: nothing to retire"
			return res, nil
		}
		res.Summary = fmt.Sprintf("%d old CA(s) retired: ca.crt trusts only %q", len(cas)-1, current.Subject.CommonName)
		if leaf.CheckSignatureFrom(current) != nil {
			cert, key, err := secrets.SignServing(domain, caPEM, caKey, now)
			if err != nil {
				return nil, fmt.Errorf("secret %s: %w", ref, err)
			}
			data[secrets.KeyTLSCert], data[secrets.KeyTLSKey] = cert, key
			res.Summary += ", which signed a new serving certificate"
		}
		data[secrets.KeyCACert] = caPEM
	}
	res.TrustedCAs = len(certs.X509(data[secrets.KeyCACert]))
	upd := cur.DeepCopy()
	upd.Data = data
	if upd.Annotations == nil {
		upd.Annotations = map[string]string{}
	}
	upd.Annotations[AnnotationRotatedAt] = now.UTC().Format(time.RFC3339)
	res.After = certs.InSecret(upd)
	res.Changed = true
	if o.DryRun {
		return res, nil
	}
	if _, err := o.Client.CoreV1().Secrets(o.Namespace).Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) {
			return nil, fmt.Errorf("secret %s changed while it was being rotated (another onprem?): nothing was written; run the rotation again: %w", ref, err)
		}
		return nil, fmt.Errorf("writing secret %s: %w", ref, err)
	}
	return res, nil
}

// subjectOf is the common name of the first certificate of a PEM value.
func subjectOf(p []byte) string {
	if c := certs.X509(p); len(c) > 0 {
		return c[0].Subject.CommonName
	}
	return ""
}

// signingCA finds, among cas, the CA whose key keyPEM is, and returns it
// PEM encoded with the key.
func signingCA(cas []*x509.Certificate, keyPEM []byte) (caPEM, key []byte, ok bool) {
	if len(keyPEM) == 0 {
		return nil, nil, false
	}
	for _, ca := range cas {
		p := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
		if _, _, err := secrets.ParseCA(p, keyPEM); err == nil {
			return p, keyPEM, true
		}
	}
	return nil, nil, false
}

// firstCert is the first certificate of a PEM value.
func firstCert(data []byte) (*x509.Certificate, error) {
	all := certs.X509(data)
	if len(all) == 0 {
		return nil, errors.New("no readable certificate")
	}
	return all[0], nil
}

// RenewWithinDays: a serving certificate with fewer days left than this
// is due for renewal whatever its age.
const RenewWithinDays = 30

// RenewIfDue renews the platform's self-signed serving certificate under
// the same CA (Renew) when it is older than maxAgeDays days or has fewer
// than RenewWithinDays days left. It returns nil when the certificate is
// not due, or when there is no generated TLS Secret to renew.
func RenewIfDue(ctx context.Context, c kubernetes.Interface, namespace string, maxAgeDays int, now time.Time) (*CertificatesResult, error) {
	s, err := c.CoreV1().Secrets(namespace).Get(ctx, credentials.TLS, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading secret %s/%s: %w", namespace, credentials.TLS, err)
	}
	if s.Labels[secrets.LabelGenerated] != "true" {
		return nil, nil
	}
	leaf, err := firstCert(s.Data[secrets.KeyTLSCert])
	if err != nil {
		return nil, refused("secret %s/%s: %s: %v", namespace, credentials.TLS, secrets.KeyTLSCert, err)
	}
	old := now.Sub(leaf.NotBefore) > time.Duration(maxAgeDays)*24*time.Hour
	near := leaf.NotAfter.Sub(now) < RenewWithinDays*24*time.Hour
	if !old && !near {
		return nil, nil
	}
	return Certificates(ctx, CertificatesOptions{Client: c, Namespace: namespace, Mode: Renew, Now: now})
}
