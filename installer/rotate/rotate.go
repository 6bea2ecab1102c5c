// Package rotate changes, on an operator's demand, what onprem generated
// once and otherwise never changes (installer/secrets): it lists every
// Secret onprem manages with its age and, for certificates, its expiry;
// and it renews the platform's serving certificate, under the same CA or
// with a new CA that clients trust beside the old one until the old one is
// retired.
//
// Each change is one Update of one Secret, guarded by the resourceVersion
// that was read: a run killed half-way has changed nothing or everything,
// and a re-run starts from what the cluster holds. Values never leave this
// package: results and errors name Secrets, keys and certificates only.
package rotate

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/secrets"
)

// AnnotationRotatedAt is the time (RFC 3339) a Secret's values were last
// changed by a rotation; a Secret without it has its creation's values.
const AnnotationRotatedAt = "onprem.dev/rotated-at"

// What kind of value a Secret holds, for the listing.
const (
	KindCertificate = "certificate"
	KindCredential  = "credential"
	KindKeys        = "keys"
)

// Who owns a Secret's values.
const (
	OwnerOnprem   = "onprem"
	OwnerOperator = "operator"
)

// Item is one Secret as the listing shows it: never a value.
type Item struct {
	Secret  string `json:"secret"`
	Purpose string `json:"purpose,omitempty"`
	Kind    string `json:"kind"`
	// Owner: onprem generated it and rotates it; the operator's own
	// Secret (spec.tls.secretName) is renewed where it comes from.
	Owner string   `json:"owner"`
	Keys  []string `json:"keys"`
	// Since is when its values were made: its last rotation, else its
	// creation.
	Since   time.Time `json:"since"`
	AgeDays int       `json:"ageDays"`
	// Certificates of a TLS Secret, each with its expiry.
	Certificates []Certificate `json:"certificates,omitempty"`
	// Rotate is the command that rotates it ("" when onprem does not).
	Rotate string `json:"rotate,omitempty"`
}

// Certificate is a certificate with how soon it expires.
type Certificate struct {
	certs.Certificate
	DaysLeft int         `json:"daysLeft"`
	Level    certs.Level `json:"level"`
}

// List reads the Secrets of namespace that onprem generated, and the TLS
// Secrets there that it did not (the operator's certificate), sorted by
// name.
func List(ctx context.Context, c kubernetes.Interface, namespace string, now time.Time) ([]Item, error) {
	l, err := c.CoreV1().Secrets(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the Secrets of %s: %w", namespace, err)
	}
	var out []Item
	for i := range l.Items {
		s := &l.Items[i]
		generated := s.Labels[secrets.LabelGenerated] == "true"
		if !generated && s.Type != corev1.SecretTypeTLS {
			continue
		}
		it := Item{Secret: s.Name, Purpose: s.Annotations[secrets.AnnotationPurpose], Kind: kindOf(s), Owner: OwnerOperator,
			Since: s.CreationTimestamp.UTC()}
		if generated {
			it.Owner = OwnerOnprem
			it.Rotate = rotateCommand(it.Kind, s.Name)
		}
		if t, err := time.Parse(time.RFC3339, s.Annotations[AnnotationRotatedAt]); err == nil {
			it.Since = t.UTC()
		}
		it.AgeDays = int(now.Sub(it.Since).Hours() / 24)
		for k := range s.Data {
			it.Keys = append(it.Keys, k)
		}
		sort.Strings(it.Keys)
		for _, cert := range certs.InSecret(s) {
			it.Certificates = append(it.Certificates, Certificate{Certificate: cert, DaysLeft: certs.DaysLeft(now, cert.NotAfter), Level: certs.Judge(now, cert.NotAfter)})
		}
		out = append(out, it)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Secret < out[j].Secret })
	return out, nil
}

// kindOf says what a Secret holds: a certificate (its type), the platform's
// keys (the credentials plan's Secret of them), else a credential.
func kindOf(s *corev1.Secret) string {
	switch {
	case s.Type == corev1.SecretTypeTLS:
		return KindCertificate
	case s.Name == credentials.PlatformKeys:
		return KindKeys
	default:
		return KindCredential
	}
}

// rotateCommand is the command that rotates a Secret of a kind, "" for
// what this onprem does not rotate yet.
func rotateCommand(kind, name string) string {
	switch {
	case kind == KindCertificate:
		return "onprem rotate certificates"
	case kind == KindKeys:
		return "onprem rotate keys"
	case kind == KindCredential && name == credentials.RabbitMQ:
		return "onprem rotate credentials --database " + RabbitMQ
	case kind == KindCredential && name == credentials.Redis:
		return "onprem rotate credentials --database " + Redis
	case kind == KindCredential && name == credentials.PostgreSQLAdmin:
		return "onprem rotate credentials --admin --database " + PostgreSQL
	case kind == KindCredential && name == credentials.MongoDBAdmin:
		return "onprem rotate credentials --admin --database " + MongoDB
	case kind == KindCredential && name != credentials.PostgreSQLAdmin && name != credentials.MongoDBAdmin:
		for _, engine := range []string{PostgreSQL, MongoDB} {
			if svc, ok := serviceOf(name, engine); ok {
				return "onprem rotate credentials --component " + svc + " --database " + engine
			}
		}
	}
	return ""
}
