package chartfetch

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"onprem.dev/onprem/installer/release"
)

// Source is one chart of a remote chart repository.
type Source struct {
	// Repository is oci://HOST/PATH (the chart at HOST/PATH/CHART) or the
	// https:// or http:// URL of a Helm repository (with its index.yaml).
	Repository string
	// Chart is the chart's name, Version its exact version.
	Chart, Version string
	// Digest, when set, pins the archive (sha256:<64 hex>): another one is
	// refused.
	Digest string
}

// FromRelease is the Source of a release's remote chart (a nil chart gives
// the zero Source, which Fetch refuses).
func FromRelease(rc *release.RemoteChart) Source {
	if rc == nil {
		return Source{}
	}
	return Source{Repository: rc.Repository, Chart: rc.Chart, Version: rc.ChartVersion, Digest: rc.Digest}
}

// String names the chart for people: CHART VERSION from REPOSITORY.
func (s Source) String() string {
	return fmt.Sprintf("%s %s from %s", s.Chart, s.Version, s.Repository)
}

// DefaultTimeout bounds one Fetch when Options.Timeout is not set.
const DefaultTimeout = 5 * time.Minute

// Options say how charts are fetched. The zero value fetches without
// credentials (OCI: the Helm and docker credential stores), without a
// cache, with the system's CAs.
type Options struct {
	// CacheDir, when set, keeps every archive fetched as a file there,
	// keyed by repository, chart and version, written atomically. A cached
	// archive is used instead of the repository when it still passes the
	// checks (digest, valid chart, name and version).
	CacheDir string
	// Username and Password are sent as basic authentication to an HTTP
	// repository (only to its own host) or given to an OCI registry.
	Username, Password string
	// RegistryConfig is a docker config.json holding the credentials of
	// OCI registries (instead of the Helm and docker credential stores).
	RegistryConfig string
	// CAFile is a PEM file of CA certificates trusted besides the
	// system's.
	CAFile string
	// InsecureSkipTLSVerify accepts any certificate (test setups only).
	InsecureSkipTLSVerify bool
	// PlainHTTP reaches an oci:// registry over plain HTTP (a loopback or
	// lab registry).
	PlainHTTP bool
	// Timeout bounds each fetch (default DefaultTimeout).
	Timeout time.Duration
}

var (
	digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
	// nameRE is a chart name that is safe as a path element and in a URL.
	nameRE    = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$`)
	versionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.+_-]*$`)
)

// check validates the source and returns its repository URL.
func (s Source) check() (*url.URL, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidSource, fmt.Sprintf(format, a...))
	}
	if s.Chart == "" {
		return nil, bad("no chart name")
	}
	if !nameRE.MatchString(s.Chart) {
		return nil, bad("chart name %q: use letters, digits, '.', '-' and '_'", s.Chart)
	}
	if s.Version == "" {
		return nil, bad("chart %s: no version", s.Chart)
	}
	if !versionRE.MatchString(s.Version) {
		return nil, bad("chart %s: version %q is not a chart version (like 1.2.3)", s.Chart, s.Version)
	}
	if s.Digest != "" && !digestRE.MatchString(s.Digest) {
		return nil, bad("chart %s: digest %q is not sha256:<64 hex digits>", s.Chart, s.Digest)
	}
	u, err := url.Parse(s.Repository)
	switch {
	case s.Repository == "":
		return nil, bad("chart %s: no repository (oci://HOST/PATH or https://HOST/PATH)", s.Chart)
	case err != nil:
		return nil, bad("chart %s: repository %q: %v", s.Chart, s.Repository, err)
	case u.Host == "" || (u.Scheme != "oci" && u.Scheme != "https" && u.Scheme != "http"):
		return nil, bad("chart %s: repository %q is not an oci://, https:// or http:// chart repository", s.Chart, s.Repository)
	case u.Scheme == "oci" && (u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.Contains(u.Path, ":") || strings.Contains(u.Path, "@")):
		return nil, bad("chart %s: repository %q: an oci:// repository is HOST/PATH, without credentials, tag, digest or query", s.Chart, s.Repository)
	}
	return u, nil
}
