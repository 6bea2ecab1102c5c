package secrets

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"time"
)

// KeyCAKey holds the CA's private key (PKCS#8 PEM) beside the TLS pair, so
// that a new serving certificate can be signed under the same CA
// (installer/rotate) and clients keep trusting it. It is not a planned
// key: the Secrets of installations made before onprem kept it lack it, and
// their certificate is renewed with a new CA instead.
const KeyCAKey = "ca.key"

// NewCA makes a CA for domain: an ECDSA P-256 key and a self-signed
// certificate valid ten years from an hour before now, constrained (RFC
// 5280 name constraints, critical) to sign for domain and its subdomains
// only, so that its key, which onprem keeps, can vouch for nothing else.
// It returns the certificate and the key, PEM encoded.
func NewCA(domain string, now time.Time) (certPEM, keyPEM []byte, err error) {
	if err := checkDomain(domain); err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the CA key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notBefore := now.Add(-backdate).UTC().Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber:                serial,
		Subject:                     pkix.Name{CommonName: "onprem CA for " + domain, Organization: []string{"onprem"}},
		NotBefore:                   notBefore,
		NotAfter:                    notBefore.AddDate(caYears, 0, 0),
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLen:                  0,
		MaxPathLenZero:              true,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         []string{domain},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// SignServing makes a serving certificate for domain and *.domain with a
// new ECDSA P-256 key, signed by the CA (as NewCA returns it), valid 825
// days from an hour before now (the whole period Apple platforms accept),
// or until the CA expires if that is sooner. It returns the certificate
// (the leaf only: clients hold the CA) and its key, PEM encoded.
func SignServing(domain string, caCertPEM, caKeyPEM []byte, now time.Time) (certPEM, keyPEM []byte, err error) {
	if err := checkDomain(domain); err != nil {
		return nil, nil, err
	}
	ca, caKey, err := ParseCA(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating the certificate key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	notBefore := now.Add(-backdate).UTC().Truncate(time.Second)
	notAfter := notBefore.Add(leafValidity)
	if notAfter.After(ca.NotAfter) {
		notAfter = ca.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: domain, Organization: []string{"onprem"}},
		DNSNames:              []string{domain, "*." + domain},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing the certificate for %s: %w", domain, err)
	}
	keyPEM, err = encodeKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), keyPEM, nil
}

// ParseCA reads a CA certificate and its private key (PEM) and checks that
// they belong together. Errors never quote the key.
func ParseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("the CA certificate is not a PEM CERTIFICATE")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the CA certificate: %w", err)
	}
	if !ca.IsCA {
		return nil, nil, errors.New("the CA certificate is not a CA")
	}
	kb, _ := pem.Decode(keyPEM)
	if kb == nil || kb.Type != "PRIVATE KEY" {
		return nil, nil, errors.New("the CA key is not a PEM PRIVATE KEY (PKCS#8)")
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, errors.New("the CA key cannot be read as PKCS#8")
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("the CA key is a %T, which cannot sign", k)
	}
	if pub, ok := signer.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(ca.PublicKey) {
		return nil, nil, errors.New("the CA key does not belong to the CA certificate")
	}
	return ca, signer, nil
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding a private key: %w", err)
	}
	defer clear(der)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}
