package secrets

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/installer/credentials"
)

const testDomain = "ci.example.com"

func oneKey(kind credentials.Kind, value string) credentials.Secret {
	return credentials.Secret{Name: "onprem-test", Type: "Opaque", Purpose: "a test",
		Keys: []credentials.Key{{Name: "k", Kind: kind, Value: value}}}
}

func TestPasswordsHaveTheAlphabetAndLengthAndAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		data, err := Generate(oneKey(credentials.Password, ""), GenerateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p := string(data["k"])
		if len(p) != 32 {
			t.Fatalf("password of %d characters, want 32", len(p))
		}
		for _, r := range p {
			if !strings.ContainsRune(passwordAlphabet, r) {
				t.Fatalf("password character %q is not in [A-Za-z0-9]", r)
			}
		}
		if seen[p] {
			t.Fatal("the same password was generated twice")
		}
		seen[p] = true
	}
	if len(passwordAlphabet) != 62 || acceptBelow != 248 {
		t.Fatalf("alphabet of %d, accept below %d", len(passwordAlphabet), acceptBelow)
	}
}

// cycleReader yields 0, 1, ..., 255, 0, 1, ... for ever.
type cycleReader struct{ next byte }

func (c *cycleReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = c.next
		c.next++
	}
	return len(p), nil
}

// Fed every byte value equally often, password must yield every character
// exactly equally often: the bytes 248..255 that a plain modulo would map
// onto the first 8 characters are rejected.
func TestPasswordHasNoModuloBias(t *testing.T) {
	const rounds = 50
	p, err := password(&cycleReader{}, acceptBelow*rounds)
	if err != nil {
		t.Fatal(err)
	}
	count := map[byte]int{}
	for _, b := range p {
		count[b]++
	}
	if len(count) != 62 {
		t.Fatalf("%d distinct characters, want 62", len(count))
	}
	for c, n := range count {
		if n != 4*rounds {
			t.Errorf("character %q appears %d times, want %d", c, n, 4*rounds)
		}
	}

	// Byte by byte: rejected bytes are skipped, not wrapped.
	p, err = password(bytes.NewReader([]byte{248, 255, 0, 61, 62, 247, 249, 1}), 4)
	if err != nil {
		t.Fatal(err)
	}
	if string(p) != "A9A9" {
		t.Errorf("password from 248 255 0 61 62 247 = %q, want A9A9", p)
	}
	if _, err := password(bytes.NewReader([]byte{250, 251}), 4); err == nil {
		t.Error("a short source of randomness gave no error")
	}
}

func TestRandomKeyIs32BytesBase64(t *testing.T) {
	a, err := Generate(oneKey(credentials.RandomKey, ""), GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(oneKey(credentials.RandomKey, ""), GenerateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(string(a["k"]))
	if err != nil {
		t.Fatalf("key is not standard base64: %v", err)
	}
	if len(raw) != 32 {
		t.Errorf("key decodes to %d bytes, want 32", len(raw))
	}
	if bytes.Equal(a["k"], b["k"]) {
		t.Error("two keys are equal")
	}
}

func TestFixedValues(t *testing.T) {
	plan := credentials.Plan(credentials.Needs{
		Internal:        map[string]bool{"mongodb": true, "postgresql": true, "redis": true, "rabbitmq": true},
		MongoDBUsers:    []string{"pipelines-api"},
		PostgreSQLUsers: []string{"audit-manager"},
	})
	want := map[string]map[string]string{
		credentials.MongoDBAdmin:          {"username": "root"},
		credentials.PostgreSQLAdmin:       {"username": "postgres"},
		credentials.RabbitMQ:              {"username": "onprem"},
		"onprem-pipelines-api-mongodb":    {"username": "pipelines_api", "database": "pipelines_api"},
		"onprem-audit-manager-postgresql": {"username": "audit_manager", "database": "audit_manager"},
	}
	for _, s := range plan {
		data, err := Generate(s, GenerateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(data) != len(s.Keys) {
			t.Errorf("%s: %d keys generated, want %d", s.Name, len(data), len(s.Keys))
		}
		for k, v := range want[s.Name] {
			if string(data[k]) != v {
				t.Errorf("%s/%s = %q, want %q", s.Name, k, data[k], v)
			}
		}
	}
	if _, err := Generate(oneKey(credentials.Fixed, ""), GenerateOptions{}); err == nil {
		t.Error("a fixed key without a value was accepted")
	}
}

func TestUnknownKindIsAnError(t *testing.T) {
	_, err := Generate(oneKey("magic", ""), GenerateOptions{})
	if err == nil || !strings.Contains(err.Error(), `unknown kind "magic"`) || !strings.Contains(err.Error(), "onprem-test") {
		t.Errorf("unknown kind: %v", err)
	}
}

func tlsSecret() credentials.Secret {
	return credentials.Plan(credentials.Needs{SelfSignedTLS: true})[0]
}

func parseCerts(t *testing.T, name string, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			if len(bytes.TrimSpace(rest)) > 0 {
				t.Fatalf("%s: trailing data after the PEM blocks", name)
			}
			break
		}
		if b.Type != "CERTIFICATE" {
			t.Fatalf("%s: PEM block %s, want CERTIFICATE", name, b.Type)
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, c)
	}
	return out
}

func TestTLSPair(t *testing.T) {
	now := time.Date(2026, 5, 17, 12, 30, 0, 0, time.UTC)
	data, err := Generate(tlsSecret(), GenerateOptions{Domain: testDomain, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if len(data) != 4 {
		t.Fatalf("TLS keys: %d, want tls.crt, tls.key, ca.crt and ca.key", len(data))
	}
	leaves := parseCerts(t, "tls.crt", data["tls.crt"])
	if len(leaves) != 1 {
		t.Fatalf("tls.crt holds %d certificates, want the leaf only", len(leaves))
	}
	leaf := leaves[0]
	cas := parseCerts(t, "ca.crt", data["ca.crt"])
	if len(cas) != 1 {
		t.Fatalf("ca.crt holds %d certificates, want 1", len(cas))
	}
	ca := cas[0]

	// The CA.
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.MaxPathLen != 0 || !ca.MaxPathLenZero {
		t.Errorf("CA: IsCA %v, basic constraints %v, MaxPathLen %d zero %v", ca.IsCA, ca.BasicConstraintsValid, ca.MaxPathLen, ca.MaxPathLenZero)
	}
	if ca.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Error("CA cannot sign certificates")
	}
	if ca.Subject.CommonName != "onprem CA for "+testDomain {
		t.Errorf("CA subject %q", ca.Subject.CommonName)
	}
	if err := ca.CheckSignatureFrom(ca); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}
	if got, want := ca.NotAfter.Sub(ca.NotBefore), ca.NotBefore.AddDate(10, 0, 0).Sub(ca.NotBefore); got != want {
		t.Errorf("CA valid for %v, want 10 years", got)
	}
	if pub, ok := ca.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("CA key %T, want ECDSA P-256", ca.PublicKey)
	}

	// The leaf.
	if !ca.NotBefore.Equal(now.Add(-time.Hour)) || !leaf.NotBefore.Equal(now.Add(-time.Hour)) {
		t.Errorf("not before: CA %v, leaf %v, want an hour before %v", ca.NotBefore, leaf.NotBefore, now)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got != 825*24*time.Hour {
		t.Errorf("leaf valid for %v, want 825 days", got)
	}
	if leaf.IsCA {
		t.Error("leaf is a CA")
	}
	if len(leaf.ExtKeyUsage) != 1 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth {
		t.Errorf("leaf extended key usage %v, want serverAuth", leaf.ExtKeyUsage)
	}
	if strings.Join(leaf.DNSNames, " ") != testDomain+" *."+testDomain {
		t.Errorf("leaf names %v", leaf.DNSNames)
	}
	if leaf.SerialNumber.Cmp(ca.SerialNumber) == 0 || leaf.SerialNumber.BitLen() < 64 {
		t.Errorf("serial numbers: CA %v leaf %v", ca.SerialNumber, leaf.SerialNumber)
	}

	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(data["ca.crt"]) {
		t.Fatal("ca.crt is not usable as a root")
	}
	verify := func(name string) error {
		_, err := leaf.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}
	for _, name := range []string{testDomain, "a." + testDomain, "gitops." + testDomain} {
		if err := verify(name); err != nil {
			t.Errorf("leaf does not verify for %s: %v", name, err)
		}
	}
	for _, name := range []string{"other.example", "a.b." + testDomain, "example.com"} {
		if err := verify(name); err == nil {
			t.Errorf("leaf verifies for %s", name)
		}
	}
	if err := verify(testDomain); err != nil {
		t.Fatal(err)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: testDomain, Roots: roots, CurrentTime: now.Add(826 * 24 * time.Hour)}); err == nil {
		t.Error("leaf verifies after 826 days")
	}

	// The key.
	kb, _ := pem.Decode(data["tls.key"])
	if kb == nil || kb.Type != "PRIVATE KEY" {
		t.Fatalf("tls.key is not a PKCS#8 PEM block")
	}
	key, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		t.Fatalf("tls.key: %v", err)
	}
	ek, ok := key.(*ecdsa.PrivateKey)
	if !ok || !ek.PublicKey.Equal(leaf.PublicKey) {
		t.Error("tls.key is not the leaf's key")
	}
	if _, err := tls.X509KeyPair(data["tls.crt"], data["tls.key"]); err != nil {
		t.Errorf("tls.crt and tls.key are not a pair: %v", err)
	}

	// The CA's key is kept, belongs to the CA, and signs only for the
	// domain: a certificate for another name made with it does not verify.
	if _, _, err := ParseCA(data["ca.crt"], data[KeyCAKey]); err != nil {
		t.Errorf("ca.key: %v", err)
	}
	if !ca.PermittedDNSDomainsCritical || strings.Join(ca.PermittedDNSDomains, " ") != testDomain {
		t.Errorf("CA name constraints: critical %v, permitted %v", ca.PermittedDNSDomainsCritical, ca.PermittedDNSDomains)
	}
	other, _, err := SignServing("other.example", data["ca.crt"], data[KeyCAKey], now)
	if err != nil {
		t.Fatal(err)
	}
	oc := parseCerts(t, "other", other)[0]
	if _, err := oc.Verify(x509.VerifyOptions{DNSName: "other.example", Roots: roots, CurrentTime: now}); err == nil {
		t.Error("the CA vouches for other.example")
	}

	// Another Secret gets another CA.
	again, err := Generate(tlsSecret(), GenerateOptions{Domain: testDomain})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(again["ca.crt"], data["ca.crt"]) || bytes.Equal(again["tls.key"], data["tls.key"]) {
		t.Error("two TLS pairs are the same")
	}
}

func TestTLSPairNeedsADNSName(t *testing.T) {
	for _, d := range []string{"", "10.0.0.1", "CI.example.com", "*.example.com", "ci.example.com:443"} {
		if _, err := Generate(tlsSecret(), GenerateOptions{Domain: d}); err == nil {
			t.Errorf("domain %q accepted", d)
		}
	}
	bad := credentials.Secret{Name: "onprem-tls", Keys: []credentials.Key{{Name: "cert.pem", Kind: credentials.TLSPair}}}
	if _, err := Generate(bad, GenerateOptions{Domain: testDomain}); err == nil || !strings.Contains(err.Error(), "cert.pem") {
		t.Errorf("TLS key cert.pem: %v", err)
	}
}
