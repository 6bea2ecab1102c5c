package signing

import (
	"crypto"
	"fmt"
	"strings"
)

// Key is one public key trusted to sign bundles, and why it is trusted.
type Key struct {
	// Name is what people call the key ("onprem releases", "platform team").
	Name string `json:"name,omitempty"`
	// Origin says where the trust comes from: "release 2.8.0",
	// "spec.trust[0]", "--public-key keys/bundle.pub".
	Origin string `json:"origin"`
	// Public is the key: an ed25519.PublicKey or an *ecdsa.PublicKey on
	// P-256 (see ParsePublicKey).
	Public crypto.PublicKey `json:"-"`
}

// Verify says whether sig is the key's signature of message (see Verify).
func (k Key) Verify(message, sig []byte) bool { return Verify(k.Public, message, sig) }

// ID is the key's id (see KeyID).
func (k Key) ID() string { return KeyID(k.Public) }

// String names the key for messages: its id, name and origin.
func (k Key) String() string {
	s := k.ID()
	if k.Name != "" {
		s += " (" + k.Name + ")"
	}
	if k.Origin != "" {
		s += " from " + k.Origin
	}
	return s
}

// Keyring is a set of trusted public keys, each once (by id), in the order
// they were added.
type Keyring []Key

// With returns the keyring with keys added; a key already there (same id)
// keeps its first name and origin.
func (r Keyring) With(keys ...Key) Keyring {
	out := append(Keyring(nil), r...)
	for _, k := range keys {
		if _, ok := out.ByID(k.ID()); !ok {
			out = append(out, k)
		}
	}
	return out
}

// ByID finds a key by its id.
func (r Keyring) ByID(id string) (Key, bool) {
	for _, k := range r {
		if k.ID() == id {
			return k, true
		}
	}
	return Key{}, false
}

// IDs lists the keys' ids, in order.
func (r Keyring) IDs() []string {
	ids := make([]string, len(r))
	for i, k := range r {
		ids[i] = k.ID()
	}
	return ids
}

// String lists the keys for messages ("none" when empty).
func (r Keyring) String() string {
	if len(r) == 0 {
		return "none"
	}
	parts := make([]string, len(r))
	for i, k := range r {
		parts[i] = k.String()
	}
	return strings.Join(parts, ", ")
}

// ParseKey reads a public key given as text (see ParsePublicKey) into a
// Key with its name and origin; the error names the origin.
func ParseKey(name, origin, text string) (Key, error) {
	pk, err := ParsePublicKey([]byte(text))
	if err != nil {
		return Key{}, fmt.Errorf("%s: %w", origin, err)
	}
	return Key{Name: name, Origin: origin, Public: pk}, nil
}
