package images

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// A registry with a certificate this machine does not trust is refused,
// unless the operator said insecure; each call gets a transport of its
// own (changing one changes no other).
func TestTransport(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer srv.Close()
	get := func(tr *http.Transport) error {
		resp, err := (&http.Client{Transport: tr}).Get(srv.URL + "/v2/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(Transport(false)); err == nil {
		t.Error("a certificate nobody trusts was accepted without insecure")
	}
	if err := get(Transport(true)); err != nil {
		t.Errorf("insecure: %v", err)
	}
	a, b := Transport(false), Transport(false)
	a.MaxIdleConnsPerHost = 99
	if b.MaxIdleConnsPerHost == 99 || a == b {
		t.Error("two calls share one transport")
	}
}
