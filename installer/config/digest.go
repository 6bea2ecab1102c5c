package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
)

// Digest is the sha256 (hex) of the canonical JSON of the installation after
// defaults: struct fields in declaration order and map keys sorted, so it
// does not depend on how the file was written (key order, spacing, comments,
// values spelt out that equal their defaults). The state records it to tell
// whether the configuration changed. The receiver is not modified.
func (in *Installation) Digest() (string, error) {
	if in == nil {
		return "", fmt.Errorf("digest of a nil installation")
	}
	// Deep copy through JSON so that defaulting does not touch the caller's
	// value.
	data, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("encoding the installation for its digest: %w", err)
	}
	var cp Installation
	if err := json.Unmarshal(data, &cp); err != nil {
		return "", fmt.Errorf("copying the installation for its digest: %w", err)
	}
	SetDefaults(&cp)
	canonical, err := json.Marshal(&cp)
	if err != nil {
		return "", fmt.Errorf("encoding the installation for its digest: %w", err)
	}
	sum := sha256.Sum256(canonical)
	return hex.EncodeToString(sum[:]), nil
}
