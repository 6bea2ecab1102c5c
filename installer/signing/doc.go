// Package signing holds the ed25519 keys that sign air-gapped bundles and
// the keyring of public keys an installation trusts: the keys its embedded
// releases name, the operator's own (spec.trust) and those given on the
// command line (--public-key). Trusted keys are ed25519 or ECDSA P-256
// (cosign's own keys, for images an operator signs with cosign). It knows
// nothing of bundles; installer/bundle signs and checks with it.
package signing
