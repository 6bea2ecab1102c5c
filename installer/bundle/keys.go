package bundle

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
	"path/filepath"
)

// Names of the files Keygen writes.
const (
	PrivateKeyFile = "bundle.key"
	PublicKeyFile  = "bundle.pub"
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

// KeygenOptions says where Keygen writes the key pair.
type KeygenOptions struct {
	// Dir receives bundle.key (mode 0600) and bundle.pub (mode 0644).
	Dir string
	// Force replaces existing key files; without it Keygen refuses.
	Force bool
}

// KeygenResult names the files written.
type KeygenResult struct {
	PrivateKey string `json:"privateKey"`
	PublicKey  string `json:"publicKey"`
	KeyID      string `json:"keyID"`
}

// ErrKeyExists is returned by Keygen when a key file exists and Force is
// not set.
var ErrKeyExists = errors.New("key file exists")

// Keygen writes a new signing key pair into opts.Dir. The private key file
// is created with mode 0600 and never replaced unless opts.Force is set.
func Keygen(opts KeygenOptions) (*KeygenResult, error) {
	if opts.Dir == "" {
		return nil, errors.New("keygen: no output folder")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	res := &KeygenResult{
		PrivateKey: filepath.Join(opts.Dir, PrivateKeyFile),
		PublicKey:  filepath.Join(opts.Dir, PublicKeyFile),
	}
	if !opts.Force {
		for _, p := range []string{res.PrivateKey, res.PublicKey} {
			if _, err := os.Lstat(p); err == nil {
				return nil, fmt.Errorf("keygen: %s: %w (use --force to replace it; bundles signed with the old key then no longer verify with the new one)", p, ErrKeyExists)
			}
		}
	}
	var priv, pub bytes.Buffer
	id, err := WriteKeyPair(&priv, &pub)
	if err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	res.KeyID = id
	if err := writeFileAtomic(res.PrivateKey, priv.Bytes(), 0o600); err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	if err := writeFileAtomic(res.PublicKey, pub.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	return res, nil
}

// writeFileAtomic writes data to a temporary file with mode perm next to
// path and renames it over path, so that a reader never sees half a key and
// the mode is right from the first byte.
func writeFileAtomic(path string, data []byte, perm os.FileMode) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
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

// ParsePublicKey reads an ed25519 public key: PKIX PEM ("PUBLIC KEY") or
// base64 of the 32 raw bytes.
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
	if len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("public key: %d bytes, want %d", len(raw), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
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
