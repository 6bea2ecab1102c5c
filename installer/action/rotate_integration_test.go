package action

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/rotate"
	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/installer/state"
)

// Certificate rotation on an installed platform: the listing, a dry run
// that writes nothing, a renewal under the same CA, a new CA with its
// overlap that a converging re-install keeps, the old CA's retirement;
// each recorded in the history without a value; refusals change nothing
// and are input errors.
func TestRotateCertificates(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	src, cl := clusterConfig(t, c, smallPlatform)
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	target := Target{Cluster: cl, ConfigPath: src.ConfigPath}
	const ns = "onprem"
	tlsSecret := func() *corev1.Secret {
		t.Helper()
		s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, credentials.TLS, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	orig := tlsSecret()

	// The listing: every generated Secret, the certificate with its expiry.
	list, err := (&RotateList{Target: target}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gen := generated(t, c.Client, ns)
	listed := map[string]rotate.Item{}
	for _, it := range list.Secrets {
		listed[it.Secret] = it
	}
	for name := range gen {
		if _, ok := listed[name]; !ok {
			t.Errorf("rotate --list lacks %s", name)
		}
	}
	if it := listed[credentials.TLS]; it.Kind != rotate.KindCertificate || len(it.Certificates) != 2 || it.Certificates[0].DaysLeft < 800 {
		t.Errorf("the TLS Secret as listed: %+v", it)
	}
	out, _ := json.Marshal(list)
	for name, data := range gen {
		for k, v := range data {
			if k != "username" && k != "database" && k != secrets.KeyTLSCert && k != secrets.KeyCACert && len(v) > 4 && bytes.Contains(out, v) {
				t.Errorf("the listing holds the value of %s/%s", name, k)
			}
		}
	}

	// A dry run writes nothing and records nothing.
	before := len(loadState(t, c.Client).History)
	dry, err := (&RotateCertificates{Target: target, Mode: rotate.NewCA, DryRun: true}).Run(ctx)
	if err != nil || !dry.DryRun || !dry.Changed {
		t.Fatalf("dry run: %+v, %v", dry, err)
	}
	if s := tlsSecret(); s.ResourceVersion != orig.ResourceVersion {
		t.Error("the dry run wrote the Secret")
	}
	if n := len(loadState(t, c.Client).History); n != before {
		t.Errorf("the dry run added %d history entries", n-before)
	}

	// Renew: same CA, new certificate and key.
	if _, err := (&RotateCertificates{Target: target}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	renewed := tlsSecret()
	if bytes.Equal(renewed.Data[secrets.KeyTLSKey], orig.Data[secrets.KeyTLSKey]) || !bytes.Equal(renewed.Data[secrets.KeyCACert], orig.Data[secrets.KeyCACert]) {
		t.Error("renewal: the key did not change, or the CA did")
	}
	trusts(t, orig.Data[secrets.KeyCACert], renewed, true)

	// A new CA: both trusted, the serving certificate unchanged; an
	// install that converges keeps it all.
	res, err := (&RotateCertificates{Target: target, Mode: rotate.NewCA}).Run(ctx)
	if err != nil || res.TrustedCAs != 2 {
		t.Fatalf("--ca: %+v, %v", res, err)
	}
	overlap := tlsSecret()
	if !bytes.Equal(overlap.Data[secrets.KeyTLSCert], renewed.Data[secrets.KeyTLSCert]) {
		t.Error("--ca changed the serving certificate")
	}
	trusts(t, overlap.Data[secrets.KeyCACert], overlap, true)
	trusts(t, orig.Data[secrets.KeyCACert], overlap, true)
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if s := tlsSecret(); !bytes.Equal(s.Data[secrets.KeyCAKey], overlap.Data[secrets.KeyCAKey]) || !bytes.Equal(s.Data[secrets.KeyCACert], overlap.Data[secrets.KeyCACert]) {
		t.Error("a converging install undid the rotation")
	}

	// Retire: the old CA validates nothing that reads ca.crt.
	if _, err := (&RotateCertificates{Target: target, Mode: rotate.RetireCA}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	retired := tlsSecret()
	trusts(t, retired.Data[secrets.KeyCACert], renewed, false)
	trusts(t, retired.Data[secrets.KeyCACert], retired, true)
	trusts(t, overlap.Data[secrets.KeyCACert], retired, true)
	trusts(t, orig.Data[secrets.KeyCACert], retired, false)

	// The history: three rotations, succeeded, no value of the Secret.
	st := loadState(t, c.Client)
	var rotations []state.Operation
	for _, op := range st.History {
		if op.Kind == state.KindRotate {
			rotations = append(rotations, op)
		}
	}
	if len(rotations) != 3 {
		t.Fatalf("%d rotations recorded, want 3", len(rotations))
	}
	hist, _ := json.Marshal(st.History)
	for _, s := range []*corev1.Secret{orig, renewed, overlap, retired} {
		for _, k := range []string{secrets.KeyTLSKey, secrets.KeyCAKey} {
			if bytes.Contains(hist, s.Data[k]) || bytes.Contains(hist, pemBody(s.Data[k])) {
				t.Errorf("the history holds %s", k)
			}
		}
	}
	for _, op := range rotations {
		if op.Outcome != state.OutcomeSucceeded || !strings.HasPrefix(op.Message, "certificates (") {
			t.Errorf("rotation recorded as %s: %q", op.Outcome, op.Message)
		}
	}

	// Refused: the operator's own certificate. Nothing changes, nothing
	// is recorded, and it is an input error (exit code 2).
	own := retired.DeepCopy()
	own.ObjectMeta = metav1.ObjectMeta{Name: credentials.TLS, Namespace: ns}
	if err := c.Client.CoreV1().Secrets(ns).Delete(ctx, credentials.TLS, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before = len(loadState(t, c.Client).History)
	_, err = (&RotateCertificates{Target: target}).Run(ctx)
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "operator's own certificate") {
		t.Fatalf("rotating the operator's certificate: %v", err)
	}
	if n := len(loadState(t, c.Client).History); n != before {
		t.Error("a refused rotation was recorded")
	}
	if s := tlsSecret(); !bytes.Equal(s.Data[secrets.KeyTLSCert], retired.Data[secrets.KeyTLSCert]) {
		t.Error("a refused rotation changed the Secret")
	}

	// spec.rotation.certificateMaxAgeDays: an install renews a generated
	// certificate older than that, under the same CA; a young one stays.
	var plan credentials.Secret
	for _, p := range credentials.Plan(credentials.Needs{SelfSignedTLS: true}) {
		if p.Name == credentials.TLS {
			plan = p
		}
	}
	data, err := secrets.Generate(plan, secrets.GenerateOptions{Domain: "ci.example.com", Now: func() time.Time { return time.Now().Add(-400 * 24 * time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Client.CoreV1().Secrets(ns).Delete(ctx, credentials.TLS, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	aged := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentials.TLS, Namespace: ns, Labels: map[string]string{secrets.LabelGenerated: "true"}},
		Type: corev1.SecretTypeTLS, Data: data}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, aged, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src2, _ := clusterConfig(t, c, smallPlatform+"  rotation:\n    certificateMaxAgeDays: 365\n")
	ires, err := (&Install{Source: src2, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := tlsSecret()
	if !strings.HasPrefix(ires.CertificateRenewal, "renewed") || bytes.Equal(now.Data[secrets.KeyTLSCert], data[secrets.KeyTLSCert]) {
		t.Fatalf("an install with a 400-day-old certificate and certificateMaxAgeDays 365: %q", ires.CertificateRenewal)
	}
	trusts(t, data[secrets.KeyCACert], now, true)
	ires, err = (&Install{Source: src2, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx)
	if err != nil || ires.CertificateRenewal != "" || !bytes.Equal(tlsSecret().Data[secrets.KeyTLSCert], now.Data[secrets.KeyTLSCert]) {
		t.Fatalf("the next install renewed a young certificate again: %q, %v", ires.CertificateRenewal, err)
	}
}

// trusts checks whether a client holding caPEM accepts the serving
// certificate of s for a host of the platform's domain.
func trusts(t *testing.T, caPEM []byte, s *corev1.Secret, want bool) {
	t.Helper()
	b, _ := pem.Decode(s.Data[secrets.KeyTLSCert])
	if b == nil {
		t.Fatal("no tls.crt")
	}
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: "app.ci.example.com", Roots: roots})
	if got := err == nil; got != want {
		t.Errorf("trusted = %v, want %v (%v)", got, want, err)
	}
}

// pemBody is the base64 body of a PEM value, as it would appear in text.
func pemBody(p []byte) []byte {
	lines := bytes.Split(p, []byte("\n"))
	if len(lines) < 3 {
		return p
	}
	return lines[1]
}
