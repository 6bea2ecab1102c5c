package signing

import (
	"bytes"
	"crypto/ed25519"
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
func KeyID(pub ed25519.PublicKey) string {
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

// ParsePublicKey reads an ed25519 public key: PKIX PEM ("PUBLIC KEY"), the
// base64 line between its markers (one line, handy in YAML), or base64 of
// the 32 raw bytes.
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	if block, _ := pem.Decode(data); block != nil {
		if block.Type != "PUBLIC KEY" {
			return nil, fmt.Errorf("PEM block %q: want PUBLIC KEY (ed25519)", block.Type)
		}
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("public key: %w", err)
		}
		pk, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("public key is a %T, not ed25519", k)
		}
		return pk, nil
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
		pk, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("public key is a %T, not ed25519", k)
		}
		return pk, nil
	}
	return nil, fmt.Errorf("public key: %d bytes, want %d (or the base64 line of a PEM public key)", len(raw), ed25519.PublicKeySize)
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
func LoadPublicKey(path string) (ed25519.PublicKey, error) {
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
