//go:build linux

package bundle

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/imagesig"
	"onprem.dev/onprem/installer/signing"
)

// signingPair is a private key and its public key as trusted.
func signingPair(t *testing.T, name string) ([]byte, signing.Key) {
	t.Helper()
	priv, pub := keyPair(t)
	k, err := signing.ParseKey(name, "test", string(pub))
	if err != nil {
		t.Fatal(err)
	}
	return priv, k
}

// TestImageSignatures follows image signatures from a source registry,
// through a signed bundle, to the private registry: create records the
// source's signatures (checked against the publisher's key when given)
// and signs every image with the bundle's key; push attaches them all
// where cosign looks, in the CNCF distribution registry.
func TestImageSignatures(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, 8<<10, 2<<10)
	vendorPriv, vendor := signingPair(t, "vendor")
	publisherPriv, publisher := signingPair(t, "publisher")
	strangerPriv, stranger := signingPair(t, "stranger")

	// The source signs two images: one by its publisher, one by a stranger.
	signAtSource := func(i int, priv []byte) {
		t.Helper()
		img := f.rel.Images[i]
		ref := images.Repository(img, f.platformImages) + ":" + img.Tag
		d, err := f.byRef[ref].Digest()
		if err != nil {
			t.Fatal(err)
		}
		key, _ := signing.ParsePrivateKey(priv)
		s, err := imagesig.Sign(key, images.Repository(img, f.platformImages), d)
		if err != nil {
			t.Fatal(err)
		}
		tag, _ := name.NewTag(ref)
		if _, err := imagesig.Attach(ctx, tag.Repository, d, []imagesig.Signature{s}); err != nil {
			t.Fatal(err)
		}
	}
	signAtSource(0, publisherPriv)
	signAtSource(1, strangerPriv)

	create := func(sourceKeys signing.Keyring) (string, *CreateResult, error) {
		out := filepath.Join(t.TempDir(), "platform.bundle")
		key, _ := signing.ParsePrivateKey(vendorPriv)
		res, err := Create(ctx, CreateOptions{
			Release: f.rel, Output: out, PlatformImages: f.platformImages,
			Source: RemoteSource(RemoteOptions{}), SigningKey: key, SourceKeys: sourceKeys,
		})
		return out, res, err
	}

	t.Run("a source signature by none of the given keys is refused", func(t *testing.T) {
		_, _, err := create(signing.Keyring{publisher})
		var se *SourceSignatureError
		if !errors.As(err, &se) || se.Image != f.rel.Images[1].Name || !strings.Contains(err.Error(), "none of the trusted keys") || !strings.Contains(err.Error(), "--source-public-key") {
			t.Fatalf("err = %v", err)
		}
	})

	out, res, err := create(signing.Keyring{publisher, stranger})
	if err != nil {
		t.Fatal(err)
	}
	n := len(f.rel.Images)
	if res.ImagesSigned != n || res.SourceSigned != 2 || res.SourceVerified != 2 {
		t.Errorf("result: %+v", res)
	}
	b, err := Open(ctx, out, OpenOptions{Trust: Trust{Keys: signing.Keyring{vendor}}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Metadata().ImageSignatures != ImageSignatureFormat {
		t.Errorf("metadata: %+v", b.Metadata())
	}
	first, err := b.ImageSignatures(f.rel.Images[0].Name)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Signatures) != 2 || first.Signatures[0].From != FromSource || !strings.Contains(first.Signatures[0].VerifiedBy, "publisher") ||
		first.Signatures[1].From != FromBundle || first.Signatures[1].VerifiedBy != vendor.ID() {
		t.Errorf("signatures of the first image: %+v", first)
	}

	in, err := b.Inspect()
	if err != nil {
		t.Fatal(err)
	}
	var itext bytes.Buffer
	if err := in.WriteText(&itext); err != nil {
		t.Fatal(err)
	}
	if len(in.Images[0].Signatures) != 2 || len(in.Images[2].Signatures) != 1 || !strings.Contains(itext.String(), "SIGNATURES") || !strings.Contains(itext.String(), "source, bundle") {
		t.Errorf("inspect: %+v\n%s", in.Images[0], itext.String())
	}

	// Unverified source signatures are carried when no source key is given.
	_, res2, err := create(nil)
	if err != nil || res2.SourceSigned != 2 || res2.SourceVerified != 0 {
		t.Errorf("without source keys: %+v, %v", res2, err)
	}

	// Push: every relocated image has the bundle's signature where cosign
	// looks, and the first also its publisher's.
	host := testservers.Distribution(t)
	sum, err := Push(ctx, PushOptions{Bundle: b, Host: host, Prefix: "mirror", Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if sum.SignaturesAttached != n {
		t.Errorf("push: %+v", sum)
	}
	for i, img := range b.Release().Images {
		to, _ := images.Relocate(images.Repository(img, f.platformImages), host, "mirror")
		repo, _ := name.NewRepository(to, name.Insecure)
		d, _ := v1.NewHash(img.Digest)
		sigs, err := imagesig.Fetch(ctx, repo, d)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := imagesig.Verify(sigs, d, signing.Keyring{vendor}); err != nil {
			t.Errorf("image %s: %v", img.Name, err)
		}
		_, err = imagesig.Verify(sigs, d, signing.Keyring{publisher})
		if (i == 0) != (err == nil) {
			t.Errorf("image %s: the publisher's signature: %v", img.Name, err)
		}
	}
	again, err := Push(ctx, PushOptions{Bundle: b, Host: host, Prefix: "mirror", Insecure: true})
	if err != nil || again.SignaturesAttached != 0 || again.SignaturesUpToDate != n {
		t.Errorf("push again: %+v, %v", again, err)
	}
	var text bytes.Buffer
	if err := again.WriteText(&text); err != nil || !strings.Contains(text.String(), "signatures of 0 images attached, "+strconv.Itoa(n)+" up to date") {
		t.Errorf("text: %s", text.String())
	}

	// An image signature made by another key than the bundle's, in a
	// bundle its maker signed anyway: refused as the bundle is opened.
	img0 := f.rel.Images[0].Name
	retarResummed(t, out, func(n string, d []byte) []byte {
		if n != signaturesPath(img0) {
			return d
		}
		var is ImageSignatures
		if err := json.Unmarshal(d, &is); err != nil {
			t.Fatal(err)
		}
		dig, _ := v1.NewHash(is.Digest)
		key, _ := signing.ParsePrivateKey(strangerPriv)
		s, _ := imagesig.Sign(key, "x", dig)
		is.Signatures[1].Signature = s
		d, _ = json.Marshal(is)
		return d
	})
	resign(t, out, vendorPriv)
	_, err = Open(ctx, out, OpenOptions{Trust: Trust{Keys: signing.Keyring{vendor}}})
	var sigErr *SignatureError
	if !errors.As(err, &sigErr) || !strings.Contains(err.Error(), "the signature of image "+img0) {
		t.Errorf("a wrong image signature: %v", err)
	}

	// An unsigned bundle carries no image signature, and push attaches none.
	unsigned := createBundle(t, f, nil)
	ub, err := Open(ctx, unsigned, OpenOptions{Trust: allowUnsigned})
	if err != nil {
		t.Fatal(err)
	}
	defer ub.Close()
	if is, err := ub.ImageSignatures(img0); is != nil || err != nil || ub.Metadata().ImageSignatures != "" {
		t.Errorf("unsigned bundle: %+v, %v", is, err)
	}
}

// resign signs the bundle's checksums again with priv, as its maker
// would have.
func resign(t *testing.T, p string, priv []byte) {
	t.Helper()
	key, err := signing.ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	var sums []byte
	retar(t, p, func(n string, d []byte) []byte {
		switch n {
		case checksumsFile:
			sums = d
		case signatureFile:
			return ed25519.Sign(key, sums)
		}
		return d
	})
}
