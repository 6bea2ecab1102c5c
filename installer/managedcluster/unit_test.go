package managedcluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/kube"
)

func fakeCluster(server string, objs ...runtime.Object) (*kube.Cluster, *fake.Clientset) {
	cs := fake.NewClientset(objs...)
	return &kube.Cluster{Client: cs, Server: server, Config: &rest.Config{Host: server}}, cs
}

func TestInputsAreRefused(t *testing.T) {
	ctx := context.Background()
	rt, _ := fakeCluster("https://runtime.example:6443")
	ext, _ := fakeCluster("https://ext.example:6443")
	ok := Options{Runtime: "codefresh", RuntimeNamespace: "codefresh", Name: "prod"}
	with := func(f func(*Options)) Options { o := ok; f(&o); return o }
	for name, o := range map[string]Options{
		"name with capitals and _": with(func(o *Options) { o.Name = "Prod_1" }),
		"empty name":               with(func(o *Options) { o.Name = "" }),
		"name too long":            with(func(o *Options) { o.Name = strings.Repeat("a", 64) }),
		"name with a dot":          with(func(o *Options) { o.Name = "prod.eu" }),
		"no runtime":               with(func(o *Options) { o.Runtime = "" }),
		"no namespace":             with(func(o *Options) { o.RuntimeNamespace = "" }),
		"bad namespace":            with(func(o *Options) { o.RuntimeNamespace = "Code Fresh" }),
	} {
		var ie *InputError
		if _, err := Add(ctx, rt, ext, o); !errors.As(err, &ie) {
			t.Errorf("Add, %s: want an InputError, got %v", name, err)
		}
		if _, err := Remove(ctx, rt, ext, o); !errors.As(err, &ie) {
			t.Errorf("Remove, %s: want an InputError, got %v", name, err)
		}
	}
	var ie *InputError
	if _, err := Add(ctx, nil, ext, ok); !errors.As(err, &ie) {
		t.Errorf("Add without the runtime's cluster: %v", err)
	}
	if _, err := Add(ctx, rt, nil, ok); !errors.As(err, &ie) {
		t.Errorf("Add without the external cluster: %v", err)
	}
	if _, err := Add(ctx, rt, &kube.Cluster{}, ok); !errors.As(err, &ie) {
		t.Errorf("Add with an empty external cluster: %v", err)
	}
	if _, err := List(ctx, nil, ok); !errors.As(err, &ie) {
		t.Errorf("List without the runtime's cluster: %v", err)
	}
	if _, err := Remove(ctx, nil, nil, ok); !errors.As(err, &ie) {
		t.Errorf("Remove without the runtime's cluster: %v", err)
	}
}

// allows evaluates RBAC rules like the API server's authorizer does for
// resource requests.
func allows(rules []rbacv1.PolicyRule, verb, group, resource string) bool {
	match := func(have []string, want string, sub bool) bool {
		for _, h := range have {
			if h == "*" || h == want {
				return true
			}
			if sub && strings.HasPrefix(h, "*/") && strings.HasSuffix(want, h[1:]) {
				return true
			}
		}
		return false
	}
	for _, r := range rules {
		if match(r.Verbs, verb, false) && match(r.APIGroups, group, false) && match(r.Resources, resource, strings.Contains(resource, "/")) {
			return true
		}
	}
	return false
}

func toRules(t *testing.T, get map[string][]string) []rbacv1.PolicyRule {
	t.Helper()
	var out []rbacv1.PolicyRule
	for _, ac := range policyRules(get) {
		out = append(out, rbacv1.PolicyRule{Verbs: ac.Verbs, APIGroups: ac.APIGroups, Resources: ac.Resources})
	}
	return out
}

func res(name string, verbs ...string) metav1.APIResource {
	return metav1.APIResource{Name: name, Verbs: verbs}
}

// The ClusterRole reads everything top-level, streams nothing, writes only
// what a deployment applies and never escalates.
func TestClusterRoleIsLeastPrivilege(t *testing.T) {
	all := []string{"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
	disco := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}
	disco.Resources = []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{
			res("pods", all...), res("pods/exec", "create", "get"), res("pods/attach", "create", "get"),
			res("pods/portforward", "create", "get"), res("pods/proxy", "get", "create"), res("pods/log", "get"),
			res("nodes", all...), res("nodes/proxy", "get", "create"), res("services", all...), res("services/proxy", "get"),
			res("secrets", all...), res("configmaps", all...), res("namespaces", all...), res("serviceaccounts", all...),
			res("serviceaccounts/token", "create"), res("bindings", "create"), res("persistentvolumes", all...),
			res("persistentvolumeclaims", all...), res("events", all...),
		}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{res("deployments", all...), res("deployments/scale", "get", "patch"), res("statefulsets", all...)}},
		{GroupVersion: "rbac.authorization.k8s.io/v1", APIResources: []metav1.APIResource{res("clusterroles", all...), res("clusterrolebindings", all...), res("roles", all...), res("rolebindings", all...)}},
		{GroupVersion: "apiextensions.k8s.io/v1", APIResources: []metav1.APIResource{res("customresourcedefinitions", all...)}},
		{GroupVersion: "admissionregistration.k8s.io/v1", APIResources: []metav1.APIResource{res("validatingwebhookconfigurations", all...)}},
		{GroupVersion: "authentication.k8s.io/v1", APIResources: []metav1.APIResource{res("tokenreviews", "create")}},
		{GroupVersion: "subresources.kubevirt.io/v1", APIResources: []metav1.APIResource{res("virtualmachineinstances/console", "get"), res("virtualmachineinstances/vnc", "get")}},
		{GroupVersion: "example.com/v1", APIResources: []metav1.APIResource{res("widgets", all...)}},
		{GroupVersion: "example.com/v1beta1", APIResources: []metav1.APIResource{res("widgets", all...), res("gadgets", "list")}},
	}
	get, err := gettable(context.Background(), disco)
	if err != nil {
		t.Fatal(err)
	}
	rules := toRules(t, get)

	// Read: list and watch everything; get every top-level kind and pod logs.
	for _, gr := range [][2]string{{"", "secrets"}, {"example.com", "widgets"}, {"not-installed-yet.io", "things"}} {
		for _, v := range []string{"list", "watch"} {
			if !allows(rules, v, gr[0], gr[1]) {
				t.Errorf("%s %s/%s: denied", v, gr[0], gr[1])
			}
		}
	}
	for _, gr := range [][2]string{{"", "nodes"}, {"", "pods"}, {"", "pods/log"}, {"", "events"}, {"apps", "deployments"}, {"example.com", "widgets"},
		{"rbac.authorization.k8s.io", "clusterroles"}, {"apiextensions.k8s.io", "customresourcedefinitions"}} {
		if !allows(rules, "get", gr[0], gr[1]) {
			t.Errorf("get %s/%s: denied", gr[0], gr[1])
		}
	}
	// get on a subresource is not a read.
	for _, gr := range [][2]string{{"", "nodes/proxy"}, {"", "pods/exec"}, {"", "pods/attach"}, {"", "pods/portforward"}, {"", "pods/proxy"},
		{"", "services/proxy"}, {"subresources.kubevirt.io", "virtualmachineinstances/console"}, {"subresources.kubevirt.io", "virtualmachineinstances/vnc"},
		{"example.com", "gadgets"}} {
		if allows(rules, "get", gr[0], gr[1]) {
			t.Errorf("get %s/%s: allowed", gr[0], gr[1])
		}
	}
	// Write: exactly the kinds a deployment applies.
	wantWrite := map[string]bool{}
	for _, w := range writable {
		for _, r := range w.resources {
			wantWrite[w.group+"/"+r] = true
		}
	}
	for _, want := range []string{"/configmaps", "/secrets", "/services", "/serviceaccounts", "/namespaces", "/persistentvolumeclaims",
		"apps/deployments", "apps/statefulsets", "apps/daemonsets", "apps/replicasets", "batch/jobs", "batch/cronjobs",
		"networking.k8s.io/ingresses", "networking.k8s.io/networkpolicies", "autoscaling/horizontalpodautoscalers",
		"policy/poddisruptionbudgets", "rbac.authorization.k8s.io/roles", "rbac.authorization.k8s.io/rolebindings"} {
		g, r, _ := strings.Cut(want, "/")
		for _, v := range []string{"create", "update", "patch", "delete"} {
			if !allows(rules, v, g, r) {
				t.Errorf("%s %s: denied", v, want)
			}
		}
	}
	for _, gr := range [][2]string{{"", "nodes"}, {"", "persistentvolumes"}, {"apiextensions.k8s.io", "customresourcedefinitions"},
		{"rbac.authorization.k8s.io", "clusterroles"}, {"rbac.authorization.k8s.io", "clusterrolebindings"},
		{"admissionregistration.k8s.io", "validatingwebhookconfigurations"}, {"example.com", "widgets"},
		{"", "serviceaccounts/token"}, {"", "pods/exec"}, {"", "nodes/proxy"}, {"apps", "deployments/scale"}} {
		for _, v := range []string{"create", "update", "patch", "delete"} {
			if allows(rules, v, gr[0], gr[1]) {
				t.Errorf("%s %s/%s: allowed", v, gr[0], gr[1])
			}
		}
	}
	// Never a wildcard verb, never escalate, bind or impersonate;
	// wildcard resources only for list and watch.
	for _, r := range rules {
		for _, v := range r.Verbs {
			if !slices.Contains([]string{"get", "list", "watch", "create", "update", "patch", "delete"}, v) {
				t.Errorf("rule %+v has verb %q", r, v)
			}
		}
		if slices.ContainsFunc(r.Resources, func(s string) bool { return strings.Contains(s, "*") }) && !slices.Equal(r.Verbs, []string{"list", "watch"}) {
			t.Errorf("rule %+v: a wildcard resource beyond list and watch", r)
		}
		for _, res := range r.Resources {
			if strings.Contains(res, "/") && res != "pods/log" {
				t.Errorf("rule %+v grants the subresource %s", r, res)
			}
		}
	}
	for _, v := range []string{"escalate", "bind", "impersonate"} {
		for _, gr := range [][2]string{{"rbac.authorization.k8s.io", "clusterroles"}, {"rbac.authorization.k8s.io", "roles"}, {"", "users"}, {"", "serviceaccounts"}, {"", "groups"}} {
			if allows(rules, v, gr[0], gr[1]) {
				t.Errorf("%s %s/%s: allowed", v, gr[0], gr[1])
			}
		}
	}
	// The same discovery gives the same role (a re-add applies no change).
	if again := toRules(t, get); fmt.Sprint(again) != fmt.Sprint(rules) {
		t.Errorf("the rules are not deterministic:\n%v\n%v", rules, again)
	}
}

// apiServer is a TLS server answering /version and
// SelfSubjectAccessReviews like a Kubernetes API server, for the bearer
// token it accepts.
type apiServer struct {
	*httptest.Server
	ca      []byte
	token   atomic.Value // string: the token it accepts
	allowed bool
	slow    bool
}

func newAPIServer(t *testing.T, token string, allowed, slow bool) *apiServer {
	t.Helper()
	s := &apiServer{allowed: allowed, slow: slow}
	s.token.Store(token)
	release := make(chan struct{})
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.slow {
			select {
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") != "Bearer "+s.token.Load().(string) {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}`)
			return
		}
		switch {
		case r.URL.Path == "/version":
			fmt.Fprint(w, `{"major":"1","minor":"36","gitVersion":"v1.36.3"}`)
		case r.Method == http.MethodPost && r.URL.Path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
			fmt.Fprintf(w, `{"apiVersion":"authorization.k8s.io/v1","kind":"SelfSubjectAccessReview","status":{"allowed":%t}}`, s.allowed)
		default:
			http.NotFound(w, r)
		}
	}))
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused TLS handshakes are expected
	s.StartTLS()
	t.Cleanup(s.Close)
	t.Cleanup(func() { close(release) })
	s.ca = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.Certificate().Raw})
	return s
}

// otherCA is a CA that did not sign the test servers' certificate (every
// httptest server shares one).
func otherCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "other-ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func clusterSecret(runtime, name, server string, config []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName(name), Namespace: runtime,
			Labels: map[string]string{ArgoSecretType: "cluster", LabelRuntime: runtime, LabelManagedCluster: name}},
		Data: map[string][]byte{"name": []byte(name), "server": []byte(server), "config": config},
	}
}

func configJSON(t *testing.T, token string, ca []byte) []byte {
	t.Helper()
	b, err := json.Marshal(clusterConfig{BearerToken: token, TLSClientConfig: tlsClientConfig{CAData: ca}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// List checks every cluster with its own credentials, in parallel, each
// bounded by the timeout, and tells the failures apart.
func TestListHealth(t *testing.T) {
	ok := newAPIServer(t, "tok-ok", true, false)
	revoked := newAPIServer(t, "tok-new", true, false)
	denied := newAPIServer(t, "tok-denied", false, false)
	slow1 := newAPIServer(t, "tok-slow", true, true)
	slow2 := newAPIServer(t, "tok-slow", true, true)
	rt, _ := fakeCluster("https://runtime.example:6443",
		clusterSecret("codefresh", "a-ok", ok.URL, configJSON(t, "tok-ok", ok.ca)),
		clusterSecret("codefresh", "b-revoked", revoked.URL, configJSON(t, "tok-old", revoked.ca)),
		clusterSecret("codefresh", "c-denied", denied.URL, configJSON(t, "tok-denied", denied.ca)),
		clusterSecret("codefresh", "d-slow", slow1.URL, configJSON(t, "tok-slow", slow1.ca)),
		clusterSecret("codefresh", "e-slow", slow2.URL, configJSON(t, "tok-slow", slow2.ca)),
		clusterSecret("codefresh", "f-wrong-ca", ok.URL, configJSON(t, "tok-ok", otherCA(t))),
		clusterSecret("codefresh", "g-broken", ok.URL, []byte(`{"bearerToken": tok-broken`)),
		clusterSecret("codefresh", "h-down", "https://127.0.0.1:1", configJSON(t, "tok-down", ok.ca)),
		clusterSecret("edge", "other-runtime", ok.URL, configJSON(t, "tok-ok", ok.ca)),
	)
	timeout := 1500 * time.Millisecond
	began := time.Now()
	st, err := List(context.Background(), rt, Options{Runtime: "codefresh", RuntimeNamespace: "codefresh", Timeout: timeout})
	took := time.Since(began)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a-ok": Healthy, "b-revoked": Unauthorized, "c-denied": Forbidden, "d-slow": Unreachable,
		"e-slow": Unreachable, "f-wrong-ca": Unreachable, "g-broken": Unauthorized, "h-down": Unreachable}
	var names []string
	for _, s := range st {
		names = append(names, s.Name)
		if s.Health != want[s.Name] {
			t.Errorf("%s: health %s (%s), want %s", s.Name, s.Health, s.Message, want[s.Name])
		}
		if (s.Health == Healthy) != (s.Message == "") {
			t.Errorf("%s: %s with message %q", s.Name, s.Health, s.Message)
		}
		if strings.Contains(s.Message, "tok-") {
			t.Errorf("%s: the message shows the token: %s", s.Name, s.Message)
		}
	}
	if !slices.Equal(names, []string{"a-ok", "b-revoked", "c-denied", "d-slow", "e-slow", "f-wrong-ca", "g-broken", "h-down"}) {
		t.Errorf("List = %v, want the runtime's clusters sorted", names)
	}
	byName := map[string]Status{}
	for _, s := range st {
		byName[s.Name] = s
		t.Logf("%-13s %-12s %s", s.Name, s.Health, s.Message)
	}
	if s := byName["a-ok"]; s.Version != "v1.36.3" || s.Server != ok.URL {
		t.Errorf("a-ok: %+v", s)
	}
	if s := byName["b-revoked"]; !strings.Contains(s.Message, "onprem runtime cluster add b-revoked --runtime codefresh") {
		t.Errorf("b-revoked: the message does not say how to fix it: %s", s.Message)
	}
	if s := byName["c-denied"]; s.Version != "v1.36.3" || !strings.Contains(s.Message, "may not list Deployments") {
		t.Errorf("c-denied: %+v", s)
	}
	if s := byName["d-slow"]; !strings.Contains(s.Message, "did not answer within 1.5s") {
		t.Errorf("d-slow: %+v", s)
	}
	if s := byName["f-wrong-ca"]; !strings.Contains(s.Message, "TLS") {
		t.Errorf("f-wrong-ca: %+v", s)
	}
	// Two clusters that never answer, checked one after the other, would
	// take twice the timeout.
	if took >= 2*timeout {
		t.Errorf("List took %s with a timeout of %s: the checks are not parallel or not bounded", took, timeout)
	}
}

// tokenController makes the fake clientset fill a token Secret the way
// kube-controller-manager does, when it is read.
func tokenController(cs *fake.Clientset, token string, ca []byte) {
	cs.PrependReactor("get", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		g := a.(k8stesting.GetAction)
		obj, err := cs.Tracker().Get(g.GetResource(), g.GetNamespace(), g.GetName())
		if err != nil {
			return true, nil, err
		}
		s := obj.(*corev1.Secret).DeepCopy()
		if s.Type == corev1.SecretTypeServiceAccountToken && len(s.Data[corev1.ServiceAccountTokenKey]) == 0 {
			s.Data = map[string][]byte{corev1.ServiceAccountTokenKey: []byte(token), corev1.ServiceAccountRootCAKey: ca, "namespace": []byte(s.Namespace)}
			if err := cs.Tracker().Update(g.GetResource(), s, s.Namespace); err != nil {
				return true, nil, err
			}
		}
		return true, s, nil
	})
}

func registeredConfig(t *testing.T, rt *kube.Cluster, ns, name string) clusterConfig {
	t.Helper()
	s, err := rt.Client.CoreV1().Secrets(ns).Get(context.Background(), SecretName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cc clusterConfig
	if err := json.Unmarshal(s.Data["config"], &cc); err != nil {
		t.Fatal(err)
	}
	return cc
}

// Add registers the CA that verifies the server and checks the
// credentials before it writes the runtime's Secret.
func TestAddChecksTheCredentials(t *testing.T) {
	ctx := context.Background()
	o := Options{Runtime: "codefresh", RuntimeNamespace: "codefresh", Name: "prod", Timeout: 2 * time.Second}

	t.Run("the kubeconfig's CA", func(t *testing.T) {
		srv := newAPIServer(t, "tok-1", true, false)
		rt, _ := fakeCluster("https://runtime.example:6443")
		ext, cs := fakeCluster(srv.URL)
		ext.Config.CAData = srv.ca
		tokenController(cs, "tok-1", otherCA(t)) // ca.crt is not what verifies this URL
		res, err := Add(ctx, rt, ext, o)
		if err != nil || !res.Created {
			t.Fatalf("Add = %+v, %v", res, err)
		}
		cc := registeredConfig(t, rt, "codefresh", "prod")
		if cc.BearerToken != "tok-1" || string(cc.TLSClientConfig.CAData) != string(srv.ca) || cc.TLSClientConfig.Insecure {
			t.Errorf("registered TLS config: caData of the kubeconfig %v, insecure %v", string(cc.TLSClientConfig.CAData) == string(srv.ca), cc.TLSClientConfig.Insecure)
		}
		if b, _ := json.Marshal(res); strings.Contains(string(b), "tok-1") {
			t.Error("the result shows the token")
		}
	})

	t.Run("an insecure kubeconfig gets the cluster's CA", func(t *testing.T) {
		srv := newAPIServer(t, "tok-2", true, false)
		rt, _ := fakeCluster("https://runtime.example:6443")
		ext, cs := fakeCluster(srv.URL)
		ext.Config.Insecure = true
		tokenController(cs, "tok-2", srv.ca)
		if _, err := Add(ctx, rt, ext, o); err != nil {
			t.Fatal(err)
		}
		cc := registeredConfig(t, rt, "codefresh", "prod")
		if string(cc.TLSClientConfig.CAData) != string(srv.ca) || cc.TLSClientConfig.Insecure {
			t.Errorf("registered TLS config: the cluster's CA %v, insecure %v", string(cc.TLSClientConfig.CAData) == string(srv.ca), cc.TLSClientConfig.Insecure)
		}
	})

	t.Run("a token the server rejects", func(t *testing.T) {
		srv := newAPIServer(t, "someone-else", true, false)
		rt, _ := fakeCluster("https://runtime.example:6443")
		ext, cs := fakeCluster(srv.URL)
		ext.Config.CAData = srv.ca
		tokenController(cs, "tok-3", srv.ca)
		_, err := Add(ctx, rt, ext, o)
		if err == nil || !strings.Contains(err.Error(), "do not work") || !strings.Contains(err.Error(), "Unauthorized") || strings.Contains(err.Error(), "tok-3") {
			t.Errorf("Add with a rejected token: %v", err)
		}
		if _, err := rt.Client.CoreV1().Secrets("codefresh").Get(ctx, "cluster-prod", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the runtime's Secret was written: %v", err)
		}
	})

	t.Run("a CA that does not verify the server", func(t *testing.T) {
		srv := newAPIServer(t, "tok-4", true, false)
		wrong := otherCA(t)
		rt, _ := fakeCluster("https://runtime.example:6443")
		ext, cs := fakeCluster(srv.URL)
		ext.Config.CAData = wrong
		tokenController(cs, "tok-4", wrong)
		began := time.Now()
		_, err := Add(ctx, rt, ext, o)
		if err == nil || !strings.Contains(err.Error(), "TLS") {
			t.Errorf("Add with the wrong CA: %v", err)
		}
		if time.Since(began) > time.Second {
			t.Errorf("a TLS failure was retried for %s", time.Since(began))
		}
	})
}

// Without a token controller the wait ends at the timeout, with an error
// that says what to check, and the runtime's side is not written.
func TestAddTokenNeverFilled(t *testing.T) {
	ctx := context.Background()
	rt, _ := fakeCluster("https://runtime.example:6443")
	ext, cs := fakeCluster("https://ext.example:6443")
	began := time.Now()
	_, err := Add(ctx, rt, ext, Options{Runtime: "codefresh", RuntimeNamespace: "codefresh", Name: "prod", Timeout: 500 * time.Millisecond})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did not fill it within 500ms") ||
		!strings.Contains(err.Error(), "onprem-managed/argocd-manager-codefresh-token") || !strings.Contains(err.Error(), "kube-controller-manager") {
		t.Errorf("Add without a token controller: %v", err)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("the wait took %s with a timeout of 500ms", took)
	}
	if _, err := rt.Client.CoreV1().Secrets("codefresh").Get(ctx, "cluster-prod", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the runtime's Secret was written: %v", err)
	}
	s, err := cs.CoreV1().Secrets(Namespace).Get(ctx, "argocd-manager-codefresh-token", metav1.GetOptions{})
	if err != nil || s.Type != corev1.SecretTypeServiceAccountToken || s.Annotations[corev1.ServiceAccountNameKey] != "argocd-manager-codefresh" {
		t.Errorf("token Secret: %+v, %v", s, err)
	}
}

// A token Secret left from a deleted ServiceAccount (another UID) is not
// registered: it is replaced by one for the current ServiceAccount.
func TestAddReplacesAStaleToken(t *testing.T) {
	ctx := context.Background()
	srv := newAPIServer(t, "tok-new", true, false)
	stale := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "argocd-manager-codefresh-token", Namespace: Namespace, UID: "secret-1",
			Annotations: map[string]string{corev1.ServiceAccountNameKey: "argocd-manager-codefresh", corev1.ServiceAccountUIDKey: "deleted-sa"}},
		Type: corev1.SecretTypeServiceAccountToken,
		Data: map[string][]byte{corev1.ServiceAccountTokenKey: []byte("tok-stale"), corev1.ServiceAccountRootCAKey: srv.ca},
	}
	rt, _ := fakeCluster("https://runtime.example:6443")
	ext, cs := fakeCluster(srv.URL, stale)
	ext.Config.CAData = srv.ca
	tokenController(cs, "tok-new", srv.ca)
	if _, err := Add(ctx, rt, ext, Options{Runtime: "codefresh", RuntimeNamespace: "codefresh", Name: "prod", Timeout: 5 * time.Second}); err != nil {
		t.Fatal(err)
	}
	if cc := registeredConfig(t, rt, "codefresh", "prod"); cc.BearerToken != "tok-new" {
		t.Error("the stale token was registered")
	}
}
