//go:build linux

package testservers

import (
	"crypto/subtle"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// RegistryOption configures Registry.
type RegistryOption func(*registryConfig)

type registryConfig struct {
	user, password string
}

// WithBasicAuth makes the registry require HTTP basic authentication with
// this user and password on every request (401 with a Basic challenge
// otherwise), as a registry with htpasswd authentication does.
func WithBasicAuth(user, password string) RegistryOption {
	return func(c *registryConfig) { c.user, c.password = user, password }
}

// Registry starts go-containerregistry's in-memory registry (OCI
// distribution API) on a free loopback port, plain HTTP, and returns its
// host ("127.0.0.1:PORT"). It is stopped in t.Cleanup.
func Registry(t testing.TB, opts ...RegistryOption) string {
	t.Helper()
	var cfg registryConfig
	for _, o := range opts {
		o(&cfg)
	}
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if cfg.user != "" {
		h = basicAuth(h, cfg.user, cfg.password)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testservers: registry: %v", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("testservers: registry: %v", err)
		}
	}()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

func basicAuth(next http.Handler, user, password string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(user)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="onprem-test-registry"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
		next.ServeHTTP(w, r)
	})
}
