package preflight

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

// loadEnv reads an onprem.yaml whose spec is body (indented by two
// spaces, version and domain included), renders it and returns the Env
// without a cluster.
func clusterLoadEnv(t testing.TB, body string) *Env {
	t.Helper()
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "onprem.yaml")
	if err := os.WriteFile(path, []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\nspec:\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
	var components []string
	for _, r := range set.All() {
		components = append(components, r.ComponentNames()...)
	}
	in, _, err := config.Load(context.Background(), config.LoadOptions{Path: path, Lookup: envconfig.MapLookuper(map[string]string{}),
		Validate: config.ValidateOptions{KnownVersions: set.Versions(), KnownComponents: components}})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	rel, err := set.Get(in.Spec.Version)
	if err != nil {
		t.Fatal(err)
	}
	res, err := render.Render(context.Background(), render.Options{Installation: in, Release: rel})
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return &Env{Installation: in, Release: rel, Releases: set, Rendered: res, Now: time.Now}
}

const clusterBaseSpec = "  version: 2.8.0\n  domain: ci.example.com\n"

// connect connects to a harness cluster through its kubeconfig, as onprem
// does.
func clusterConnect(t testing.TB, kubeconfig string) *kube.Cluster {
	t.Helper()
	kc, err := kube.Connect(context.Background(), kube.Options{Kubeconfig: kubeconfig})
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	return kc
}

// clusterEnv returns a function making Envs for configurations against
// the cluster c (one connection, shared).
func clusterEnv(t testing.TB, c *testcluster.Cluster) func(body string) *Env {
	kc := clusterConnect(t, c.Kubeconfig)
	return func(body string) *Env {
		env := clusterLoadEnv(t, body)
		env.Cluster = kc
		return env
	}
}

// run runs one check directly (not through Run: its result is not
// downgraded by severity, so tests see what the check itself said) and
// checks every non-pass outcome has a message and a remediation.
func clusterRun(t testing.TB, c Check, env *Env) Outcome {
	t.Helper()
	out := runOne(context.Background(), env, c, 20*time.Second)
	if out.Message == "" {
		t.Errorf("%s: empty message: %+v", c.ID, out)
	}
	if out.Result != Pass && out.Remediation == "" {
		t.Errorf("%s: %s without remediation: %s", c.ID, out.Result, out.Message)
	}
	t.Logf("%s: %s: %s | %s", c.ID, out.Result, out.Message, out.Remediation)
	return out
}

func clusterExpect(t testing.TB, out Outcome, r Result, contains ...string) {
	t.Helper()
	if out.Result != r {
		t.Errorf("result %s, want %s: %s", out.Result, r, out.Message)
	}
	text := out.Message + "\n" + out.Remediation + "\n" + strings.Join(out.Details, "\n")
	for _, s := range contains {
		if !strings.Contains(text, s) {
			t.Errorf("outcome does not mention %q:\n%s", s, text)
		}
	}
}

func clusterEnsureNamespace(t testing.TB, c *testcluster.Cluster, ns string) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
}

// serviceAccountKubeconfig writes a kubeconfig for a ServiceAccount of
// namespace ns, with a token from the TokenRequest API.
func serviceAccountKubeconfig(t testing.TB, c *testcluster.Cluster, ns, name string) string {
	t.Helper()
	ctx := context.Background()
	clusterEnsureNamespace(t, c, ns)
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secs := int64(3600)
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := c.RESTConfig.CAData
	if len(ca) == 0 && c.RESTConfig.CAFile != "" {
		if ca, err = os.ReadFile(c.RESTConfig.CAFile); err != nil {
			t.Fatal(err)
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: c.RESTConfig.Host, CertificateAuthorityData: ca}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["sa"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "sa"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// certPEM makes a self-signed certificate for dnsNames valid until
// notAfter, PEM encoded.
func clusterCertPEM(t testing.TB, notAfter time.Time, dnsNames ...string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: dnsNames[0]},
		DNSNames:     dnsNames,
		NotBefore:    notAfter.Add(-365 * 24 * time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd})...)
}
