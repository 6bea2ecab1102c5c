// Package manifests holds the kustomize bases and components for the
// platform's namespace-level objects (namespace, RBAC, network policies) and
// the static built-in overlays (hardening), embedded in the binary.
package manifests

import "embed"

// FS holds base/ and components/.
//
//go:embed all:*
var FS embed.FS
