package chartfetch

import (
	"errors"
	"fmt"
	"strings"
)

// Kinds of failure, the Kind of an *Error (errors.Is matches them).
var (
	// ErrInvalidSource: the Source itself is wrong (no chart name, an
	// unknown repository scheme, a malformed digest).
	ErrInvalidSource = errors.New("invalid chart source")
	// ErrUnreachable: the repository could not be reached or did not
	// answer (DNS, connection, TLS, timeout, 5xx).
	ErrUnreachable = errors.New("chart repository unreachable")
	// ErrAuth: the repository refused the credentials (HTTP 401 or 403).
	ErrAuth = errors.New("chart repository refused the credentials")
	// ErrNotFound: the repository has no such chart or version.
	ErrNotFound = errors.New("chart not found")
	// ErrDigestMismatch: the archive is not the one pinned; it is refused.
	ErrDigestMismatch = errors.New("chart digest mismatch")
	// ErrInvalidChart: what was fetched is not a valid chart archive (or
	// the repository's index is not a valid index).
	ErrInvalidChart = errors.New("not a valid chart")
	// ErrWrongChart: the archive holds another chart or version than the
	// one asked for.
	ErrWrongChart = errors.New("chart name or version differs")
)

// Error is a failure to fetch one chart. It says which chart, from which
// repository, what went wrong (Kind) and the cause (Err).
type Error struct {
	// Kind is one of the sentinel errors of this package.
	Kind error
	// Repository, Chart and Version are what was asked for.
	Repository, Chart, Version string
	// URL is what was requested when it failed, when known.
	URL string
	// Available lists the versions of the chart the repository has
	// (ErrNotFound, newest first; empty when unknown or none).
	Available []string
	// Want and Got are the expected and actual archive digests
	// (ErrDigestMismatch), or the chart and version asked for and found
	// (ErrWrongChart).
	Want, Got string
	// Hint is what to do about it, when there is something more specific
	// to say than the Kind's usual advice.
	Hint string
	// Err is the cause (may be nil).
	Err error
}

func (e *Error) Error() string {
	chart := e.Chart + " " + e.Version
	var b strings.Builder
	switch e.Kind {
	case ErrUnreachable:
		fmt.Fprintf(&b, "chart repository %s is unreachable", e.Repository)
		if e.URL != "" && (e.Err == nil || !strings.Contains(e.Err.Error(), e.URL)) {
			fmt.Fprintf(&b, " (%s)", e.URL)
		}
		if e.Err != nil {
			fmt.Fprintf(&b, ": %v", e.Err)
		}
		if e.Hint == "" {
			b.WriteString(": check the address, the network and the proxy settings")
		}
	case ErrAuth:
		fmt.Fprintf(&b, "chart repository %s refused access to chart %s", e.Repository, chart)
		if e.Err != nil {
			fmt.Fprintf(&b, " (%v)", e.Err)
		}
		b.WriteString(": check the credentials (username and password, or the registry config)")
	case ErrNotFound:
		fmt.Fprintf(&b, "chart %s is not in chart repository %s", chart, e.Repository)
		if e.Err != nil {
			fmt.Fprintf(&b, " (%v)", e.Err)
		}
		if len(e.Available) > 0 {
			fmt.Fprintf(&b, ": the repository has versions %s", strings.Join(e.Available, ", "))
		}
	case ErrDigestMismatch:
		fmt.Fprintf(&b, "chart %s from %s has digest %s, not the %s expected", chart, e.Repository, e.Got, e.Want)
		if e.Err != nil {
			fmt.Fprintf(&b, " (%v)", e.Err)
		}
		b.WriteString(": refused")
	case ErrInvalidChart:
		fmt.Fprintf(&b, "chart %s from %s is not a valid chart", chart, e.Repository)
		if e.Err != nil {
			fmt.Fprintf(&b, ": %v", e.Err)
		}
	case ErrWrongChart:
		fmt.Fprintf(&b, "chart repository %s served chart %s when asked for %s: refused", e.Repository, e.Got, e.Want)
	default:
		fmt.Fprintf(&b, "chart %s from %s", chart, e.Repository)
		if e.Err != nil {
			fmt.Fprintf(&b, ": %v", e.Err)
		}
	}
	if e.Hint != "" {
		fmt.Fprintf(&b, ": %s", e.Hint)
	}
	return b.String()
}

// Unwrap gives the Kind and the cause, for errors.Is and errors.As.
func (e *Error) Unwrap() []error {
	var out []error
	for _, err := range []error{e.Kind, e.Err} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}
