//go:build linux

package managedcluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/kube"
)

func connect(t *testing.T, c *testcluster.Cluster) *kube.Cluster {
	t.Helper()
	cl, err := kube.Connect(context.Background(), kube.Options{Kubeconfig: c.Kubeconfig})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// registered reads the runtime's cluster Secret the way Argo CD does (by
// its JSON names, not this package's types) and returns the client
// configuration it describes and the token.
func registered(t *testing.T, rt *kube.Cluster, ns, name string) (*rest.Config, string) {
	t.Helper()
	s, err := rt.Client.CoreV1().Secrets(ns).Get(context.Background(), SecretName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		BearerToken     string `json:"bearerToken"`
		TLSClientConfig struct {
			Insecure bool   `json:"insecure"`
			CAData   []byte `json:"caData"`
		} `json:"tlsClientConfig"`
	}
	if err := json.Unmarshal(s.Data["config"], &cfg); err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: string(s.Data["server"]), BearerToken: cfg.BearerToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.TLSClientConfig.CAData, Insecure: cfg.TLSClientConfig.Insecure}}, cfg.BearerToken
}

func clientFor(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func listHealth(t *testing.T, rt *kube.Cluster, runtime string) []Status {
	t.Helper()
	st, err := List(context.Background(), rt, Options{Runtime: runtime, RuntimeNamespace: runtime, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitHealth polls List until the runtime's only cluster has health h
// (the API server caches accepted tokens for 10 s).
func waitHealth(t *testing.T, rt *kube.Cluster, runtime, h string) Status {
	t.Helper()
	var last []Status
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = listHealth(t, rt, runtime)
		return len(last) == 1 && last[0].Health == h, nil
	})
	if err != nil {
		t.Fatalf("runtime %s: want one cluster %s, have %+v", runtime, h, last)
	}
	return last[0]
}

var widgets = schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

func createWidgetCRD(t *testing.T, cfg *rest.Config) {
	t.Helper()
	ctx := context.Background()
	ac, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	preserve := true
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets.example.com"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "example.com", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "widgets", Singular: "widget", Kind: "Widget", ListKind: "WidgetList"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: &preserve}}}},
		},
	}
	if _, err := ac.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Served, and in discovery, once a list answers.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dc.Resource(widgets).Namespace("default").List(ctx, metav1.ListOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("CRD widgets.example.com is not served: %v", err)
	}
	w := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w1"}}}
	if _, err := dc.Resource(widgets).Namespace("default").Create(ctx, w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func mustForbid(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s with the registered token: want 403 Forbidden, got %v", what, err)
	}
}

// A cluster registered with a runtime on another cluster, end to end: the
// Secret's token really authenticates there, with least privilege; a
// re-add keeps the token; clashes are refused; a revoked token shows as
// Unauthorized and a re-add heals it; a removed binding shows as
// Forbidden; remove cleans the runtime's side only or both sides, and
// again.
func TestManagedClusterLifecycle(t *testing.T) {
	began := time.Now()
	rtc, extc := testcluster.Start(t), testcluster.Start(t)
	t.Logf("two clusters started in %s", time.Since(began).Round(time.Millisecond))
	rt, ext := connect(t, rtc), connect(t, extc)
	ctx := context.Background()
	for _, ns := range []string{"codefresh", "edge"} {
		if _, err := rt.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A custom kind on the managed cluster: Argo CD may read it, not
	// write it.
	createWidgetCRD(t, extc.RESTConfig)

	var tokens []string // every token seen: none may appear in any output
	var outputs []any
	o := Options{Runtime: "codefresh", RuntimeNamespace: "codefresh", Name: "prod", Timeout: 30 * time.Second}

	// Add.
	res, err := Add(ctx, rt, ext, o)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, res)
	want := Result{Name: "prod", Runtime: "codefresh", Server: ext.Server, ServiceAccount: "onprem-managed/argocd-manager-codefresh",
		ClusterRole: "onprem-argocd-manager-codefresh", Created: true}
	if *res != want {
		t.Errorf("Add = %+v, want %+v", *res, want)
	}

	// The runtime's Secret, as Argo CD reads it.
	s, err := rt.Client.CoreV1().Secrets("codefresh").Get(ctx, "cluster-prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{ArgoSecretType: "cluster", LabelRuntime: "codefresh", LabelManagedCluster: "prod"} {
		if s.Labels[k] != v {
			t.Errorf("cluster Secret label %s = %q, want %q", k, s.Labels[k], v)
		}
	}
	if keys := slices.Sorted(maps.Keys(s.Data)); !slices.Equal(keys, []string{"config", "name", "server"}) || string(s.Data["name"]) != "prod" || string(s.Data["server"]) != ext.Server {
		t.Errorf("cluster Secret data: keys %v, name %q, server %q", keys, s.Data["name"], s.Data["server"])
	}
	var raw map[string]json.RawMessage
	var tlsRaw map[string]any
	if err := json.Unmarshal(s.Data["config"], &raw); err != nil {
		t.Fatal(err)
	}
	if keys := slices.Sorted(maps.Keys(raw)); !slices.Equal(keys, []string{"bearerToken", "tlsClientConfig"}) {
		t.Errorf("config keys %v, want bearerToken and tlsClientConfig", keys)
	}
	if err := json.Unmarshal(raw["tlsClientConfig"], &tlsRaw); err != nil {
		t.Fatal(err)
	}
	extCA := rest.CopyConfig(ext.Config)
	if err := rest.LoadTLSFiles(extCA); err != nil {
		t.Fatal(err)
	}
	caData, _ := tlsRaw["caData"].(string)
	if ca, err := base64.StdEncoding.DecodeString(caData); err != nil || len(ca) == 0 || !bytes.Equal(ca, extCA.CAData) || tlsRaw["insecure"] != false {
		t.Errorf("tlsClientConfig = %v (%v): want the managed cluster's CA, base64, and insecure false", tlsRaw, err)
	}
	asCfg, token := registered(t, rt, "codefresh", "prod")
	tokens = append(tokens, token)
	ts, err := ext.Client.CoreV1().Secrets(Namespace).Get(ctx, "argocd-manager-codefresh-token", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if token == "" || string(ts.Data[corev1.ServiceAccountTokenKey]) != token || ts.Type != corev1.SecretTypeServiceAccountToken {
		t.Errorf("the registered token is not the ServiceAccount's (type %s)", ts.Type)
	}

	// On the managed cluster.
	if ns, err := ext.Client.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); err != nil || ns.Labels["app.kubernetes.io/managed-by"] != "onprem" {
		t.Errorf("namespace %s: %v, %v", Namespace, ns.GetLabels(), err)
	}
	crb, err := ext.Client.RbacV1().ClusterRoleBindings().Get(ctx, "onprem-argocd-manager-codefresh", metav1.GetOptions{})
	if err != nil || crb.RoleRef.Name != "onprem-argocd-manager-codefresh" || len(crb.Subjects) != 1 ||
		crb.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "argocd-manager-codefresh", Namespace: Namespace}) {
		t.Errorf("ClusterRoleBinding: %+v, %v", crb, err)
	}

	// Least privilege, with the registered credentials themselves.
	as := clientFor(t, asCfg)
	if _, err := as.AppsV1().Deployments("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the registered token cannot list Deployments: %v", err)
	}
	if _, err := as.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the registered token cannot list Secrets (Argo CD diffs them): %v", err)
	}
	asDyn, err := dynamic.NewForConfig(asCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := asDyn.Resource(widgets).Namespace("default").Get(ctx, "w1", metav1.GetOptions{}); err != nil {
		t.Errorf("the registered token cannot get a custom resource: %v", err)
	}
	w2 := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": map[string]any{"name": "w2"}}}
	_, err = asDyn.Resource(widgets).Namespace("default").Create(ctx, w2, metav1.CreateOptions{})
	mustForbid(t, "creating a custom resource", err)
	// What a deployment applies.
	if _, err := as.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("the registered token cannot create a Namespace: %v", err)
	}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "apps"}, Spec: appsv1.DeploymentSpec{
		Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}}}}}
	if _, err := as.AppsV1().Deployments("apps").Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Errorf("the registered token cannot create a Deployment: %v", err)
	}
	readCM := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "read-config", Namespace: "apps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}
	if _, err := as.RbacV1().Roles("apps").Create(ctx, readCM, metav1.CreateOptions{}); err != nil {
		t.Errorf("the registered token cannot create a Role within its own permissions: %v", err)
	}
	// Never more than it holds.
	allRole := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "all", Namespace: "apps"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}
	_, err = as.RbacV1().Roles("apps").Create(ctx, allRole, metav1.CreateOptions{})
	mustForbid(t, "creating a Role beyond its permissions (escalate)", err)
	adminBinding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "admin", Namespace: "apps"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "default", Namespace: "apps"}}}
	_, err = as.RbacV1().RoleBindings("apps").Create(ctx, adminBinding, metav1.CreateOptions{})
	mustForbid(t, "binding cluster-admin (bind)", err)
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "escalated"}, Rules: readCM.Rules}
	_, err = as.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{})
	mustForbid(t, "creating a ClusterRole", err)
	_, err = as.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "escalated"},
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "view"}, Subjects: adminBinding.Subjects}, metav1.CreateOptions{})
	mustForbid(t, "creating a ClusterRoleBinding", err)
	node, err := ext.Client.CoreV1().Nodes().Get(ctx, extc.Nodes[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Unschedulable = true
	_, err = as.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
	mustForbid(t, "updating a Node", err)
	impCfg := rest.CopyConfig(asCfg)
	impCfg.Impersonate = rest.ImpersonationConfig{UserName: "admin", Groups: []string{"system:masters"}}
	_, err = clientFor(t, impCfg).CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	mustForbid(t, "impersonating", err)
	for _, attr := range []authorizationv1.ResourceAttributes{
		{Verb: "impersonate", Resource: "users"},
		{Verb: "impersonate", Resource: "serviceaccounts"},
		{Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
		{Verb: "bind", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
		{Verb: "create", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
		{Verb: "patch", Resource: "nodes"},
		{Verb: "get", Resource: "nodes", Subresource: "proxy"},
		{Verb: "get", Resource: "pods", Subresource: "exec"},
		{Verb: "get", Resource: "pods", Subresource: "attach"},
		{Verb: "get", Resource: "pods", Subresource: "portforward"},
		{Verb: "create", Resource: "pods", Subresource: "exec"},
		{Verb: "get", Resource: "services", Subresource: "proxy"},
		{Verb: "create", Resource: "serviceaccounts", Subresource: "token"},
		{Verb: "create", Group: "admissionregistration.k8s.io", Resource: "validatingwebhookconfigurations"},
	} {
		r, err := as.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attr}}, metav1.CreateOptions{})
		if err != nil || r.Status.Allowed {
			t.Errorf("%s %s/%s: allowed (%v)", attr.Verb, attr.Resource, attr.Subresource, err)
		}
	}

	st := listHealth(t, rt, "codefresh")
	outputs = append(outputs, st)
	if len(st) != 1 || st[0] != (Status{Name: "prod", Server: ext.Server, Health: Healthy, Version: "v1.36.3"}) {
		t.Fatalf("List = %+v", st)
	}

	// A second Add converges and keeps the token.
	again, err := Add(ctx, rt, ext, o)
	if err != nil || again.Created {
		t.Fatalf("re-add: %+v, %v", again, err)
	}
	if s2, _ := rt.Client.CoreV1().Secrets("codefresh").Get(ctx, "cluster-prod", metav1.GetOptions{}); !bytes.Equal(s2.Data["config"], s.Data["config"]) {
		t.Error("a re-add changed the registered config (a new token?)")
	}
	if ts2, _ := ext.Client.CoreV1().Secrets(Namespace).Get(ctx, "argocd-manager-codefresh-token", metav1.GetOptions{}); ts2.UID != ts.UID {
		t.Error("a re-add replaced the token Secret")
	}

	// Clashes, refused before anything changes.
	var ce *ConflictError
	_, err = Add(ctx, rt, rt, o)
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), ext.Server) || !strings.Contains(err.Error(), rt.Server) {
		t.Errorf("the name taken for another server: want a ConflictError naming %s and %s, got %v", ext.Server, rt.Server, err)
	}
	second := o
	second.Name = "prod-again"
	if _, err := Add(ctx, rt, ext, second); !errors.As(err, &ce) || !strings.Contains(err.Error(), "already registered with runtime codefresh as prod") {
		t.Errorf("a second name for the same cluster: %v", err)
	}
	if _, err := rt.Client.CoreV1().Secrets("codefresh").Get(ctx, "cluster-prod-again", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a refused Add wrote a Secret: %v", err)
	}
	outputs = append(outputs, err)

	// A second runtime manages the same cluster, under the same name.
	oe := Options{Runtime: "edge", RuntimeNamespace: "edge", Name: "prod", Timeout: 30 * time.Second}
	if _, err := Add(ctx, rt, ext, oe); err != nil {
		t.Fatal(err)
	}
	_, edgeToken := registered(t, rt, "edge", "prod")
	tokens = append(tokens, edgeToken)

	// Revoked: the token Secret deleted on the managed cluster.
	if err := ext.Client.CoreV1().Secrets(Namespace).Delete(ctx, "argocd-manager-codefresh-token", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	revokedAt := time.Now()
	un := waitHealth(t, rt, "codefresh", Unauthorized)
	t.Logf("Unauthorized %s after the revocation (the API server caches accepted tokens for 10 s)", time.Since(revokedAt).Round(time.Millisecond))
	outputs = append(outputs, un)
	if un.Version != "" || !strings.Contains(un.Message, "onprem runtime cluster add prod --runtime codefresh") {
		t.Errorf("Unauthorized status: %+v", un)
	}
	if st := listHealth(t, rt, "edge"); len(st) != 1 || st[0].Health != Healthy {
		t.Errorf("the other runtime's registration suffered: %+v", st)
	}
	// Add heals it with a new token.
	if healed, err := Add(ctx, rt, ext, o); err != nil || healed.Created {
		t.Fatalf("re-add after revocation: %+v, %v", healed, err)
	}
	_, newToken := registered(t, rt, "codefresh", "prod")
	tokens = append(tokens, newToken)
	if newToken == token {
		t.Error("the revoked token was registered again")
	}
	if st := listHealth(t, rt, "codefresh"); len(st) != 1 || st[0].Health != Healthy {
		t.Errorf("after healing: %+v", st)
	}
	// The ServiceAccount deleted (its token with it): Add heals again.
	if err := ext.Client.CoreV1().ServiceAccounts(Namespace).Delete(ctx, "argocd-manager-codefresh", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Add(ctx, rt, ext, o); err != nil {
		t.Fatalf("re-add after the ServiceAccount was deleted: %v", err)
	}
	_, thirdToken := registered(t, rt, "codefresh", "prod")
	tokens = append(tokens, thirdToken)
	if st := listHealth(t, rt, "codefresh"); len(st) != 1 || st[0].Health != Healthy || thirdToken == newToken {
		t.Errorf("after the ServiceAccount was recreated: %+v (new token: %v)", st, thirdToken != newToken)
	}

	// Forbidden: the binding removed.
	if err := ext.Client.RbacV1().ClusterRoleBindings().Delete(ctx, "onprem-argocd-manager-edge", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fb := waitHealth(t, rt, "edge", Forbidden)
	outputs = append(outputs, fb)
	if fb.Version != "v1.36.3" || !strings.Contains(fb.Message, "may not list Deployments") {
		t.Errorf("Forbidden status: %+v", fb)
	}
	if _, err := Add(ctx, rt, ext, oe); err != nil {
		t.Fatal(err)
	}
	if st := listHealth(t, rt, "edge"); len(st) != 1 || st[0].Health != Healthy {
		t.Errorf("edge after re-add: %+v", st)
	}

	// Remove the runtime's side only, then again.
	rm, err := Remove(ctx, rt, nil, o)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, rm)
	if !rm.RuntimeOnly || len(rm.Kept) != 1 || !slices.Equal(rm.Removed, []string{"Secret codefresh/cluster-prod on the runtime's cluster"}) {
		t.Errorf("remove without the managed cluster: %+v", rm)
	}
	if _, err := rt.Client.CoreV1().Secrets("codefresh").Get(ctx, "cluster-prod", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster Secret still there: %v", err)
	}
	if _, err := ext.Client.RbacV1().ClusterRoles().Get(ctx, "onprem-argocd-manager-codefresh", metav1.GetOptions{}); err != nil {
		t.Errorf("the managed side went with the runtime's: %v", err)
	}
	if rm, err := Remove(ctx, rt, nil, o); err != nil || !strings.HasSuffix(rm.Removed[0], "(already gone)") {
		t.Errorf("removing the runtime's side again: %+v, %v", rm, err)
	}
	if st := listHealth(t, rt, "codefresh"); len(st) != 0 {
		t.Errorf("List after remove: %+v", st)
	}

	// Then the managed side: the namespace stays for the other runtime.
	if _, err := Remove(ctx, rt, rt, oe); !errors.As(err, &ce) || !strings.Contains(err.Error(), ext.Server) {
		t.Errorf("removing with the wrong cluster: %v", err)
	}
	rm, err = Remove(ctx, rt, ext, o)
	if err != nil {
		t.Fatal(err)
	}
	outputs = append(outputs, rm)
	if rm.RuntimeOnly || len(rm.Kept) != 1 || !strings.Contains(rm.Kept[0], "ServiceAccount argocd-manager-edge") {
		t.Errorf("remove with the managed cluster: %+v", rm)
	}
	if _, err := ext.Client.RbacV1().ClusterRoles().Get(ctx, "onprem-argocd-manager-codefresh", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole still there: %v", err)
	}
	if _, err := ext.Client.RbacV1().ClusterRoleBindings().Get(ctx, "onprem-argocd-manager-codefresh", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRoleBinding still there: %v", err)
	}
	if _, err := ext.Client.CoreV1().ServiceAccounts(Namespace).Get(ctx, "argocd-manager-codefresh", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ServiceAccount still there: %v", err)
	}
	if _, err := ext.Client.CoreV1().Secrets(Namespace).Get(ctx, "argocd-manager-codefresh-token", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("token Secret still there: %v", err)
	}
	if st := listHealth(t, rt, "edge"); len(st) != 1 || st[0].Health != Healthy {
		t.Errorf("edge after codefresh's removal: %+v", st)
	}

	// The last runtime's removal takes the namespace; again is fine.
	rm, err = Remove(ctx, rt, ext, oe)
	if err != nil || len(rm.Kept) != 0 || rm.Removed[len(rm.Removed)-1] != "namespace onprem-managed on the managed cluster" {
		t.Fatalf("remove edge: %+v, %v", rm, err)
	}
	if ns, err := ext.Client.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{}); err == nil && ns.DeletionTimestamp == nil {
		t.Error("namespace onprem-managed is still there")
	}
	rm, err = Remove(ctx, rt, ext, oe)
	if err != nil {
		t.Fatalf("removing edge again: %v", err)
	}
	for _, r := range rm.Removed {
		if !strings.HasSuffix(r, "(already gone)") && !strings.HasPrefix(r, "namespace") {
			t.Errorf("removing again removed %q", r)
		}
	}

	// No token in any output.
	out := fmt.Sprintf("%+v", outputs)
	js, _ := json.Marshal(outputs)
	for _, tok := range tokens {
		if tok == "" || strings.Contains(out, tok) || bytes.Contains(js, []byte(tok)) {
			t.Errorf("a token is empty or shows in an output")
		}
	}
	t.Logf("lifecycle done in %s", time.Since(began).Round(time.Millisecond))
}
