package signing

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
)

func newKey(t *testing.T) ed25519.PublicKey {
	t.Helper()
	pk, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

// The three ways an operator writes a public key all read the same key:
// the PEM text of bundle.pub, the one line between its markers (fits a
// YAML scalar), and the 32 bytes in base64.
func TestParsePublicKeyForms(t *testing.T) {
	pk := newKey(t)
	der, err := x509.MarshalPKIXPublicKey(pk)
	if err != nil {
		t.Fatal(err)
	}
	pemText := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	for name, text := range map[string]string{
		"pem":       pemText,
		"pem line":  base64.StdEncoding.EncodeToString(der),
		"raw bytes": base64.StdEncoding.EncodeToString(pk),
	} {
		got, err := ParsePublicKey([]byte(text))
		if err != nil || !pk.Equal(got) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Not ed25519: named.
	if _, err := ParsePublicKey([]byte(base64.StdEncoding.EncodeToString(make([]byte, 20)))); err == nil || !strings.Contains(err.Error(), "20 bytes") {
		t.Errorf("short key: %v", err)
	}
}

func TestKeyring(t *testing.T) {
	a, b := newKey(t), newKey(t)
	ka := Key{Name: "vendor", Origin: "release 2.8.0", Public: a}
	ring := Keyring{}.With(ka, Key{Name: "again", Origin: "release 2.7.0", Public: a}, Key{Origin: "--public-key b.pub", Public: b})
	if len(ring) != 2 {
		t.Fatalf("a key given twice is kept once: %v", ring)
	}
	if k, ok := ring.ByID(KeyID(a)); !ok || k.Origin != "release 2.8.0" {
		t.Errorf("the first origin counts: %+v", k)
	}
	if _, ok := ring.ByID("sha256:0000000000000000"); ok {
		t.Error("found a key that is not there")
	}
	s := ring.String()
	if !strings.Contains(s, KeyID(a)+" (vendor) from release 2.8.0") || !strings.Contains(s, KeyID(b)+" from --public-key b.pub") {
		t.Errorf("String: %s", s)
	}
	if Keyring(nil).String() != "none" {
		t.Error("an empty keyring says none")
	}
	if got := ring.IDs(); len(got) != 2 || got[0] != KeyID(a) || !strings.HasPrefix(got[1], "sha256:") || len(got[1]) != len("sha256:")+16 {
		t.Errorf("IDs: %v", got)
	}
	if _, err := ParseKey("x", "spec.trust[3]", "not a key"); err == nil || !strings.HasPrefix(err.Error(), "spec.trust[3]: ") {
		t.Errorf("ParseKey names the origin: %v", err)
	}
}
