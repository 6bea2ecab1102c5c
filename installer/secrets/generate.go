// Package secrets creates the Secrets of credentials.Plan in a cluster once
// and keeps them forever.
//
// Ensure creates every planned Secret that does not exist and adds the keys
// missing from one that does; it never changes a value that exists, so a
// re-run, an upgrade or a reinstall after an uninstall without --purge
// finds the same passwords, keys and certificates. Two installers that run
// at once end with one set of values: creation is a Create that fails if
// the Secret appeared meanwhile, completion is an Update guarded by the
// resourceVersion that was read.
//
// A Secret of a planned name that onprem did not generate (it lacks the
// label onprem.dev/generated=true) belongs to the operator and is never
// modified: if it holds every planned key it is used as it is, otherwise
// Ensure fails and says what to do.
//
// Values never leave this package through a log, an error message or a
// report: errors name Secrets and keys only. Redact and Values exist so
// that diffs and logs printed elsewhere can hide them too.
//
// # The self-signed TLS pair
//
// A TLSPair Secret (type kubernetes.io/tls) holds, PEM encoded:
//
//	tls.crt  the certificate for DOMAIN and *.DOMAIN only (no chain): the CA
//	         is the trust anchor, which a TLS server need not send
//	         (RFC 8446 4.4.2) and clients must have already
//	tls.key  the certificate's ECDSA P-256 key, PKCS#8 ("PRIVATE KEY")
//	ca.crt   the self-signed CA ("onprem CA for DOMAIN"), the file operators
//	         and clients add to their trust stores
//	ca.key   the CA's ECDSA P-256 key, PKCS#8 (not a planned key: see KeyCAKey)
//
// This is the kubernetes.io/tls convention cert-manager also follows
// (tls.crt = leaf and intermediates, ca.crt = the root). The CA carries
// critical name constraints (RFC 5280) permitting DOMAIN and its
// subdomains only: its key, kept so that `onprem rotate certificates` can
// sign a new certificate that clients already trust, can vouch for no
// other name. (Installations made before the key was kept lack ca.key, and
// their CA had no constraints; rotating their certificate makes a new CA.)
// The certificate is valid 825 days and the CA 10 years, both from an hour
// before generation (clock skew). During a CA rotation ca.crt holds the new
// CA and the old one, so that clients trust both until the old one is
// retired (installer/rotate).
package secrets

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"onprem.dev/onprem/installer/credentials"
)

// GenerateOptions are what generated values depend on besides randomness.
type GenerateOptions struct {
	// Domain is the platform's DNS name; the TLS certificate is for Domain
	// and *.Domain. Only TLSPair keys need it.
	Domain string
	// Now is the clock of certificate validity; nil means time.Now.
	Now func() time.Time
}

const (
	// PasswordLength is the length of a generated password.
	PasswordLength = 32
	// RandomKeyBytes is the number of random bytes of a RandomKey (stored
	// base64 encoded).
	RandomKeyBytes = 32

	passwordAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	// acceptBelow is the largest multiple of len(passwordAlphabet) that fits
	// in a byte (4*62 = 248): bytes from 248 up are rejected so that every
	// character is exactly equally likely.
	acceptBelow = 256 - 256%len(passwordAlphabet)

	leafValidity = 825 * 24 * time.Hour
	caYears      = 10
	backdate     = time.Hour
)

// The keys a TLSPair fills.
const (
	KeyTLSCert = "tls.crt"
	KeyTLSKey  = "tls.key"
	KeyCACert  = "ca.crt"
)

// Generate makes the values of one planned Secret, every key of it, with
// crypto/rand. The TLSPair keys of the Secret are made together, as one
// pair.
func Generate(s credentials.Secret, o GenerateOptions) (map[string][]byte, error) {
	return generate(s.Name, s.Keys, o)
}

// generate makes the values of keys, a subset of Secret name's keys.
func generate(name string, keys []credentials.Key, o GenerateOptions) (map[string][]byte, error) {
	out := make(map[string][]byte, len(keys))
	var pair map[string][]byte
	for _, k := range keys {
		if _, dup := out[k.Name]; dup {
			return nil, fmt.Errorf("secret %s: key %s is planned twice", name, k.Name)
		}
		switch k.Kind {
		case credentials.Password:
			v, err := password(rand.Reader, PasswordLength)
			if err != nil {
				return nil, fmt.Errorf("secret %s: key %s: %w", name, k.Name, err)
			}
			out[k.Name] = v
		case credentials.RandomKey:
			v, err := randomKey(rand.Reader)
			if err != nil {
				return nil, fmt.Errorf("secret %s: key %s: %w", name, k.Name, err)
			}
			out[k.Name] = v
		case credentials.Fixed:
			if k.Value == "" {
				return nil, fmt.Errorf("secret %s: fixed key %s has no value in the plan", name, k.Name)
			}
			out[k.Name] = []byte(k.Value)
		case credentials.TLSPair:
			if !isTLSKey(k.Name) {
				return nil, fmt.Errorf("secret %s: key %s: a %s key must be one of %s, %s, %s", name, k.Name, k.Kind, KeyTLSCert, KeyTLSKey, KeyCACert)
			}
			if pair == nil {
				p, err := tlsPair(o)
				if err != nil {
					return nil, fmt.Errorf("secret %s: %w", name, err)
				}
				pair = p
			}
			out[k.Name] = pair[k.Name]
			// The CA's key goes with a new CA certificate.
			if k.Name == KeyCACert {
				out[KeyCAKey] = pair[KeyCAKey]
			}
		default:
			return nil, fmt.Errorf("secret %s: key %s: unknown kind %q (valid: %s, %s, %s, %s)", name, k.Name, k.Kind,
				credentials.Password, credentials.RandomKey, credentials.Fixed, credentials.TLSPair)
		}
	}
	return out, nil
}

func isTLSKey(name string) bool {
	return name == KeyTLSCert || name == KeyTLSKey || name == KeyCACert
}

// password returns n characters of passwordAlphabet, each drawn uniformly
// from r by rejection sampling.
func password(r io.Reader, n int) ([]byte, error) {
	out := make([]byte, 0, n)
	// 248 of 256 byte values are accepted: n + n/8 bytes usually suffice.
	buf := make([]byte, n+n/8+4)
	for len(out) < n {
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, fmt.Errorf("reading randomness: %w", err)
		}
		for _, b := range buf {
			if int(b) >= acceptBelow {
				continue
			}
			out = append(out, passwordAlphabet[int(b)%len(passwordAlphabet)])
			if len(out) == n {
				break
			}
		}
	}
	clear(buf)
	return out, nil
}

// randomKey returns RandomKeyBytes random bytes, base64 (standard) encoded.
func randomKey(r io.Reader) ([]byte, error) {
	raw := make([]byte, RandomKeyBytes)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, fmt.Errorf("reading randomness: %w", err)
	}
	out := make([]byte, base64.StdEncoding.EncodedLen(len(raw)))
	base64.StdEncoding.Encode(out, raw)
	clear(raw)
	return out, nil
}

// checkDomain accepts what installer/config accepts for spec.domain: a
// lowercase DNS name, not a wildcard and not an IP address.
func checkDomain(d string) error {
	if d == "" {
		return errors.New("a TLS certificate needs the platform's domain (GenerateOptions.Domain is empty)")
	}
	if net.ParseIP(d) != nil {
		return fmt.Errorf("domain %q is an IP address; a TLS certificate is made for a DNS name", d)
	}
	if errs := validation.IsDNS1123Subdomain(d); len(errs) > 0 {
		return fmt.Errorf("domain %q is not a lowercase DNS name: %s", d, strings.Join(errs, "; "))
	}
	return nil
}

// tlsPair makes a CA and a certificate for the domain signed by it, and
// returns tls.crt, tls.key, ca.crt and the CA's key (ca.key).
func tlsPair(o GenerateOptions) (map[string][]byte, error) {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	t := now()
	caCert, caKey, err := NewCA(o.Domain, t)
	if err != nil {
		return nil, err
	}
	cert, key, err := SignServing(o.Domain, caCert, caKey, t)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{KeyTLSCert: cert, KeyTLSKey: key, KeyCACert: caCert, KeyCAKey: caKey}, nil
}

// serialNumber is a positive random number of up to 128 bits (RFC 5280
// allows 20 octets; CA/Browser rules ask for at least 64 random bits).
func serialNumber() (*big.Int, error) {
	limit := new(big.Int).Lsh(big.NewInt(1), 128)
	for {
		n, err := rand.Int(rand.Reader, limit)
		if err != nil {
			return nil, fmt.Errorf("generating a serial number: %w", err)
		}
		if n.Sign() > 0 {
			return n, nil
		}
	}
}
