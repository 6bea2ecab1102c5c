//go:build linux

package preflight

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sethvargo/go-envconfig"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/release"
)

// connTestEnv is a harness cluster with the platform namespace, an
// Installation loaded from yaml and the release it names.
func connTestEnv(t *testing.T, yaml string) *Env {
	t.Helper()
	c := testcluster.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := kube.Connect(ctx, kube.Options{Kubeconfig: c.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "onprem.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	in, _, err := config.Load(ctx, config.LoadOptions{Path: path, Lookup: envconfig.MapLookuper(map[string]string{})})
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := set.Get(in.Spec.Version)
	if err != nil {
		t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.Spec.Namespace}}
	if _, err := cl.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return &Env{Installation: in, Release: rel, Releases: set, Cluster: cl, Now: time.Now}
}

// connPutSecret creates or replaces a Secret in the platform namespace.
func connPutSecret(t *testing.T, env *Env, name string, typ corev1.SecretType, data map[string]string) {
	t.Helper()
	ctx := context.Background()
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: env.Installation.Spec.Namespace}, Type: typ, StringData: data}
	secrets := env.Cluster.Client.CoreV1().Secrets(sec.Namespace)
	err := secrets.Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	if _, err := secrets.Create(ctx, sec, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func connDeleteSecret(t *testing.T, env *Env, name string) {
	t.Helper()
	err := env.Cluster.Client.CoreV1().Secrets(env.Installation.Spec.Namespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// connAsNobody is env with a cluster identity that may read nothing.
func connAsNobody(t *testing.T, env *Env) *Env {
	t.Helper()
	cfg := rest.CopyConfig(env.Cluster.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "onprem-test-nobody"}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl := *env.Cluster
	cl.Config, cl.Client = cfg, cs
	out := *env
	out.Cluster = &cl
	return &out
}

// connRunCheck runs one check through the framework, as onprem preflight
// does, and checks the invariants of every outcome.
func connRunCheck(t *testing.T, env *Env, c Check) Outcome {
	t.Helper()
	rep, err := Run(context.Background(), env, []Check{c}, Options{Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	o := rep.Findings[0].Outcome
	if o.Result != Pass && (o.Message == "" || o.Remediation == "") {
		t.Errorf("%s: a %s outcome without message or remediation: %+v", c.ID, o.Result, o)
	}
	t.Logf("%s: %s: %s", c.ID, o.Result, o.Message)
	return o
}

// connExpect checks an outcome's result and that its message (and, for the
// entries after "|", its remediation) contains each string.
func connExpect(t *testing.T, o Outcome, res Result, wants ...string) {
	t.Helper()
	if o.Result != res {
		t.Errorf("result %s, want %s: %s (remediation: %s)", o.Result, res, o.Message, o.Remediation)
	}
	inRemediation := false
	for _, w := range wants {
		if w == "|" {
			inRemediation = true
			continue
		}
		text, where := o.Message, "message"
		if inRemediation {
			text, where = o.Remediation, "remediation"
		}
		if !strings.Contains(text, w) {
			t.Errorf("%s %q lacks %q", where, text, w)
		}
	}
}
