package configrepo

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
)

// AuthError is a repository refusing the credentials: HTTP 401 (the token
// is not accepted) or 403 (the token may not read, or may not push).
type AuthError struct {
	// URL is the repository's URL, without credentials.
	URL string
	// StatusCode is 401 or 403.
	StatusCode int
	// Push is set when the refusal was for pushing (the token may be
	// read-only).
	Push bool
	// Err is go-git's error.
	Err error

	anonymous bool // no token was given
}

func (e *AuthError) Error() string {
	head := fmt.Sprintf("git repository %s refused authentication (HTTP %d)", e.URL, e.StatusCode)
	switch {
	case e.anonymous:
		return head + ": it needs a token and none was given: give the Git token"
	case e.Push:
		return fmt.Sprintf("git repository %s refused authentication for pushing (HTTP %d): check the token: it must grant write access to the repository (GitHub: Contents read and write; GitLab: write_repository)", e.URL, e.StatusCode)
	case e.StatusCode == http.StatusForbidden:
		return head + ": check the token: it is not allowed to read this repository"
	default:
		return head + ": check the token: it must be valid, unexpired and grant access to this repository"
	}
}

func (e *AuthError) Unwrap() error { return e.Err }

// UnreachableError is a repository that cannot be reached: DNS, refused or
// timed-out connections, TLS failures, a gateway answering 502-504.
type UnreachableError struct {
	// URL is the repository's URL, without credentials.
	URL string
	Err error
}

func (e *UnreachableError) Error() string {
	hint := "check the URL, the network and the proxy settings (HTTPS_PROXY, NO_PROXY)"
	if isTLSError(e.Err) {
		hint = "the TLS connection failed: give the CA certificates that signed the server's certificate (--git-ca-file), or check that the URL's scheme and port are right"
	}
	cause := e.Err
	var ue *url.Error
	if errors.As(cause, &ue) {
		cause = ue.Err // its text repeats the URL with the query
	}
	return fmt.Sprintf("git repository %s cannot be reached: %v: %s", e.URL, cause, hint)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// fail turns go-git's error of an operation (op: "listing its branches",
// "cloning it", "pushing") into onprem's: *AuthError, *UnreachableError, or
// an error naming the repository and op.
func (c *conn) fail(ctx context.Context, op string, err error, push bool) error {
	if err == nil {
		return nil
	}
	var ae *AuthError
	var ue *UnreachableError
	if errors.As(err, &ae) || errors.As(err, &ue) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("git repository %s: %s: %w", c.url, op, err)
	}
	switch status := httpStatus(err); {
	case status == http.StatusUnauthorized || errors.Is(err, transport.ErrAuthenticationRequired):
		return &AuthError{URL: c.url, StatusCode: http.StatusUnauthorized, Push: push, Err: err, anonymous: c.auth == nil}
	case status == http.StatusForbidden || errors.Is(err, transport.ErrAuthorizationFailed):
		return &AuthError{URL: c.url, StatusCode: http.StatusForbidden, Push: push, Err: err, anonymous: c.auth == nil}
	case status == http.StatusNotFound || errors.Is(err, transport.ErrRepositoryNotFound):
		// go-git's text adds nothing ("repository not found: ").
		return &textError{msg: fmt.Sprintf("git repository %s was not found: check the URL, and that the token can see the repository (hosts answer \"not found\" for private repositories a token cannot access)", c.url), err: err}
	case status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout:
		return &UnreachableError{URL: c.url, Err: err}
	}
	var ne net.Error
	if errors.As(err, &ne) || isTLSError(err) {
		return &UnreachableError{URL: c.url, Err: err}
	}
	return fmt.Errorf("git repository %s: %s: %w", c.url, op, err)
}

// httpStatus is the status of go-git's unexpected HTTP answer, 0 if none.
func httpStatus(err error) int {
	var ue *plumbing.UnexpectedError
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var he *githttp.Err
	if errors.As(err, &he) && he.Response != nil {
		return he.Response.StatusCode
	}
	return 0
}

func isTLSError(err error) bool {
	var (
		cv  *tls.CertificateVerificationError
		rh  tls.RecordHeaderError
		ua  x509.UnknownAuthorityError
		hn  x509.HostnameError
		ci  x509.CertificateInvalidError
		alt tls.AlertError
	)
	return errors.As(err, &cv) || errors.As(err, &rh) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) || errors.As(err, &alt)
}

// textError is an error with its own text, wrapping its cause.
type textError struct {
	msg string
	err error
}

func (e *textError) Error() string { return e.msg }
func (e *textError) Unwrap() error { return e.err }

// scrub makes sure that no secret of c appears in err's text (a last
// guard: the URL given to go-git carries none, and go-git masks the
// password of its basic auth).
func (c *conn) scrub(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	out := msg
	for _, s := range c.secrets {
		out = strings.ReplaceAll(out, s, "***")
	}
	if out == msg {
		return err
	}
	return &textError{msg: out, err: err}
}
