//go:build linux

package imagesig

import (
	"context"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/signing"
)

// TestAttachAndFetch stores signatures in the CNCF distribution registry
// (what registry:3 runs) under the tag cosign uses, and reads them back:
// a second signer's signature is added beside the first, never instead.
func TestAttachAndFetch(t *testing.T) {
	ctx := context.Background()
	host := testservers.Distribution(t)
	repo, err := name.NewRepository(host+"/onprem/pipelines-api", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := random.Image(512, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(repo.Tag("1.0"), img); err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()

	sigs, err := Fetch(ctx, repo, d)
	if err != nil || sigs != nil {
		t.Fatalf("an unsigned image: %v, %v", sigs, err)
	}
	if _, err := Verify(sigs, d, nil); err != ErrNoSignature {
		t.Fatalf("err = %v", err)
	}

	vendor, vendorKey := newKey(t, "vendor")
	operator, operatorKey := newKey(t, "operator")
	s1, _ := Sign(vendor, "quay.io/codefresh/pipelines-api", d)
	wrote, err := Attach(ctx, repo, d, []Signature{s1})
	if err != nil || !wrote {
		t.Fatalf("attach: %v, %v", wrote, err)
	}
	// The signatures are where cosign looks: repository:sha256-<hex>.sig.
	if _, err := remote.Head(repo.Tag("sha256-" + d.Hex + ".sig")); err != nil {
		t.Fatalf("no signature tag: %v", err)
	}
	if wrote, err := Attach(ctx, repo, d, []Signature{s1}); err != nil || wrote {
		t.Fatalf("attaching the same signature again wrote: %v, %v", wrote, err)
	}
	s2, _ := Sign(operator, repo.String(), d)
	if wrote, err := Attach(ctx, repo, d, []Signature{s2}); err != nil || !wrote {
		t.Fatalf("second signer: %v, %v", wrote, err)
	}
	sigs, err = Fetch(ctx, repo, d)
	if err != nil || len(sigs) != 2 {
		t.Fatalf("fetch: %d signatures, %v", len(sigs), err)
	}
	for _, k := range []signing.Key{vendorKey, operatorKey} {
		if v, err := Verify(sigs, d, signing.Keyring{k}); err != nil || v.Key.ID() != k.ID() {
			t.Errorf("%s: %+v, %v", k.Name, v, err)
		}
	}
}
