//go:build linux

package platform

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// trust is the CA bundle a client holds, which it replaces when the
// platform publishes a new one (a client that reads ca.crt again during a
// CA rotation's overlap).
type trust struct {
	pool atomic.Pointer[x509.CertPool]
}

func newTrust(t *testing.T, caPEM []byte) *trust {
	tr := &trust{}
	tr.set(t, caPEM)
	return tr
}

// set makes caPEM the bundle.
func (tr *trust) set(t *testing.T, caPEM []byte) {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA certificate in ca.crt")
	}
	tr.pool.Store(pool)
}

// transport reaches the platform's domain through the ingress
// controller's NodePort on nodeIP, verifying the certificate served
// against the bundle held at each handshake.
func (tr *trust) transport(nodeIP string) *http.Transport {
	addr := net.JoinHostPort(nodeIP, strconv.Itoa(httpsNodePort))
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Transport{
		TLSClientConfig: &tls.Config{
			ServerName: domain,
			// Verified below, against the bundle of the moment: Go's own
			// verification reads a fixed RootCAs.
			InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error {
				if len(cs.PeerCertificates) == 0 {
					return errors.New("no certificate served")
				}
				inter := x509.NewCertPool()
				for _, c := range cs.PeerCertificates[1:] {
					inter.AddCert(c)
				}
				_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{DNSName: domain, Roots: tr.pool.Load(), Intermediates: inter})
				return err
			},
		},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return dialer.DialContext(ctx, network, addr)
		},
	}
}

// recordTraffic reads paths and writes new records (to pipelines-api and
// gitops-api in turn, MongoDB) through the ingress controller at
// trafficRate, alternately, until stop; it remembers each record written.
type recordTraffic struct {
	*traffic
	writing atomic.Bool
	mu      sync.Mutex
	written map[string]writtenRecord
	// answeredBy: the service that must answer a read path (read); set
	// once, before the traffic starts.
	answeredBy map[string]string
}

// writtenRecord is a record written during the traffic: where, and what.
type writtenRecord struct{ prefix, value string }

// writeTargets are the services records are written to through the
// ingress controller.
var writeTargets = []string{"/api", "/gitops/api"}

// startRecordTraffic starts a recordTraffic. answeredBy names, for a read
// path, the service that must answer it (its JSON's "service"): an answer
// from another one, a route that fell to a shorter prefix, is a failure
// too. nil checks no read's sender.
func (e *env) startRecordTraffic(client *http.Client, paths []string, answeredBy map[string]string) *recordTraffic {
	tr, ctx := newTraffic(context.Background())
	rt := &recordTraffic{traffic: tr, written: map[string]writtenRecord{}, answeredBy: answeredBy}
	rt.writing.Store(true)
	rt.run(ctx, time.Second/trafficRate, true, func(_ context.Context, i int) {
		sent := time.Now()
		if i%2 == 1 || !rt.writing.Load() {
			path := paths[(i/2)%len(paths)]
			rt.recordSent(path, sent, rt.read(client, path))
			return
		}
		prefix := writeTargets[(i/2)%len(writeTargets)]
		// Each run writes keys of its own: a write that a later
		// operation loses must not be found as an earlier run's record of
		// the same name and value.
		key := fmt.Sprintf("traffic-%d-%d", rt.started.UnixMilli(), i)
		value := fmt.Sprintf("written under traffic started at %s, request %d", rt.started.Format(time.RFC3339Nano), i)
		err := call(client, http.MethodPut, prefix+"/records/"+key, value, nil)
		rt.recordSent(prefix+"/records/"+key+" (write)", sent, err)
		if err == nil {
			rt.mu.Lock()
			rt.written[key] = writtenRecord{prefix, value}
			rt.mu.Unlock()
		}
	})
	return rt
}

// read GETs path, checking who answered it (answeredBy).
func (rt *recordTraffic) read(client *http.Client, path string) error {
	want := rt.answeredBy[path]
	if want == "" {
		return call(client, http.MethodGet, path, "", nil)
	}
	var got struct {
		Service string `json:"service"`
	}
	if err := call(client, http.MethodGet, path, "", &got); err != nil {
		return err
	}
	if got.Service != want {
		return fmt.Errorf("answered by %q, not %s", got.Service, want)
	}
	return nil
}

// stopWriting makes the traffic read only, and returns the records it
// wrote: a write still in flight may have reached the service unseen,
// which is why the check reads only those it saw answered.
func (rt *recordTraffic) stopWriting() map[string]writtenRecord {
	rt.writing.Store(false)
	time.Sleep(6 * time.Second) // the requests' timeout, and one more
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make(map[string]writtenRecord, len(rt.written))
	for k, v := range rt.written {
		out[k] = v
	}
	return out
}

// checkWritten reads every record of written back from the service it
// was written to: each of its stores holds the value.
func (e *env) checkWritten(written map[string]writtenRecord) {
	e.t.Helper()
	for key, w := range written {
		var got struct {
			Values map[string]string `json:"values"`
		}
		decodeJSON(e.t, e.request(http.MethodGet, w.prefix+"/records/"+key, "", http.StatusOK), &got)
		if len(got.Values) == 0 {
			e.t.Fatalf("record %s of %s: no value read back", key, w.prefix)
		}
		for store, v := range got.Values {
			if v != w.value {
				e.t.Fatalf("record %s of %s in %s: %q, want %q", key, w.prefix, store, v, w.value)
			}
		}
	}
	e.t.Logf("%d record(s) written under traffic read back through the ingress controller", len(written))
}
