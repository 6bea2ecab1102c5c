package bundle

import (
	"fmt"
	"log/slog"

	"onprem.dev/onprem/installer/signing"
)

// Trust says which bundles are accepted: those signed by one of Keys.
type Trust struct {
	// Keys are the public keys trusted to sign bundles.
	Keys signing.Keyring
	// AllowUnsigned also accepts a bundle that carries no signature or is
	// signed by a key not in Keys; its Provenance says so, for the
	// operator to see and the history to record. A signature made with a
	// trusted key that does not verify is refused even so: the bundle was
	// changed after it was signed.
	AllowUnsigned bool
}

// Provenance says how a bundle was judged: who signed it and why it was
// accepted.
type Provenance struct {
	// Signed says whether the bundle carries a signature; KeyID is the key
	// it names.
	Signed bool   `json:"signed"`
	KeyID  string `json:"keyID,omitempty"`
	// TrustedBy is the trusted key the signature verified with (id, name
	// and where the trust comes from); empty when it was not verified.
	TrustedBy string `json:"trustedBy,omitempty"`
	// Unverified says why the bundle was accepted without a signature by
	// a trusted key (AllowUnsigned); empty when it was verified.
	Unverified string `json:"unverified,omitempty"`
}

// Verified says whether a trusted key's signature was verified.
func (p Provenance) Verified() bool { return p.TrustedBy != "" }

// Provenance is how the bundle was judged (nil: not yet, see CheckTrust).
func (b *Bundle) Provenance() *Provenance { return b.provenance }

// CheckTrust judges the bundle's signature against t: it returns the
// bundle's provenance, or ErrUnsigned (wrapped), an *UntrustedKeyError or a
// *SignatureError. Open calls it unless OpenOptions.DeferTrust is set.
func (b *Bundle) CheckTrust(t Trust) (*Provenance, error) {
	if b.sums == nil {
		return nil, fmt.Errorf("bundle %s: opened without its checksums read: the signature cannot be judged", b.path)
	}
	p := &Provenance{Signed: b.sig != nil, KeyID: b.meta.KeyID}
	accept := func(why string) (*Provenance, error) {
		p.Unverified = why
		b.provenance = p
		slog.Warn("bundle accepted without a trusted signature (--allow-unsigned)", "bundle", b.path, "release", b.rel.Version, "reason", why)
		return p, nil
	}
	if b.sig == nil {
		if t.AllowUnsigned {
			return accept("not signed")
		}
		return nil, fmt.Errorf("bundle %s: %w (it has no %s): make it with 'onprem bundle create --key KEY', or accept it unverified with --allow-unsigned", b.path, ErrUnsigned, signatureFile)
	}
	candidates := t.Keys
	if p.KeyID != "" {
		k, ok := t.Keys.ByID(p.KeyID)
		if !ok {
			if t.AllowUnsigned {
				return accept("signed by key " + p.KeyID + ", which is not trusted")
			}
			return nil, &UntrustedKeyError{Path: b.path, KeyID: p.KeyID, Trusted: t.Keys}
		}
		candidates = signing.Keyring{k}
	}
	for _, k := range candidates {
		if k.Verify(b.sums, b.sig) {
			if err := b.checkImageSignatures(k); err != nil {
				return nil, err
			}
			p.TrustedBy = k.String()
			if p.KeyID == "" {
				p.KeyID = k.ID()
			}
			b.sigVerified = true
			b.provenance = p
			return p, nil
		}
	}
	if p.KeyID == "" && t.AllowUnsigned {
		return accept("signed by a key it does not name, none of the trusted keys")
	}
	return nil, &SignatureError{Path: b.path, BundleKeyID: p.KeyID, Keys: candidates}
}
