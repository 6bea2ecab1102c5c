//go:build linux

package testcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the throw-away public-key infrastructure of one cluster: a CA that
// signs the apiserver's serving certificate and the client certificates,
// and the service-account signing key. Keys are ECDSA P-256 (fast to make,
// accepted by every component). Everything lives in <cluster dir>/pki.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte
}

// clientCert is a PEM certificate and key pair written to disk.
type clientCert struct {
	certPEM, keyPEM []byte
}

func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "onprem-testcluster-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: cert, caKey: key, caPEM: pemBlock("CERTIFICATE", der)}
	keyPEM, err := privateKeyPEM(key)
	if err != nil {
		return nil, err
	}
	return p, p.write("ca", clientCert{p.caPEM, keyPEM})
}

// path returns the file of a PKI object: path("ca", "crt") is pki/ca.crt.
func (p *pki) path(name, ext string) string { return filepath.Join(p.dir, name+"."+ext) }

func (p *pki) write(name string, c clientCert) error {
	if err := os.WriteFile(p.path(name, "crt"), c.certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(p.path(name, "key"), c.keyPEM, 0o600)
}

// issue signs a certificate for tmpl (subject, usages, SANs set by the
// caller) and writes it as pki/<name>.crt and pki/<name>.key.
func (p *pki) issue(name string, tmpl *x509.Certificate) (clientCert, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return clientCert{}, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(10 * 24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return clientCert{}, err
	}
	keyPEM, err := privateKeyPEM(key)
	if err != nil {
		return clientCert{}, err
	}
	c := clientCert{certPEM: pemBlock("CERTIFICATE", der), keyPEM: keyPEM}
	return c, p.write(name, c)
}

// serving issues the apiserver's serving certificate: loopback, localhost
// and the in-cluster names of the kubernetes Service.
func (p *pki) serving(name string, serviceIP net.IP) (clientCert, error) {
	return p.issue(name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, serviceIP},
	})
}

// client issues a client certificate for user in groups.
func (p *pki) client(name, user string, groups ...string) (clientCert, error) {
	return p.issue(name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

// serviceAccountKey writes the key that signs service-account tokens
// (pki/sa.key) and its public half (pki/sa.pub).
func (p *pki) serviceAccountKey() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	keyPEM, err := privateKeyPEM(key)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := os.WriteFile(p.path("sa", "key"), keyPEM, 0o600); err != nil {
		return err
	}
	return os.WriteFile(p.path("sa", "pub"), pemBlock("PUBLIC KEY", pub), 0o644)
}

func privateKeyPEM(key crypto.Signer) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	return pemBlock("PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err)
	}
	return n
}
