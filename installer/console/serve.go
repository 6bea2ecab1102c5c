package console

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultListen is where the console listens unless told otherwise.
const DefaultListen = "127.0.0.1:8800"

// ServeOptions say where and how the console is served.
type ServeOptions struct {
	Source Source
	// Listen is host:port (DefaultListen when empty). An address other
	// than loopback needs TLSCert and TLSKey, or Insecure.
	Listen          string
	TLSCert, TLSKey string
	Insecure        bool
	// Ready is told the login URL (with its token) once the console
	// listens.
	Ready  func(loginURL string)
	Logger *slog.Logger
}

// InputError is a refused option: nothing was started.
type InputError struct{ Reason string }

func (e *InputError) Error() string { return e.Reason }

// Check validates the options without starting anything.
func (o *ServeOptions) Check() error {
	if o.Listen == "" {
		o.Listen = DefaultListen
	}
	host, port, err := net.SplitHostPort(o.Listen)
	if err != nil || port == "" {
		return &InputError{fmt.Sprintf("--listen %q: give host:port, e.g. %s", o.Listen, DefaultListen)}
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return &InputError{"--tls-cert and --tls-key go together: give both (the certificate and its key, PEM), or neither"}
	}
	if !loopback(host) && o.TLSCert == "" && !o.Insecure {
		return &InputError{fmt.Sprintf("--listen %s is reachable from other machines, and without TLS the session cookie and the login token would cross the network in the clear: "+
			"give --tls-cert and --tls-key, listen on loopback (the default, %s) and reach it through an SSH tunnel, or accept the risk with --insecure", o.Listen, DefaultListen)}
	}
	return nil
}

// InsecureBeyondLoopback reports whether the options serve plain HTTP
// beyond loopback.
func (o *ServeOptions) InsecureBeyondLoopback() bool {
	host, _, _ := net.SplitHostPort(o.Listen)
	return !loopback(host) && o.TLSCert == ""
}

func loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Serve serves the console until ctx ends, then shuts down within five
// seconds. It makes a new login token for this run.
func Serve(ctx context.Context, o ServeOptions) error {
	if err := o.Check(); err != nil {
		return err
	}
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	token, err := NewToken()
	if err != nil {
		return err
	}
	var cfg *tls.Config
	if o.TLSCert != "" {
		pair, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return &InputError{fmt.Sprintf("--tls-cert %s / --tls-key %s: %v", o.TLSCert, o.TLSKey, err)}
		}
		cfg = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	s, err := New(o.Source, Options{Token: token, Secure: cfg != nil, Logger: log, Context: ctx})
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return &InputError{fmt.Sprintf("--listen %s: %v (another console or program uses it? choose another port)", o.Listen, err)}
	}
	scheme := "http"
	if cfg != nil {
		l = tls.NewListener(l, cfg)
		scheme = "https"
	}
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	if o.Ready != nil {
		o.Ready(loginURL(scheme, l.Addr().String(), o.Listen, token))
	}
	select {
	case err := <-done:
		return fmt.Errorf("console: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("console: stopping: %w", err)
	}
	// An operation started from the console was interrupted with ctx: it
	// records that in the installation's state before it returns.
	if !s.ops.wait(opStopTimeout) {
		return fmt.Errorf("console: an operation did not stop within %s of the interrupt; run its command again to resume it (see 'onprem status')", opStopTimeout)
	}
	return nil
}

// opStopTimeout is how long a stopping console waits for an interrupted
// operation to record its end.
const opStopTimeout = 2 * time.Minute

// loginURL is the URL to open: the address listened on (the port the
// system chose for port 0), under the host asked for.
func loginURL(scheme, bound, asked, token string) string {
	host, _, _ := net.SplitHostPort(asked)
	_, port, _ := net.SplitHostPort(bound)
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	u := url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port), Path: "/login", RawQuery: "token=" + token}
	return u.String()
}
