package preflight

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
)

func TestCertProblem(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		chain  []byte
		want   Result
		saying string
	}{
		{"exact", clusterCertPEM(t, now.Add(90*24*time.Hour), "ci.example.com"), Pass, "covers ci.example.com"},
		{"wildcard", clusterCertPEM(t, now.Add(90*24*time.Hour), "*.example.com"), Pass, "covers"},
		{"other domain", clusterCertPEM(t, now.Add(90*24*time.Hour), "other.example.org"), Fail, "does not cover ci.example.com (it is for other.example.org)"},
		{"wildcard one level only", clusterCertPEM(t, now.Add(90*24*time.Hour), "*.ci.example.com.invalid"), Fail, "does not cover"},
		{"expiring", clusterCertPEM(t, now.Add(10*24*time.Hour+time.Hour), "ci.example.com"), Warn, "expires in 10 days"},
		{"expiring within a week", clusterCertPEM(t, now.Add(5*24*time.Hour+time.Hour), "ci.example.com"), Fail, "expires in 5 days, on "},
		{"expired", clusterCertPEM(t, now.Add(-time.Hour), "ci.example.com"), Fail, "expired on"},
		{"garbage", []byte("nope"), Fail, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, msg := certProblem(tc.chain, "ci.example.com", now)
			if r != tc.want || !strings.Contains(msg, tc.saying) {
				t.Errorf("%s: %s, want %s with %q", r, msg, tc.want, tc.saying)
			}
		})
	}
}

func TestIngress(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	envFor := clusterEnv(t, c)
	ctx := context.Background()
	ns := "onprem"
	clusterEnsureNamespace(t, c, ns)
	now := time.Now()

	t.Run("fresh install", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(clusterBaseSpec)), Pass,
			"IngressClass onprem will be created by the ingress component", "self-signed certificate for ci.example.com will be generated", "valid DNS name")
	})

	existing := clusterBaseSpec + "  ingress:\n    mode: existing\n    className: nginx\n"
	t.Run("existing class missing", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(existing)), Fail,
			"IngressClass nginx (spec.ingress.className, mode existing) does not exist", "no IngressClass", "spec.ingress.mode: install")
	})
	for _, ic := range []*networkingv1.IngressClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "nginx"}, Spec: networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "onprem", Annotations: map[string]string{helmReleaseNameAnnotation: "traefik", helmReleaseNamespaceAnnotation: "kube-system"}},
			Spec: networkingv1.IngressClassSpec{Controller: "traefik.io/ingress-controller"}},
	} {
		if _, err := c.Client.NetworkingV1().IngressClasses().Create(ctx, ic, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("existing class present", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(existing)), Pass, "IngressClass nginx exists (controller k8s.io/ingress-nginx)")
	})
	t.Run("our class name taken by another release", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(clusterBaseSpec)), Fail,
			"IngressClass onprem already exists", "Helm release traefik in namespace kube-system", "spec.ingress.className")
	})
	t.Run("our own class from an earlier install", func(t *testing.T) {
		ic, _ := c.Client.NetworkingV1().IngressClasses().Get(ctx, "onprem", metav1.GetOptions{})
		ic.Annotations = map[string]string{helmReleaseNameAnnotation: "ingress", helmReleaseNamespaceAnnotation: ns}
		if _, err := c.Client.NetworkingV1().IngressClasses().Update(ctx, ic, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(clusterBaseSpec)), Pass, "belongs to this installation's ingress release")
	})

	nodePort := clusterBaseSpec + "  ingress:\n    serviceType: NodePort\n  components:\n    ingress:\n      values:\n        nodePorts: {http: 30080, https: 30443}\n"
	t.Run("node ports free", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(nodePort)), Pass, "node ports 30080, 30443 are free")
	})
	if _, err := c.Client.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "other-web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "x"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30443}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("node port taken", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(nodePort)), Fail,
			"node port 30443 (for Service onprem/ingress-controller) is used by Service default/other-web", "nodePorts")
	})

	secretMode := clusterBaseSpec + "  tls:\n    mode: secret\n    secretName: platform-cert\n"
	putTLS := func(name string, typ corev1.SecretType, crt []byte) {
		t.Helper()
		_ = c.Client.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{})
		data := map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: []byte("k")}
		if typ != corev1.SecretTypeTLS {
			data = map[string][]byte{"x": crt}
		}
		if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}, Type: typ, Data: data}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("tls secret missing", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(secretMode)), Fail, "TLS Secret onprem/platform-cert (spec.tls.secretName) does not exist", "kubectl -n onprem create secret tls platform-cert")
	})
	t.Run("tls secret of another type", func(t *testing.T) {
		putTLS("platform-cert", corev1.SecretTypeOpaque, []byte("x"))
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(secretMode)), Fail, "is of type Opaque, not kubernetes.io/tls")
	})
	t.Run("tls certificate for another domain", func(t *testing.T) {
		putTLS("platform-cert", corev1.SecretTypeTLS, clusterCertPEM(t, now.Add(90*24*time.Hour), "www.example.org"))
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(secretMode)), Fail, "does not cover ci.example.com (it is for www.example.org)", "replace it")
	})
	t.Run("tls certificate expiring in 10 days", func(t *testing.T) {
		putTLS("platform-cert", corev1.SecretTypeTLS, clusterCertPEM(t, now.Add(10*24*time.Hour+time.Hour), "*.example.com"))
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(secretMode)), Warn, "expires in 10 days")
	})
	t.Run("tls certificate expired", func(t *testing.T) {
		putTLS("platform-cert", corev1.SecretTypeTLS, clusterCertPEM(t, now.Add(-24*time.Hour), "ci.example.com"))
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(secretMode)), Fail, "expired on")
	})
	t.Run("tls certificate good, its CA expiring within a week", func(t *testing.T) {
		putTLS("platform-cert", corev1.SecretTypeTLS, clusterCertPEM(t, now.Add(200*24*time.Hour), "ci.example.com"))
		sec, err := c.Client.CoreV1().Secrets(ns).Get(ctx, "platform-cert", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sec.Data["ca.crt"] = clusterCertPEM(t, now.Add(3*24*time.Hour+time.Hour), "onprem CA")
		if _, err := c.Client.CoreV1().Secrets(ns).Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(secretMode)), Fail, "the CA certificate CN=onprem CA in Secret onprem/platform-cert (ca.crt) expires in 3 days", "give clients the new CA")
	})
	t.Run("tls certificate good", func(t *testing.T) {
		putTLS("platform-cert", corev1.SecretTypeTLS, clusterCertPEM(t, now.Add(200*24*time.Hour), "ci.example.com"))
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(secretMode)), Pass, "covers ci.example.com and is valid until")
	})
	t.Run("self-signed certificate of an old domain", func(t *testing.T) {
		putTLS("onprem-tls", corev1.SecretTypeTLS, clusterCertPEM(t, now.Add(200*24*time.Hour), "old.example.com"))
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(clusterBaseSpec)), Warn, "domain changed", "kubectl -n onprem delete secret onprem-tls")
		putTLS("onprem-tls", corev1.SecretTypeTLS, clusterCertPEM(t, now.Add(200*24*time.Hour), "ci.example.com"))
		clusterExpect(t, clusterRun(t, ingressCheck(), envFor(clusterBaseSpec)), Pass, "Secret onprem/onprem-tls: the certificate covers ci.example.com")
	})
}
