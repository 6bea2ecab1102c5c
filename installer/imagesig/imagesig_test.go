package imagesig

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"onprem.dev/onprem/installer/signing"
)

func newKey(t *testing.T, name string) (ed25519.PrivateKey, signing.Key) {
	t.Helper()
	var priv, pub bytes.Buffer
	if _, err := signing.WriteKeyPair(&priv, &pub); err != nil {
		t.Fatal(err)
	}
	sk, err := signing.ParsePrivateKey(priv.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	k, err := signing.ParseKey(name, "test", pub.String())
	if err != nil {
		t.Fatal(err)
	}
	return sk, k
}

func digest(t *testing.T, s string) v1.Hash {
	t.Helper()
	h, _, err := v1.SHA256(strings.NewReader(s))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestSignAndVerify(t *testing.T) {
	vendor, vendorKey := newKey(t, "vendor")
	_, otherKey := newKey(t, "other")
	d := digest(t, "image one")

	sig, err := Sign(vendor, "quay.io/codefresh/pipelines-api", d)
	if err != nil {
		t.Fatal(err)
	}
	// The payload is simple signing JSON naming the digest, as cosign
	// writes and reads it.
	var doc map[string]map[string]any
	if err := json.Unmarshal(sig.Payload, &doc); err != nil {
		t.Fatalf("payload: %v: %s", err, sig.Payload)
	}
	if doc["critical"]["type"] != "cosign container image signature" ||
		doc["critical"]["image"].(map[string]any)["docker-manifest-digest"] != d.String() ||
		doc["critical"]["identity"].(map[string]any)["docker-reference"] != "quay.io/codefresh/pipelines-api" {
		t.Fatalf("payload: %s", sig.Payload)
	}
	c, err := sig.Claims()
	if err != nil || c.Digest != d.String() || c.DockerReference != "quay.io/codefresh/pipelines-api" {
		t.Fatalf("claims %+v, %v", c, err)
	}

	v, err := Verify([]Signature{sig}, d, signing.Keyring{otherKey, vendorKey})
	if err != nil {
		t.Fatal(err)
	}
	if v.Key.ID() != vendorKey.ID() {
		t.Errorf("verified by %s, want %s", v.Key, vendorKey)
	}

	t.Run("no signature", func(t *testing.T) {
		if _, err := Verify(nil, d, signing.Keyring{vendorKey}); !errors.Is(err, ErrNoSignature) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("untrusted key", func(t *testing.T) {
		_, err := Verify([]Signature{sig}, d, signing.Keyring{otherKey})
		var nt *NotTrustedError
		if !errors.As(err, &nt) || !strings.Contains(err.Error(), "none of the trusted keys") || !strings.Contains(err.Error(), otherKey.ID()) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("copied from another image", func(t *testing.T) {
		_, err := Verify([]Signature{sig}, digest(t, "image two"), signing.Keyring{vendorKey})
		if err == nil || !strings.Contains(err.Error(), "signs "+d.String()+", another image") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("payload changed", func(t *testing.T) {
		bad := sig
		bad.Payload = bytes.Replace(sig.Payload, []byte("pipelines-api"), []byte("pipelines-apj"), 1)
		if _, err := Verify([]Signature{bad}, d, signing.Keyring{vendorKey}); err == nil {
			t.Fatal("a changed payload verified")
		}
	})
	t.Run("keyless", func(t *testing.T) {
		kl := Signature{Payload: sig.Payload, Annotations: map[string]string{AnnotationSignature: "MEUCIQ==", AnnotationCertificate: "-----BEGIN CERTIFICATE-----"}}
		_, err := Verify([]Signature{kl}, d, signing.Keyring{vendorKey})
		if err == nil || !strings.Contains(err.Error(), "keyless") {
			t.Fatalf("err = %v", err)
		}
		// A good signature beside it is found.
		if v, err := Verify([]Signature{kl, sig}, d, signing.Keyring{vendorKey}); err != nil || v.Signature.Value() != sig.Value() {
			t.Fatalf("%+v, %v", v, err)
		}
	})
	t.Run("not a payload", func(t *testing.T) {
		if _, err := (Signature{Payload: []byte(`{"critical":{"type":"other"}}`)}).Claims(); err == nil {
			t.Fatal("another payload type was accepted")
		}
	})
}

func TestImageHoldsSignaturesAsCosignDoes(t *testing.T) {
	vendor, _ := newKey(t, "vendor")
	d := digest(t, "image")
	s1, _ := Sign(vendor, "r/a", d)
	s2 := Signature{Payload: []byte(`{"x":1}`), Annotations: map[string]string{AnnotationSignature: "c2ln", "dev.sigstore.cosign/bundle": "{}"}}
	img, err := Image([]Signature{s1, s2})
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON || len(m.Layers) != 2 {
		t.Fatalf("manifest: %+v", m)
	}
	for i, l := range m.Layers {
		if l.MediaType != MediaType || l.Annotations[AnnotationSignature] == "" {
			t.Errorf("layer %d: %+v", i, l)
		}
	}
	got, err := Read(img)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !bytes.Equal(got[0].Payload, s1.Payload) || got[0].Value() != s1.Value() || got[1].Annotations["dev.sigstore.cosign/bundle"] != "{}" {
		t.Fatalf("read back %+v", got)
	}
	// The same signatures make the same image.
	again, _ := Image([]Signature{s1, s2})
	d1, _ := img.Digest()
	d2, _ := again.Digest()
	if d1 != d2 {
		t.Errorf("digests differ: %s %s", d1, d2)
	}
	if _, err := Image([]Signature{{Payload: []byte("{}")}}); err == nil {
		t.Error("a signature without its value was stored")
	}
	if Tag(d) != "sha256-"+d.Hex+".sig" {
		t.Errorf("tag %s", Tag(d))
	}
}

func TestMerge(t *testing.T) {
	a := Signature{Payload: []byte("p"), Annotations: map[string]string{AnnotationSignature: "a"}}
	b := Signature{Payload: []byte("p"), Annotations: map[string]string{AnnotationSignature: "b"}}
	got := Merge([]Signature{a}, b, a, b)
	if len(got) != 2 || got[0].Value() != "a" || got[1].Value() != "b" {
		t.Fatalf("%+v", got)
	}
}
