//go:build linux

package preflight

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/imagesig"
	"onprem.dev/onprem/installer/signing"
)

// TestSignaturesCheck runs the image-signatures check against the CNCF
// distribution registry, the images pushed there as 'bundle push' does,
// and their signatures stored where cosign keeps them: an unsigned image
// and one signed by an untrusted key are refused by name, and the check
// passes once every image carries a trusted signature.
func TestSignaturesCheck(t *testing.T) {
	t.Parallel() // its own cluster
	ctx := context.Background()
	env := connTestEnv(t, registryYAML)
	host := testservers.Distribution(t)
	rel := env.Release
	platform := env.Installation.Spec.Images.Platform
	digests := pushRelease(t, rel, platform, host, "mirror", authn.Anonymous, nil)

	newKey := func(keyName string) (signing.Key, func(img string)) {
		var priv, pub bytes.Buffer
		if _, err := signing.WriteKeyPair(&priv, &pub); err != nil {
			t.Fatal(err)
		}
		sk, _ := signing.ParsePrivateKey(priv.Bytes())
		k, _ := signing.ParseKey(keyName, "test", pub.String())
		sign := func(imgName string) {
			t.Helper()
			img, ok := rel.Image(imgName)
			if !ok {
				t.Fatalf("no image %s", imgName)
			}
			to, _ := images.Relocate(images.Repository(img, platform), host, "mirror")
			repo, _ := name.NewRepository(to, name.Insecure)
			d, _ := v1.NewHash(digests[imgName])
			s, err := imagesig.Sign(sk, images.Repository(img, platform), d)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := imagesig.Attach(ctx, repo, d, []imagesig.Signature{s}); err != nil {
				t.Fatal(err)
			}
		}
		return k, sign
	}
	vendor, vendorSign := newKey("vendor")
	_, strangerSign := newKey("stranger")

	withSpec := func(require bool, trust []config.TrustedKey) *Env {
		in := *env.Installation
		in.Spec.Registry = config.Registry{Host: host, PathPrefix: "mirror", Insecure: true, RequireSignatures: require}
		in.Spec.Trust = trust
		e := *env
		e.Installation = &in
		return &e
	}
	trusted := []config.TrustedKey{{Name: "vendor", PublicKey: publicKeyText(t, vendor)}}
	check := signaturesCheck()
	if check.ID != "image-signatures" || check.Severity != Blocking {
		t.Fatalf("%+v", check)
	}
	n := len(rel.Images)

	t.Run("not required", func(t *testing.T) {
		connExpect(t, connRunCheck(t, withSpec(false, nil), check), Pass, "not required")
	})
	t.Run("no image signed", func(t *testing.T) {
		o := connRunCheck(t, withSpec(true, trusted), check)
		connExpect(t, o, Fail, fmt.Sprintf("%d of the %d images have no valid signature", n, n), "no signature (no tag sha256-", "|", "onprem bundle push", "cosign sign", vendor.ID())
		if len(o.Details) != n {
			t.Errorf("details: %d, want %d", len(o.Details), n)
		}
	})
	// Every image signed by the vendor but two: one unsigned, one signed by
	// a stranger.
	unsigned, strangers := rel.Images[0].Name, rel.Images[1].Name
	for _, img := range rel.Images[2:] {
		vendorSign(img.Name)
	}
	strangerSign(strangers)
	t.Run("an unsigned image and a stranger's", func(t *testing.T) {
		o := connRunCheck(t, withSpec(true, trusted), check)
		connExpect(t, o, Fail, fmt.Sprintf("2 of the %d images", n), "image "+unsigned+" (", "image "+strangers+" (")
		details := strings.Join(o.Details, "\n")
		if !strings.Contains(details, "image "+unsigned+" ("+host+"/mirror/") || !strings.Contains(details, "none of the trusted keys") {
			t.Errorf("details: %s", details)
		}
	})
	t.Run("the vendor's key not trusted", func(t *testing.T) {
		// Only the releases' key: no image is signed by it.
		o := connRunCheck(t, withSpec(true, nil), check)
		connExpect(t, o, Fail, fmt.Sprintf("%d of the %d images", n, n))
	})
	// An image the operator signed with their own cosign key (ECDSA P-256,
	// cosign generate-key-pair's kind), trusted in spec.trust as the PEM
	// text of cosign.pub: cosign's signature is ECDSA (ASN.1) over the
	// payload's SHA-256.
	operatorKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	{
		img, _ := rel.Image(unsigned)
		to, _ := images.Relocate(images.Repository(img, platform), host, "mirror")
		repo, _ := name.NewRepository(to, name.Insecure)
		d, _ := v1.NewHash(digests[unsigned])
		payload, err := imagesig.NewPayload(images.Repository(img, platform), d)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(payload)
		sig, err := ecdsa.SignASN1(rand.Reader, operatorKey, sum[:])
		if err != nil {
			t.Fatal(err)
		}
		s := imagesig.Signature{Payload: payload, Annotations: map[string]string{imagesig.AnnotationSignature: base64.StdEncoding.EncodeToString(sig)}}
		if _, err := imagesig.Attach(ctx, repo, d, []imagesig.Signature{s}); err != nil {
			t.Fatal(err)
		}
	}
	der, err := x509.MarshalPKIXPublicKey(&operatorKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	cosignPub := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	t.Run("an image signed with the operator's cosign key", func(t *testing.T) {
		// Not trusted yet: refused like any stranger's.
		o := connRunCheck(t, withSpec(true, trusted), check)
		connExpect(t, o, Fail, fmt.Sprintf("2 of the %d images", n), "image "+unsigned+" (")
		// Trusted: only the stranger's image is left.
		o = connRunCheck(t, withSpec(true, append(trusted, config.TrustedKey{Name: "platform team", PublicKey: cosignPub})), check)
		connExpect(t, o, Fail, fmt.Sprintf("1 of the %d images", n), "image "+strangers+" (")
		if strings.Contains(strings.Join(o.Details, "\n"), "image "+unsigned+" (") {
			t.Errorf("the image signed with the trusted cosign key is still refused: %s", o.Details)
		}
	})
	vendorSign(unsigned)
	vendorSign(strangers) // beside the stranger's: one trusted signature is enough
	t.Run("all signed", func(t *testing.T) {
		connExpect(t, connRunCheck(t, withSpec(true, trusted), check), Pass, fmt.Sprintf("all %d images", n), fmt.Sprintf("%d by %s", n, vendor.ID()))
	})
}

// publicKeyText is the key as spec.trust takes it: the base64 line of its
// PEM form.
func publicKeyText(t *testing.T, k signing.Key) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(k.Public)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(der)
}
