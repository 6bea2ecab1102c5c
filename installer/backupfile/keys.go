package backupfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"filippo.io/age"
)

// Key file names written by Keygen.
const (
	IdentityFile  = "backup.key"
	RecipientFile = "backup.pub"
)

// Keys are what a backup is encrypted to or decrypted with.
type Keys struct {
	// Recipients are public keys (age1... or age1pq1...) or files of them,
	// one per line ('#' comments allowed).
	Recipients     []string
	RecipientFiles []string
	// IdentityFiles are files of private keys (AGE-SECRET-KEY-...).
	IdentityFiles []string
	// Passphrase, when set, encrypts (scrypt) instead of recipients and
	// decrypts instead of identities.
	Passphrase string
	// ScryptWorkFactor is log2 of scrypt's work factor for a passphrase
	// (default 18, about a second; tests lower it).
	ScryptWorkFactor int
}

// EncryptTo returns the recipients to encrypt to. A passphrase cannot be
// combined with recipients, nor post-quantum keys with classic ones (age
// refuses both mixes).
func (k Keys) EncryptTo() ([]age.Recipient, error) {
	if k.Passphrase != "" {
		if len(k.Recipients)+len(k.RecipientFiles) > 0 {
			return nil, errors.New("give either recipients (--recipient, --recipient-file) or a passphrase, not both: a passphrase-encrypted backup has no other recipient")
		}
		r, err := age.NewScryptRecipient(k.Passphrase)
		if err != nil {
			return nil, fmt.Errorf("passphrase: %w", err)
		}
		if k.ScryptWorkFactor > 0 {
			r.SetWorkFactor(k.ScryptWorkFactor)
		}
		return []age.Recipient{r}, nil
	}
	var out []age.Recipient
	for i, s := range k.Recipients {
		if strings.HasPrefix(strings.TrimSpace(s), "AGE-SECRET-KEY") {
			return nil, fmt.Errorf("recipient %d is a private key: give the public key (the line 'public key: age1...' of the key file, or %s), and keep the private key away from the machines that make backups", i+1, RecipientFile)
		}
		rs, err := age.ParseRecipients(strings.NewReader(s))
		if err != nil {
			return nil, fmt.Errorf("recipient %d (%s): not an age public key (age1... or age1pq1..., as written by 'onprem backup keygen'): %w", i+1, abbreviate(s), err)
		}
		out = append(out, rs...)
	}
	for _, f := range k.RecipientFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("recipient file: %w", err)
		}
		rs, err := age.ParseRecipients(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("recipient file %s: %w", f, err)
		}
		out = append(out, rs...)
	}
	if len(out) == 0 {
		return nil, errors.New("no key to encrypt the backup to: give --recipient KEY, --recipient-file FILE (both from 'onprem backup keygen'), or a passphrase (--passphrase-file FILE or ONPREM_BACKUP_PASSPHRASE)")
	}
	pq, classic := 0, 0
	for _, r := range out {
		if _, ok := r.(*age.HybridRecipient); ok {
			pq++
		} else {
			classic++
		}
	}
	if pq > 0 && classic > 0 {
		return nil, errors.New("the recipients mix post-quantum keys (age1pq1...) and classic ones (age1...): age refuses that mix, since the classic ones would make the backup readable by a quantum computer; use keys of one kind")
	}
	return out, nil
}

// DecryptWith returns the identities to decrypt with.
func (k Keys) DecryptWith() ([]age.Identity, error) {
	var out []age.Identity
	if k.Passphrase != "" {
		id, err := age.NewScryptIdentity(k.Passphrase)
		if err != nil {
			return nil, fmt.Errorf("passphrase: %w", err)
		}
		out = append(out, id)
	}
	for _, f := range k.IdentityFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("identity file: %w", err)
		}
		ids, err := age.ParseIdentities(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("identity file %s: not an age private key file (as written by 'onprem backup keygen'): %w", f, err)
		}
		out = append(out, ids...)
	}
	if len(out) == 0 {
		return nil, errors.New("no key to decrypt the backup with: give --identity FILE (the private key from 'onprem backup keygen') or the passphrase (--passphrase-file FILE or ONPREM_BACKUP_PASSPHRASE)")
	}
	return out, nil
}

// KeygenResult says where Keygen wrote the key pair.
type KeygenResult struct {
	IdentityFile  string `json:"identityFile"`
	RecipientFile string `json:"recipientFile"`
	// Recipient is the public key, safe to share and to put in
	// onprem.yaml (spec.backup.recipients).
	Recipient string `json:"recipient"`
}

// Keygen writes a new key pair into dir: IdentityFile (the private key,
// mode 0600; whoever holds it can read every backup made for it) and
// RecipientFile (the public key). The key is post-quantum (ML-KEM-768 +
// X25519): backups are kept for years. Existing files are never
// overwritten.
func Keygen(dir string) (*KeygenResult, error) {
	id, err := age.GenerateHybridIdentity()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	res := &KeygenResult{IdentityFile: filepath.Join(dir, IdentityFile), RecipientFile: filepath.Join(dir, RecipientFile), Recipient: id.Recipient().String()}
	for _, p := range []string{res.IdentityFile, res.RecipientFile} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("%s exists: onprem never overwrites a key (backups made for it could no longer be read); choose another --out folder", p)
		}
	}
	now := time.Now().UTC().Format(time.RFC3339)
	secret := fmt.Sprintf("# onprem backup key, created %s\n# public key: %s\n%s\n", now, res.Recipient, id.String())
	if err := writeExclusive(res.IdentityFile, []byte(secret), 0o600); err != nil {
		return nil, err
	}
	if err := writeExclusive(res.RecipientFile, []byte(res.Recipient+"\n"), 0o644); err != nil {
		_ = os.Remove(res.IdentityFile)
		return nil, err
	}
	return res, nil
}

func writeExclusive(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		_ = os.Remove(path)
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		_ = os.Remove(path)
		return err
	}
	return f.Close()
}

func abbreviate(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 16 {
		return s[:12] + "..."
	}
	return s
}
