package certs

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/certs/certstest"
)

func TestJudge(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	for _, tc := range []struct {
		left time.Duration
		want Level
		days int
	}{
		{400 * day, OK, 400}, {30 * day, OK, 30}, {29 * day, Warning, 29}, {7 * day, Warning, 7},
		{7*day - time.Minute, Error, 6}, {time.Hour, Error, 0}, {-time.Hour, Error, -1}, {-2 * day, Error, -2},
	} {
		if got := Judge(now, now.Add(tc.left)); got != tc.want {
			t.Errorf("%s left: %s, want %s", tc.left, got, tc.want)
		}
		if got := DaysLeft(now, now.Add(tc.left)); got != tc.days {
			t.Errorf("%s left: %d days, want %d", tc.left, got, tc.days)
		}
	}
}

// A chain gives each of its certificates; keys without certificates and
// the private key are skipped; nothing but certificate fields comes out.
func TestInSecret(t *testing.T) {
	exp := time.Date(2028, 1, 2, 0, 0, 0, 0, time.UTC)
	leaf, ca := certstest.PEM(t, "ci.example.com", false, exp), certstest.PEM(t, "onprem CA", true, exp.AddDate(5, 0, 0))
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "onprem-tls", Namespace: "onprem"}, Data: map[string][]byte{
		"tls.crt": append(append([]byte{}, leaf...), ca...), "ca.crt": ca,
		"tls.key": []byte("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"), "password": []byte("hunter2"),
	}}
	got := InSecret(s)
	if len(got) != 3 || got[0].Key != "ca.crt" || !got[0].IsCA || got[1].Key != "tls.crt" || got[1].Subject != "CN=ci.example.com" ||
		!got[1].NotAfter.Equal(exp) || got[2].Subject != "CN=onprem CA" || got[1].Namespace != "onprem" || got[1].Secret != "onprem-tls" {
		t.Fatalf("certificates: %+v", got)
	}
	if len(Parse("n", "s", "k", []byte("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n"))) != 0 {
		t.Error("an unreadable certificate was returned")
	}
}
