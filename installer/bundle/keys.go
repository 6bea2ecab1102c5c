package bundle

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"onprem.dev/onprem/installer/signing"
	"onprem.dev/onprem/internal/fsutil"
)

// Names of the files Keygen writes.
const (
	PrivateKeyFile = "bundle.key"
	PublicKeyFile  = "bundle.pub"
)

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
	id, err := signing.WriteKeyPair(&priv, &pub)
	if err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	res.KeyID = id
	if err := fsutil.WriteFileAtomic(res.PrivateKey, priv.Bytes(), 0o600); err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	if err := fsutil.WriteFileAtomic(res.PublicKey, pub.Bytes(), 0o644); err != nil {
		return nil, fmt.Errorf("keygen: %w", err)
	}
	return res, nil
}
