package managedcluster

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// asRegistered is a client with the credentials the runtime's Secret holds.
func asRegistered(t *testing.T, rt *kube.Cluster, ns, name string) kubernetes.Interface {
	t.Helper()
	s, err := rt.Client.CoreV1().Secrets(ns).Get(context.Background(), SecretName(name), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg clusterConfig
	if err := json.Unmarshal(s.Data["config"], &cfg); err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(&rest.Config{Host: string(s.Data["server"]), BearerToken: cfg.BearerToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.TLSClientConfig.CAData}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A cluster registered with a runtime on another cluster: the Secret's
// token really authenticates there, with least privilege; a re-add keeps
// the token; a name clash is refused; a revoked token shows as
// Unauthorized; remove cleans both sides.
func TestManagedClusterLifecycle(t *testing.T) {
	rtc, extc := testcluster.Start(t), testcluster.Start(t)
	rt, ext := connect(t, rtc), connect(t, extc)
	ctx := context.Background()
	const ns = "codefresh"
	if _, err := rt.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := Options{Runtime: "codefresh", RuntimeNamespace: ns, Name: "prod", Timeout: time.Minute}

	res, err := Add(ctx, rt, ext, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Created || res.Server != ext.Server || res.ClusterRole != "onprem-argocd-manager-codefresh" {
		t.Errorf("add: %+v", res)
	}
	s, err := rt.Client.CoreV1().Secrets(ns).Get(ctx, "cluster-prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Labels[ArgoSecretType] != "cluster" || string(s.Data["name"]) != "prod" || string(s.Data["server"]) != ext.Server {
		t.Errorf("cluster Secret: labels %v name %q server %q", s.Labels, s.Data["name"], s.Data["server"])
	}
	firstConfig := string(s.Data["config"])

	// Least privilege, with the registered credentials themselves.
	as := asRegistered(t, rt, ns, "prod")
	if _, err := as.AppsV1().Deployments("").List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("the registered token cannot list Deployments: %v", err)
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "escalated"}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{"*"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}
	if _, err := as.RbacV1().ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the registered token may create a ClusterRole: %v", err)
	}
	for _, attr := range []authorizationv1.ResourceAttributes{
		{Verb: "impersonate", Resource: "users"},
		{Verb: "escalate", Group: "rbac.authorization.k8s.io", Resource: "clusterroles"},
		{Verb: "create", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
		{Verb: "update", Resource: "nodes"},
	} {
		r, err := as.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attr}}, metav1.CreateOptions{})
		if err != nil || r.Status.Allowed {
			t.Errorf("%s %s: allowed (%v)", attr.Verb, attr.Resource, err)
		}
	}

	list, err := List(ctx, rt, Options{Runtime: "codefresh", RuntimeNamespace: ns, Timeout: 10 * time.Second})
	if err != nil || len(list) != 1 || list[0].Health != Healthy || list[0].Version == "" {
		t.Fatalf("list: %+v, %v", list, err)
	}

	// Converged re-add: same token.
	again, err := Add(ctx, rt, ext, o)
	if err != nil || again.Created {
		t.Fatalf("re-add: %+v, %v", again, err)
	}
	if s, _ := rt.Client.CoreV1().Secrets(ns).Get(ctx, "cluster-prod", metav1.GetOptions{}); string(s.Data["config"]) != firstConfig {
		t.Error("a re-add changed the token")
	}
	// The name taken for another server.
	var ce *ConflictError
	if _, err := Add(ctx, rt, rt, o); !errors.As(err, &ce) || !strings.Contains(err.Error(), "already registered") {
		t.Errorf("name clash: %v", err)
	}
	// The same server under a second name.
	second := o
	second.Name = "prod-again"
	if _, err := Add(ctx, rt, ext, second); !errors.As(err, &ce) || !strings.Contains(err.Error(), "already registered with runtime codefresh as prod") {
		t.Errorf("a second name for the same cluster: %v", err)
	}
	var ie *InputError
	if _, err := Add(ctx, rt, ext, Options{Runtime: "codefresh", RuntimeNamespace: ns, Name: "Prod_1"}); !errors.As(err, &ie) {
		t.Errorf("bad name: %v", err)
	}

	// Revoked: the ServiceAccount is gone.
	if err := ext.Client.CoreV1().ServiceAccounts(Namespace).Delete(ctx, "argocd-manager-codefresh", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, err = List(ctx, rt, Options{Runtime: "codefresh", RuntimeNamespace: ns, Timeout: 10 * time.Second})
		if err == nil && len(list) == 1 && list[0].Health == Unauthorized {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after revoking: %+v, %v", list, err)
		}
		time.Sleep(500 * time.Millisecond)
	}

	// Remove, runtime side only, then both sides.
	rm, err := Remove(ctx, rt, nil, o)
	if err != nil || len(rm.Kept) == 0 {
		t.Fatalf("remove without the external cluster: %+v, %v", rm, err)
	}
	if _, err := rt.Client.CoreV1().Secrets(ns).Get(ctx, "cluster-prod", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("cluster Secret still there: %v", err)
	}
	if _, err := ext.Client.RbacV1().ClusterRoles().Get(ctx, "onprem-argocd-manager-codefresh", metav1.GetOptions{}); err != nil {
		t.Errorf("the external side went with the runtime's: %v", err)
	}
	if _, err := Remove(ctx, rt, ext, o); err != nil {
		t.Fatal(err)
	}
	if _, err := ext.Client.RbacV1().ClusterRoles().Get(ctx, "onprem-argocd-manager-codefresh", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRole still there: %v", err)
	}
	if _, err := ext.Client.RbacV1().ClusterRoleBindings().Get(ctx, "onprem-argocd-manager-codefresh", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ClusterRoleBinding still there: %v", err)
	}
	if _, err := Remove(ctx, rt, nil, o); !errors.As(err, &ie) {
		t.Errorf("removing it again: %v", err)
	}
}
