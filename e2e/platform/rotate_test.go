//go:build linux

package platform

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/action"
)

// afterRotation is how long traffic goes on after each rotation (about 50
// requests at trafficRate).
const afterRotation = 5 * time.Second

// rotateCertificates renews the platform's certificate, makes a new CA
// and retires the old one, each under traffic through the ingress
// controller, which must serve the new certificate without a failed
// request; then a client holding only the old CA is refused.
func (e *env) rotateCertificates(ctx context.Context, paths []string) {
	t := e.t
	rotate := func(args ...string) action.RotateCertificatesResult {
		var res action.RotateCertificatesResult
		e.onpremJSON(&res, append([]string{"rotate", "certificates", "--namespace", namespace, "--kubeconfig", e.kubeconfig}, args...)...)
		if !res.Changed {
			t.Fatalf("onprem rotate certificates %v changed nothing: %s", args, res.Summary)
		}
		return res
	}
	noFailure := func(r trafficResult) {
		if r.Failed > 0 || r.Sent == 0 {
			t.Fatalf("%d of %d requests failed: %v", r.Failed, r.Sent, r.Examples)
		}
	}
	// during runs op under traffic, then goes on reading for a while with
	// fresh connections (a new TLS handshake each: the certificate served
	// now), so that both sides of the change are exercised.
	during := func(name string, op func()) trafficResult {
		return e.underTraffic(name, func() {
			op()
			if tr, ok := e.client.Transport.(*http.Transport); ok {
				tr.CloseIdleConnections()
			}
			time.Sleep(afterRotation)
		}, paths...)
	}
	orig := e.tlsSecret(ctx)
	oldCA := orig.Data["ca.crt"]

	e.step("certificate renewed under the same CA, served without a failed request", func() {
		r := during("certificate renewal", func() {
			rotate()
			e.tookUp("the renewed certificate", e.tlsSecret(ctx))
		})
		noFailure(r)
		if s := e.tlsSecret(ctx); !bytes.Equal(s.Data["ca.crt"], oldCA) || bytes.Equal(s.Data["tls.crt"], orig.Data["tls.crt"]) {
			t.Fatal("the renewal changed the CA, or not the certificate")
		}
	})

	e.step("a new CA trusted beside the old one, then the old one retired: no request fails, the old CA is refused", func() {
		var res action.RotateCertificatesResult
		noFailure(during("a new CA (overlap)", func() { res = rotate("--ca") }))
		if res.TrustedCAs != 2 {
			t.Fatalf("after --ca ca.crt trusts %d CAs, want 2", res.TrustedCAs)
		}
		// The client takes the new ca.crt, as clients do during the overlap.
		e.ingressClient(ctx)
		noFailure(during("the old CA retired", func() {
			rotate("--retire-ca")
			e.tookUp("the new CA's certificate", e.tlsSecret(ctx))
		}))
		retired := e.tlsSecret(ctx)
		if err := e.handshake(oldCA); err == nil {
			t.Fatal("after the retirement a client holding only the old CA still accepts the platform's certificate")
		} else {
			t.Logf("a client holding only the old CA: %v", err)
		}
		if err := e.handshake(retired.Data["ca.crt"]); err != nil {
			t.Fatalf("a client holding the new ca.crt: %v", err)
		}
		// Clients from here on hold the new CA only.
		e.ingressClient(ctx)
		var list action.RotateListResult
		e.onpremJSON(&list, "rotate", "--list", "--namespace", namespace, "--kubeconfig", e.kubeconfig)
		for _, it := range list.Secrets {
			if it.Secret == "onprem-tls" && len(it.Certificates) != 2 {
				t.Fatalf("rotate --list shows %d certificates in onprem-tls, want the certificate and one CA", len(it.Certificates))
			}
		}
	})
}

func (e *env) tlsSecret(ctx context.Context) *corev1.Secret {
	e.t.Helper()
	s, err := e.cluster.Client.CoreV1().Secrets(namespace).Get(ctx, "onprem-tls", metav1.GetOptions{})
	if err != nil {
		e.t.Fatalf("the platform's TLS Secret: %v", err)
	}
	return s
}

// tookUp waits until the ingress controller serves the certificate of s,
// and logs how long that took.
func (e *env) tookUp(what string, s *corev1.Secret) {
	e.t.Helper()
	b, _ := pem.Decode(s.Data["tls.crt"])
	if b == nil {
		e.t.Fatal("onprem-tls has no certificate")
	}
	start := time.Now()
	var served []byte
	for time.Since(start) < 2*time.Minute {
		if served = e.servedCertificate(); bytes.Equal(served, b.Bytes) {
			e.t.Logf("the ingress controller serves %s %.1f s after the rotation", what, time.Since(start).Seconds())
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	e.t.Fatalf("the ingress controller still does not serve %s after 2 minutes", what)
}

// servedCertificate is the certificate (DER) the ingress controller
// presents for the platform's domain, nil when the handshake fails.
func (e *env) servedCertificate() []byte {
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(e.nodeIP, strconv.Itoa(httpsNodePort)),
		&tls.Config{ServerName: domain, InsecureSkipVerify: true}) // only read, to compare with the Secret
	if err != nil {
		return nil
	}
	defer c.Close()
	if peer := c.ConnectionState().PeerCertificates; len(peer) > 0 {
		return peer[0].Raw
	}
	return nil
}

// handshake connects to the platform's domain trusting only caPEM.
func (e *env) handshake(caPEM []byte) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("no CA certificate")
	}
	d := &net.Dialer{Timeout: 5 * time.Second}
	c, err := tls.DialWithDialer(d, "tcp", net.JoinHostPort(e.nodeIP, strconv.Itoa(httpsNodePort)), &tls.Config{ServerName: domain, RootCAs: pool})
	if err != nil {
		return err
	}
	return c.Close()
}
