package action

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/certs"
)

func testCertPEM(t *testing.T, cn string, isCA bool, notAfter time.Time) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn}, NotBefore: notAfter.AddDate(-1, 0, 0),
		NotAfter: notAfter, IsCA: isCA, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// The status's certificates: each of the TLS Secrets' certificates, the
// CA too, with the days left and how urgent that is.
func TestPlatformCertificates(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tls := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "onprem-tls", Namespace: "onprem"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			"tls.crt": testCertPEM(t, "ci.example.com", false, now.Add(20*24*time.Hour+time.Hour)),
			"ca.crt":  testCertPEM(t, "onprem CA", true, now.Add(3*24*time.Hour+time.Hour)),
			"tls.key": []byte("not a certificate"),
		}}
	c := fake.NewClientset(tls)
	got, err := platformCertificates(context.Background(), c, "onprem", now)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("certificates: %+v", got)
	}
	ca, leaf := got[0], got[1]
	if !ca.IsCA || ca.Key != "ca.crt" || ca.DaysLeft != 3 || ca.Level != certs.Error {
		t.Errorf("CA: %+v", ca)
	}
	if leaf.IsCA || leaf.Subject != "CN=ci.example.com" || leaf.DaysLeft != 20 || leaf.Level != certs.Warning || leaf.Secret != "onprem-tls" {
		t.Errorf("certificate: %+v", leaf)
	}
}
