package signing

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
)

func pemPublic(t *testing.T, k any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// A key made by 'cosign generate-key-pair' (ECDSA P-256, cosign.pub a PKIX
// PEM file) is read in both PEM forms; its signatures are ECDSA over the
// message's SHA-256, as cosign makes them; other curves and kinds are
// refused by name.
func TestECDSAKeys(t *testing.T) {
	sk, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	text := pemPublic(t, &sk.PublicKey)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	line := strings.Join(lines[1:len(lines)-1], "") // between BEGIN and END
	for name, form := range map[string]string{"pem": text, "pem line": line} {
		k, err := ParseKey("platform team", "spec.trust[1]", form)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !sk.PublicKey.Equal(k.Public) || !strings.HasPrefix(k.ID(), "sha256:") {
			t.Errorf("%s: read %T %s", name, k.Public, k.ID())
		}
	}
	k, _ := ParseKey("platform team", "spec.trust[1]", text)

	msg := []byte(`{"critical":{"type":"cosign container image signature"}}`)
	sum := sha256.Sum256(msg)
	sig, err := ecdsa.SignASN1(rand.Reader, sk, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	if !k.Verify(msg, sig) {
		t.Error("a signature made as cosign makes it does not verify")
	}
	if k.Verify(append(msg, ' '), sig) {
		t.Error("a signature verifies for another message")
	}
	if k.Verify(msg, sig[:len(sig)-1]) || k.Verify(msg, nil) {
		t.Error("a damaged or empty signature verifies")
	}
	// An ed25519 key does not verify an ECDSA signature, nor the reverse.
	pub, edsk, _ := ed25519.GenerateKey(rand.Reader)
	if Verify(pub, msg, sig) || k.Verify(msg, ed25519.Sign(edsk, msg)) {
		t.Error("a signature verifies with a key of the other kind")
	}
	if !Verify(pub, msg, ed25519.Sign(edsk, msg)) {
		t.Error("ed25519 no longer verifies")
	}

	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if _, err := ParsePublicKey([]byte(pemPublic(t, &p384.PublicKey))); err == nil || !strings.Contains(err.Error(), "P-384") || !strings.Contains(err.Error(), "P-256") {
		t.Errorf("P-384 key: %v", err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParsePublicKey([]byte(pemPublic(t, &rsaKey.PublicKey))); err == nil || !strings.Contains(err.Error(), "ed25519 and ECDSA P-256") {
		t.Errorf("RSA key: %v", err)
	}
}
