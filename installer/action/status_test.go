package action

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/installer/certs/certstest"
)

// The status's certificates: each of the TLS Secrets' certificates, the
// CA too, with the days left and how urgent that is.
func TestPlatformCertificates(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	tls := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "onprem-tls", Namespace: "onprem"}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{
			"tls.crt": certstest.PEM(t, "ci.example.com", false, now.Add(20*24*time.Hour+time.Hour)),
			"ca.crt":  certstest.PEM(t, "onprem CA", true, now.Add(3*24*time.Hour+time.Hour)),
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
