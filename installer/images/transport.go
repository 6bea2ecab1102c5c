package images

import (
	"crypto/tls"
	"net/http"

	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Transport is the HTTP transport onprem talks to registries with:
// go-containerregistry's default (proxies from the environment, its
// timeouts), a copy of its own. With insecure (--insecure,
// spec.registry.insecure) the registry's certificate is not verified.
func Transport(insecure bool) *http.Transport {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	if insecure {
		if t.TLSClientConfig == nil {
			t.TLSClientConfig = &tls.Config{}
		}
		t.TLSClientConfig.InsecureSkipVerify = true //nolint:gosec // the operator asked for it
	}
	return t
}
