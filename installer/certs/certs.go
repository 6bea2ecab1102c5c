// Package certs reads the certificates of the platform's Secrets and
// judges their expiry the same way everywhere (status, preflight, doctor):
// a warning within 30 days, an error within 7 days or once expired.
package certs

import (
	"crypto/x509"
	"encoding/pem"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Expiry thresholds.
const (
	WarnBefore = 30 * 24 * time.Hour
	FailBefore = 7 * 24 * time.Hour
)

// Level is how urgent a certificate's expiry is.
type Level string

// Levels of Judge.
const (
	OK      Level = "ok"
	Warning Level = "warning"
	Error   Level = "error"
)

// Judge says how urgent an expiry at notAfter is at now.
func Judge(now, notAfter time.Time) Level {
	switch left := notAfter.Sub(now); {
	case left < FailBefore:
		return Error
	case left < WarnBefore:
		return Warning
	}
	return OK
}

// DaysLeft is the whole days from now to notAfter (negative once expired).
func DaysLeft(now, notAfter time.Time) int {
	d := notAfter.Sub(now)
	days := int(d / (24 * time.Hour))
	if d < 0 && d%(24*time.Hour) != 0 {
		days--
	}
	return days
}

// Certificate is one certificate found in a Secret.
type Certificate struct {
	Namespace string    `json:"namespace"`
	Secret    string    `json:"secretName"`
	Key       string    `json:"key"`
	Subject   string    `json:"subject"`
	Issuer    string    `json:"issuer"`
	DNSNames  []string  `json:"dnsNames,omitempty"`
	IsCA      bool      `json:"isCA,omitempty"`
	NotBefore time.Time `json:"notBefore"`
	NotAfter  time.Time `json:"notAfter"`
}

// Parse returns every certificate of a PEM value (a chain gives several),
// skipping what is not a readable certificate. No other value is kept.
func Parse(ns, secret, key string, data []byte) []Certificate {
	var out []Certificate
	for _, cert := range X509(data) {
		out = append(out, Certificate{Namespace: ns, Secret: secret, Key: key, Subject: cert.Subject.String(), Issuer: cert.Issuer.String(),
			DNSNames: cert.DNSNames, IsCA: cert.IsCA, NotBefore: cert.NotBefore.UTC(), NotAfter: cert.NotAfter.UTC()})
	}
	return out
}

// X509 reads every certificate of a PEM value, in order, skipping blocks
// that are not readable certificates (a private key among them is never
// returned).
func X509(data []byte) []*x509.Certificate {
	var out []*x509.Certificate
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return out
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		if cert, err := x509.ParseCertificate(b.Bytes); err == nil {
			out = append(out, cert)
		}
	}
}

// InSecret returns the certificates of a Secret's values that hold PEM
// certificates, sorted by key.
func InSecret(s *corev1.Secret) []Certificate {
	var out []Certificate
	keys := make([]string, 0, len(s.Data))
	for k := range s.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if strings.Contains(string(s.Data[k]), "-----BEGIN CERTIFICATE-----") {
			out = append(out, Parse(s.Namespace, s.Name, k, s.Data[k])...)
		}
	}
	return out
}
