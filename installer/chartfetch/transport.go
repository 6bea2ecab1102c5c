package chartfetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
)

// newTransport is the HTTP transport of one fetch: the proxy from the
// environment, the CA file's certificates trusted besides the system's,
// TLS verification off when asked.
func newTransport(o Options) (*http.Transport, error) {
	var t *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		t = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	if o.CAFile == "" && !o.InsecureSkipTLSVerify {
		return t, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: o.InsecureSkipTLSVerify} //nolint:gosec // asked for by the operator
	if o.CAFile != "" {
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("%w: reading the CA file of the chart repository: %w", ErrInvalidSource, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrInvalidSource, o.CAFile)
		}
		cfg.RootCAs = pool
	}
	t.TLSClientConfig = cfg
	return t, nil
}

// boundTransport ties every request to ctx as well as to its own context:
// the Helm registry client makes its requests with context.Background().
type boundTransport struct {
	ctx  context.Context
	base http.RoundTripper
}

func (t boundTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.ctx.Err(); err != nil {
		if req.Body != nil {
			_ = req.Body.Close()
		}
		return nil, err
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	stop := context.AfterFunc(t.ctx, func() { cancel(t.ctx.Err()) })
	resp, err := t.base.RoundTrip(req.WithContext(ctx))
	if err != nil {
		stop()
		cancel(nil)
		return nil, err
	}
	resp.Body = &releasingBody{ReadCloser: resp.Body, release: func() { stop(); cancel(nil) }}
	return resp, nil
}

// releasingBody releases the request's context when the body is closed.
type releasingBody struct {
	io.ReadCloser
	once    sync.Once
	release func()
}

func (b *releasingBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(b.release)
	return err
}

// recorder remembers the outcome of the last request (status or transport
// error), so that a failure of the registry client can be told apart:
// refused credentials, missing chart, unreachable registry.
type recorder struct {
	base http.RoundTripper

	mu     sync.Mutex
	url    string
	status int
	err    error
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.base.RoundTrip(req)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.url = req.URL.Redacted()
	r.err, r.status = err, 0
	if err == nil {
		r.status = resp.StatusCode
	}
	return resp, err
}

// last is the outcome of the last request.
func (r *recorder) last() (url string, status int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.url, r.status, r.err
}

// transportHint says what to do about a connection error, when something
// specific can be said.
func transportHint(err error, o Options) string {
	var unknownCA x509.UnknownAuthorityError
	var verify *tls.CertificateVerificationError
	var header tls.RecordHeaderError
	switch {
	case errors.As(err, &unknownCA) || errors.As(err, &verify):
		if o.CAFile == "" {
			return "give the CA certificate of the repository (CA file)"
		}
		return "the CA file given does not hold the CA that signed the repository's certificate"
	case errors.As(err, &header) || errors.Is(err, http.ErrSchemeMismatch):
		return "the server answered in plain HTTP: for an oci:// registry without TLS, use plain HTTP"
	}
	return ""
}
