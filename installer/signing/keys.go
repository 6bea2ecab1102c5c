package signing

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
)

// KeyID is a short, stable name of a public key: "sha256:" and the first
// 16 hex digits of the SHA-256 of its PKIX encoding. It is recorded in
// bundle.json so that a wrong key can be named.
func KeyID(pub crypto.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// WriteKeyPair generates an ed25519 key pair and writes the private key
// (PKCS#8 PEM) to priv and the public key (PKIX PEM) to pub. It returns
// the key id.
func WriteKeyPair(priv, pub io.Writer) (string, error) {
	pk, sk, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return "", fmt.Errorf("generating key: %w", err)
	}
	skDER, err := x509.MarshalPKCS8PrivateKey(sk)
	if err != nil {
		return "", fmt.Errorf("encoding private key: %w", err)
	}
	pkDER, err := x509.MarshalPKIXPublicKey(pk)
	if err != nil {
		return "", fmt.Errorf("encoding public key: %w", err)
	}
	if err := pem.Encode(priv, &pem.Block{Type: "PRIVATE KEY", Bytes: skDER}); err != nil {
		return "", fmt.Errorf("writing private key: %w", err)
	}
	if err := pem.Encode(pub, &pem.Block{Type: "PUBLIC KEY", Bytes: pkDER}); err != nil {
		return "", fmt.Errorf("writing public key: %w", err)
	}
	return KeyID(pk), nil
}

// ParsePrivateKey reads an ed25519 private key: PKCS#8 PEM ("PRIVATE
// KEY", as Keygen and `openssl genpkey -algorithm ed25519` write), or
// base64 of the 32-byte seed or the 64-byte private key.
func ParsePrivateKey(data []byte) (ed25519.PrivateKey, error) {
	if block, _ := pem.Decode(data); block != nil {
		if block.Type != "PRIVATE KEY" {
			return nil, fmt.Errorf("PEM block %q: want PRIVATE KEY (PKCS#8 ed25519)", block.Type)
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("private key: %w", err)
		}
		sk, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("private key is a %T, not ed25519", k)
		}
		return sk, nil
	}
	raw, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(data)))
	if err != nil {
		return nil, errors.New("private key: neither PEM nor base64")
	}
	switch len(raw) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case ed25519.PrivateKeySize:
		return ed25519.PrivateKey(raw), nil
	}
	return nil, fmt.Errorf("private key: %d bytes, want %d (seed) or %d", len(raw), ed25519.SeedSize, ed25519.PrivateKeySize)
}

// ParsePublicKey reads a public key: ed25519 (what 'onprem bundle keygen'
// makes) or ECDSA P-256 (what 'cosign generate-key-pair' makes, for
// images an operator signs with cosign), as PKIX PEM ("PUBLIC KEY"), the
// base64 line between its markers (one line, handy in YAML), or, for
// ed25519, base64 of the 32 raw bytes. The key is an ed25519.PublicKey or
// an *ecdsa.PublicKey.
func ParsePublicKey(data []byte) (crypto.PublicKey, error) {
	if block, _ := pem.Decode(data); block != nil {
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("PEM block %q: want PUBLIC KEY (ed25519, or ECDSA P-256 as cosign makes)", block.Type)
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key: %w", err)
		}
		return supported(k)
	}
	raw, err := base64.StdEncoding.DecodeString(string(bytes.TrimSpace(data)))
	if err != nil {
		return nil, errors.New("public key: neither PEM nor base64")
	}
	if len(raw) == ed25519.PublicKeySize {
		return ed25519.PublicKey(raw), nil
	}
	// The line between the PEM markers: the PKIX encoding in base64.
	if k, err := x509.ParsePKIXPublicKey(raw); err == nil {
		return supported(k)
	}
	return nil, fmt.Errorf("public key: %d bytes, want %d (or the base64 line of a PEM public key)", len(raw), ed25519.PublicKeySize)
}

// supported returns k when it is a kind of key onprem verifies with.
func supported(k any) (crypto.PublicKey, error) {
	switch pk := k.(type) {
	case ed25519.PublicKey:
		return pk, nil
	case *ecdsa.PublicKey:
		if pk.Curve != elliptic.P256() {
			return nil, fmt.Errorf("public key is ECDSA on %s: onprem verifies ECDSA on P-256 only (cosign's default)", pk.Curve.Params().Name)
		}
		return pk, nil
	}
	return nil, fmt.Errorf("public key is a %T: onprem verifies ed25519 and ECDSA P-256 keys", k)
}

// Verify says whether sig is pub's signature of message: ed25519 over the
// message itself; ECDSA (ASN.1 DER) over its SHA-256, as cosign signs.
func Verify(pub crypto.PublicKey, message, sig []byte) bool {
	switch pk := pub.(type) {
	case ed25519.PublicKey:
		return len(pk) == ed25519.PublicKeySize && ed25519.Verify(pk, message, sig)
	case *ecdsa.PublicKey:
		sum := sha256.Sum256(message)
		return ecdsa.VerifyASN1(pk, sum[:], sig)
	}
	return false
}

// LoadPrivateKey reads a private key file (see ParsePrivateKey).
func LoadPrivateKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading private key: %w", err)
	}
	k, err := ParsePrivateKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}

// LoadPublicKey reads a public key file (see ParsePublicKey).
func LoadPublicKey(path string) (crypto.PublicKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading public key: %w", err)
	}
	k, err := ParsePublicKey(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return k, nil
}
