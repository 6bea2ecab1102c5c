// Package chartfetch fetches Helm charts that a release takes from a remote
// chart repository (release.RemoteChart: the GitOps runtime's upstream
// chart) with the Helm SDK, and checks what it got.
//
// Two kinds of repository are read:
//
//   - oci://HOST/PATH: an OCI registry; the chart is the artifact
//     HOST/PATH/CHART:VERSION, pulled with helm.sh/helm/v4/pkg/registry
//     (credentials: Options.Username/Password, Options.RegistryConfig, or
//     the Helm and docker credential stores as the helm CLI reads them);
//   - https://HOST/PATH or http://HOST/PATH: a classic Helm repository,
//     its index.yaml (pkg/repo/v1) naming the archive's URL.
//
// Every archive fetched is checked before it is returned: its SHA-256 must
// equal the pinned Source.Digest (or, unpinned, the digest the repository's
// index lists), it must load as a valid chart, and that chart's name and
// version must be the ones asked for. With Options.CacheDir archives are
// kept as files and reused (checked again) without contacting the
// repository.
//
// Failures an operator can act on are *Error values whose Kind is one of
// the sentinel errors (ErrUnreachable, ErrAuth, ErrNotFound,
// ErrDigestMismatch, ErrInvalidChart, ErrWrongChart), so that
// errors.Is(err, chartfetch.ErrAuth) works; a bad Source wraps
// ErrInvalidSource; a cancelled context is returned as such.
//
// Resolve is what installs use: a bundle's chart tree (installer/bundle
// carries the runtime chart unpacked under charts/CHART/) wins over the
// network when it holds the chart at the version asked for.
package chartfetch
