package rotate

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/secrets"
)

const (
	ns     = "onprem"
	domain = "ci.example.com"
)

var t0 = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// generated is the platform's TLS Secret as 'onprem install' makes it.
func generated(t *testing.T) *corev1.Secret {
	t.Helper()
	var plan credentials.Secret
	for _, s := range credentials.Plan(credentials.Needs{SelfSignedTLS: true}) {
		if s.Name == credentials.TLS {
			plan = s
		}
	}
	data, err := secrets.Generate(plan, secrets.GenerateOptions{Domain: domain, Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: credentials.TLS, ResourceVersion: "1",
		CreationTimestamp: metav1.NewTime(t0),
		Labels:            map[string]string{secrets.LabelGenerated: "true"}, Annotations: map[string]string{secrets.AnnotationPurpose: plan.Purpose}},
		Type: corev1.SecretTypeTLS, Data: data}
}

func read(t *testing.T, c *fake.Clientset) *corev1.Secret {
	t.Helper()
	s, err := c.CoreV1().Secrets(ns).Get(context.Background(), credentials.TLS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// verifies reports whether the serving certificate of s verifies for a
// host of the domain against the CAs of caPEM.
func verifies(t *testing.T, s *corev1.Secret, caPEM []byte, at time.Time) bool {
	t.Helper()
	leaf, err := firstCert(s.Data[secrets.KeyTLSCert])
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	_, err = leaf.Verify(x509.VerifyOptions{DNSName: "app." + domain, Roots: roots, CurrentTime: at})
	return err == nil
}

func rotate(t *testing.T, c *fake.Clientset, mode Mode, at time.Time) *CertificatesResult {
	t.Helper()
	res, err := Certificates(context.Background(), CertificatesOptions{Client: c, Namespace: ns, Mode: mode, Now: at})
	if err != nil {
		t.Fatalf("%s: %v", mode, err)
	}
	return res
}

// Renewal under the same CA, then a CA rotation with its overlap, then
// the old CA's retirement: what a client holding each ca.crt trusts at
// each step.
func TestCertificateLifecycle(t *testing.T) {
	orig := generated(t)
	c := fake.NewClientset(orig)
	oldCA := orig.Data[secrets.KeyCACert]

	// Renew: a new certificate and key, the same CA; clients change nothing.
	at := t0.Add(400 * 24 * time.Hour)
	res := rotate(t, c, Renew, at)
	renewed := read(t, c)
	if !res.Changed || bytes.Equal(renewed.Data[secrets.KeyTLSCert], orig.Data[secrets.KeyTLSCert]) || bytes.Equal(renewed.Data[secrets.KeyTLSKey], orig.Data[secrets.KeyTLSKey]) {
		t.Fatalf("renew changed nothing: %+v", res)
	}
	if !bytes.Equal(renewed.Data[secrets.KeyCACert], oldCA) || !bytes.Equal(renewed.Data[secrets.KeyCAKey], orig.Data[secrets.KeyCAKey]) {
		t.Error("renew changed the CA")
	}
	if !verifies(t, renewed, oldCA, at) {
		t.Error("the renewed certificate does not verify with the CA clients hold")
	}
	leaf, _ := firstCert(renewed.Data[secrets.KeyTLSCert])
	if got := leaf.NotAfter.Sub(at); got < 824*24*time.Hour {
		t.Errorf("renewed certificate valid %s from the renewal, want 825 days", got)
	}
	if renewed.Annotations[AnnotationRotatedAt] != at.Format(time.RFC3339) {
		t.Errorf("rotated-at = %q", renewed.Annotations[AnnotationRotatedAt])
	}

	// A new CA: trusted beside the old one; the serving certificate stays
	// (clients that have not taken the new ca.crt yet fail nothing).
	res = rotate(t, c, NewCA, at)
	overlap := read(t, c)
	bundle := overlap.Data[secrets.KeyCACert]
	if res.TrustedCAs != 2 || len(certs.X509(bundle)) != 2 {
		t.Fatalf("overlap: %d CAs trusted, want 2: %+v", res.TrustedCAs, res)
	}
	if !bytes.Equal(overlap.Data[secrets.KeyTLSCert], renewed.Data[secrets.KeyTLSCert]) {
		t.Error("--ca changed the serving certificate")
	}
	if !verifies(t, overlap, bundle, at) || !verifies(t, overlap, oldCA, at) {
		t.Error("during the overlap the serving certificate is not trusted by old and new ca.crt")
	}
	newCA := certsPEM(certs.X509(bundle)[:1])
	if _, _, ok := signingCA(certs.X509(bundle), overlap.Data[secrets.KeyCAKey]); !ok || bytes.Equal(overlap.Data[secrets.KeyCAKey], orig.Data[secrets.KeyCAKey]) {
		t.Error("ca.key is not the new CA's")
	}

	// Retire: the serving certificate is signed by the new CA, ca.crt holds
	// only it; the old CA validates nothing that reads ca.crt.
	res = rotate(t, c, RetireCA, at.Add(2*time.Hour))
	retired := read(t, c)
	if res.TrustedCAs != 1 || !bytes.Equal(retired.Data[secrets.KeyCACert], newCA) {
		t.Fatalf("retired: %+v", res)
	}
	if bytes.Equal(retired.Data[secrets.KeyTLSCert], overlap.Data[secrets.KeyTLSCert]) || !strings.Contains(res.Summary, "new serving certificate") {
		t.Errorf("retirement kept the old CA's serving certificate: %s", res.Summary)
	}
	if !verifies(t, retired, bundle, at.Add(2*time.Hour)) || !verifies(t, retired, newCA, at.Add(2*time.Hour)) {
		t.Error("after retirement the serving certificate is not trusted by the bundle or the new CA")
	}
	if verifies(t, renewed, retired.Data[secrets.KeyCACert], at) || verifies(t, retired, oldCA, at.Add(2*time.Hour)) {
		t.Error("after retirement the old CA still validates")
	}
	// Retiring again: nothing to do, nothing written.
	if res := rotate(t, c, RetireCA, at.Add(3*time.Hour)); res.Changed || !strings.Contains(res.Summary, "nothing to retire") {
		t.Errorf("second retire: %+v", res)
	}
	if got := read(t, c); got.Annotations[AnnotationRotatedAt] != at.Add(2*time.Hour).Format(time.RFC3339) {
		t.Errorf("a retirement with nothing to retire wrote the Secret")
	}
	// A renewal after it: the new CA signs.
	rotate(t, c, Renew, at.Add(4*time.Hour))
	if s := read(t, c); !verifies(t, s, newCA, at.Add(4*time.Hour)) {
		t.Error("a renewal after the retirement is not under the new CA")
	}
}

func certsPEM(cs []*x509.Certificate) []byte {
	var out []byte
	for _, c := range cs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// Refusals change nothing and say what to do.
func TestCertificatesRefused(t *testing.T) {
	legacy := generated(t)
	delete(legacy.Data, secrets.KeyCAKey) // an installation from before the CA's key was kept
	operator := generated(t)
	operator.Name = "my-tls"
	operator.Labels = nil

	for _, tc := range []struct {
		name   string
		secret string
		mode   Mode
		want   string
	}{
		{"no CA key", credentials.TLS, Renew, "--ca"},
		{"the operator's Secret", "my-tls", NewCA, "operator's own certificate"},
		{"missing", "absent", Renew, "does not exist"},
		{"bad mode", credentials.TLS, Mode("sideways"), "use renew, new-ca or retire-ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(legacy.DeepCopy(), operator.DeepCopy())
			_, err := Certificates(context.Background(), CertificatesOptions{Client: c, Namespace: ns, Secret: tc.secret, Mode: tc.mode, Now: t0})
			var re *RefusedError
			if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want a refusal saying %q", err, tc.want)
			}
			for _, a := range c.Actions() {
				if a.GetVerb() != "get" {
					t.Errorf("refused, yet %s %s", a.GetVerb(), a.GetResource().Resource)
				}
			}
		})
	}

	// The legacy Secret cannot be retired either; it gets a new CA, and
	// everything works after that.
	c := fake.NewClientset(legacy)
	if _, err := Certificates(context.Background(), CertificatesOptions{Client: c, Namespace: ns, Mode: RetireCA, Now: t0}); err == nil || !strings.Contains(err.Error(), "--ca") {
		t.Errorf("retiring without a CA key: %v", err)
	}
	rotate(t, c, NewCA, t0)
	rotate(t, c, RetireCA, t0.Add(time.Hour))
	rotate(t, c, Renew, t0.Add(2*time.Hour))
}

// A dry run computes the change and writes nothing; a Secret changed
// between the read and the write is not overwritten.
func TestCertificatesDryRunAndConflict(t *testing.T) {
	c := fake.NewClientset(generated(t))
	res, err := Certificates(context.Background(), CertificatesOptions{Client: c, Namespace: ns, Mode: NewCA, DryRun: true, Now: t0})
	if err != nil || !res.DryRun || !res.Changed || res.TrustedCAs != 2 || len(res.After) == 0 {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "update" {
			t.Fatal("a dry run updated the Secret")
		}
	}

	c.PrependReactor("update", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(corev1.Resource("secrets"), credentials.TLS, errors.New("changed meanwhile"))
	})
	_, err = Certificates(context.Background(), CertificatesOptions{Client: c, Namespace: ns, Mode: Renew, Now: t0})
	if err == nil || !strings.Contains(err.Error(), "run the rotation again") {
		t.Fatalf("conflict: %v", err)
	}
}

func TestList(t *testing.T) {
	tlsS := generated(t)
	tlsS.Annotations[AnnotationRotatedAt] = t0.Add(10 * 24 * time.Hour).Format(time.RFC3339)
	pw := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: credentials.Redis, CreationTimestamp: metav1.NewTime(t0),
		Labels: map[string]string{secrets.LabelGenerated: "true"}}, Data: map[string][]byte{"password": []byte("s3cret-value")}}
	keys := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: credentials.PlatformKeys, CreationTimestamp: metav1.NewTime(t0),
		Labels: map[string]string{secrets.LabelGenerated: "true"}}, Data: map[string][]byte{"signing-key": []byte("k1"), "encryption-key": []byte("k2")}}
	own := generated(t)
	own.Name, own.Labels = "my-tls", nil
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "someone-elses"}, Data: map[string][]byte{"x": []byte("y")}}

	items, err := List(context.Background(), fake.NewClientset(tlsS, pw, keys, own, other), ns, t0.Add(100*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	byName := map[string]Item{}
	for _, it := range items {
		names = append(names, it.Secret)
		byName[it.Secret] = it
	}
	if got := strings.Join(names, " "); got != "my-tls onprem-platform-keys onprem-redis onprem-tls" {
		t.Fatalf("listed %s", got)
	}
	tl := byName[credentials.TLS]
	if tl.Kind != KindCertificate || tl.Owner != OwnerOnprem || tl.AgeDays != 90 || tl.Rotate != "onprem rotate certificates" || len(tl.Certificates) != 2 {
		t.Errorf("TLS item: %+v", tl)
	}
	for _, c := range tl.Certificates {
		if c.Level != certs.OK || c.DaysLeft <= 0 {
			t.Errorf("certificate %s: %+v", c.Key, c)
		}
	}
	if it := byName[credentials.Redis]; it.Kind != KindCredential || it.AgeDays != 100 || strings.Join(it.Keys, ",") != "password" {
		t.Errorf("redis item: %+v", it)
	}
	if it := byName[credentials.PlatformKeys]; it.Kind != KindKeys {
		t.Errorf("keys item: %+v", it)
	}
	if it := byName["my-tls"]; it.Owner != OwnerOperator || it.Rotate != "" {
		t.Errorf("operator's TLS item: %+v", it)
	}
}

// RenewIfDue renews by age or by nearness of expiry, and otherwise, or
// without a generated Secret, does nothing.
func TestRenewIfDue(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		maxAge  int
		at      time.Time
		renewed bool
	}{
		{"young", 365, t0.Add(100 * 24 * time.Hour), false},
		{"older than the maximum age", 365, t0.Add(366 * 24 * time.Hour), true},
		{"near its expiry", 790, t0.Add(800 * 24 * time.Hour), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset(generated(t))
			before := read(t, c)
			res, err := RenewIfDue(ctx, c, ns, tc.maxAge, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			changed := !bytes.Equal(read(t, c).Data[secrets.KeyTLSCert], before.Data[secrets.KeyTLSCert])
			if (res != nil) != tc.renewed || changed != tc.renewed {
				t.Errorf("renewed: result %v, Secret changed %v; want %v", res != nil, changed, tc.renewed)
			}
		})
	}
	// No generated Secret: nothing to do.
	own := generated(t)
	own.Labels = nil
	for _, c := range []*fake.Clientset{fake.NewClientset(), fake.NewClientset(own)} {
		if res, err := RenewIfDue(ctx, c, ns, 1, t0.Add(800*24*time.Hour)); res != nil || err != nil {
			t.Errorf("without a generated Secret: %+v, %v", res, err)
		}
	}
}

// A rollout wait stopped from outside says why (a lost lock), not the
// last poll's "context canceled", and not that the rollout timed out.
func TestRolloutWaitStoppedSaysWhy(t *testing.T) {
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "gitops-api", Namespace: "onprem", Generation: 2},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 1},
	}
	c := fake.NewSimpleClientset(d)
	lost := errors.New("lost the installation lock")
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() { time.Sleep(1500 * time.Millisecond); cancel(lost) }()
	err := waitRolledOut(ctx, c, "onprem", workload{kind: "Deployment", name: "gitops-api"}, time.Minute)
	if !errors.Is(err, lost) {
		t.Fatalf("error %v, want it to carry the cause %q", err, lost)
	}
	if strings.Contains(err.Error(), "did not roll out within") {
		t.Errorf("error %q blames the rollout's timeout", err)
	}

	// Not stopped: the timeout and the reason are named.
	err = waitRolledOut(context.Background(), c, "onprem", workload{kind: "Deployment", name: "gitops-api"}, 1500*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "did not roll out within 1.5s (its controller has not seen the change yet)") {
		t.Fatalf("error %v, want the timeout and what is pending", err)
	}
}

// A restarted StatefulSet that onprem rolls itself (OnDelete: a replicated
// database) has its members replaced through installer/roll, not waited
// for until the timeout: its controller never replaces them by itself.
func TestRolloutWaitRollsOnDelete(t *testing.T) {
	one := int32(1)
	yes := true
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "postgresql", Namespace: ns, Generation: 2},
		Spec: appsv1.StatefulSetSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "postgresql"}},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, UpdateRevision: "new", CurrentRevision: "old", ReadyReplicas: 1}}
	member := func(rev string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "postgresql-0", Namespace: ns, UID: "uid-" + k8stypes.UID(rev),
			Labels:          map[string]string{"app": "postgresql", appsv1.ControllerRevisionHashLabelKey: rev},
			OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "postgresql", Controller: &yes}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	}
	c := fake.NewClientset(s, member("old"))
	evicted := 0
	c.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		evicted++
		if err := c.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ns, "postgresql-0"); err != nil {
			return true, nil, err
		}
		return true, nil, c.Tracker().Add(member("new"))
	})
	if err := waitRolledOut(context.Background(), c, ns, workload{kind: "StatefulSet", name: "postgresql"}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if evicted != 1 {
		t.Errorf("%d evictions, want 1", evicted)
	}
}
