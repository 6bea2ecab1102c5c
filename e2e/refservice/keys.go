package refservice

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Keys are a service's signing and encryption keys, as the service chart
// gives them (charts/README.md): it signs and encrypts with the current
// keys, and accepts any key of the rings, so that tokens and data made
// before `onprem rotate keys` stay valid until the old keys are retired.
type Keys struct {
	Sign    []byte
	Verify  [][]byte
	Encrypt []byte
	Decrypt [][]byte
}

// ErrRefused is a token or sealed value that no key of the ring accepts.
var ErrRefused = errors.New("no key of the ring accepts it")

// keysFromEnv reads SIGNING_KEY, ENCRYPTION_KEY and their rings
// (SIGNING_KEYS, ENCRYPTION_KEYS: a key per line); nil when the service
// has no keys. A ring that lacks the current key still gets it: the
// current key always verifies what it signs.
func keysFromEnv(getenv func(string) string, missing *[]string) *Keys {
	sign, enc := getenv("SIGNING_KEY"), getenv("ENCRYPTION_KEY")
	if sign == "" && enc == "" {
		return nil
	}
	if sign == "" {
		*missing = append(*missing, "SIGNING_KEY")
	}
	if enc == "" {
		*missing = append(*missing, "ENCRYPTION_KEY")
	}
	ring := func(current, list string) [][]byte {
		out := [][]byte{[]byte(current)}
		for _, k := range strings.Split(list, "\n") {
			if k = strings.TrimSpace(k); k != "" && k != current {
				out = append(out, []byte(k))
			}
		}
		return out
	}
	return &Keys{Sign: []byte(sign), Verify: ring(sign, getenv("SIGNING_KEYS")),
		Encrypt: []byte(enc), Decrypt: ring(enc, getenv("ENCRYPTION_KEYS"))}
}

var b64 = base64.RawURLEncoding

// Token signs a token for service (HMAC-SHA256 with the signing key):
// base64url(claims) "." base64url(mac).
func (k *Keys) Token(service string, now time.Time) string {
	claims, _ := json.Marshal(map[string]any{"svc": service, "iat": now.Unix()})
	p := b64.EncodeToString(claims)
	return p + "." + b64.EncodeToString(mac(k.Sign, p))
}

// VerifyToken accepts a token that a key of the signing ring signed.
func (k *Keys) VerifyToken(token string) error {
	p, sig, ok := strings.Cut(token, ".")
	if !ok {
		return fmt.Errorf("not a token")
	}
	got, err := b64.DecodeString(sig)
	if err != nil {
		return fmt.Errorf("not a token: %w", err)
	}
	for _, key := range k.Verify {
		if hmac.Equal(got, mac(key, p)) {
			return nil
		}
	}
	return ErrRefused
}

func mac(key []byte, payload string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(payload))
	return h.Sum(nil)
}

// Seal encrypts value with the encryption key (AES-256-GCM, the key
// being the SHA-256 of the configured key): base64url(nonce || sealed).
func (k *Keys) Seal(value []byte) (string, error) {
	aead, err := gcm(k.Encrypt)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	return b64.EncodeToString(aead.Seal(nonce, nonce, value, nil)), nil
}

// Unseal decrypts what a key of the encryption ring sealed.
func (k *Keys) Unseal(sealed string) ([]byte, error) {
	raw, err := b64.DecodeString(sealed)
	if err != nil {
		return nil, fmt.Errorf("not a sealed value: %w", err)
	}
	for _, key := range k.Decrypt {
		aead, err := gcm(key)
		if err != nil {
			return nil, err
		}
		if len(raw) < aead.NonceSize() {
			return nil, fmt.Errorf("not a sealed value: too short")
		}
		if v, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], nil); err == nil {
			return v, nil
		}
	}
	return nil, ErrRefused
}

func gcm(key []byte) (cipher.AEAD, error) {
	k := sha256.Sum256(key)
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}
