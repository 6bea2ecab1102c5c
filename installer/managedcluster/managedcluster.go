// Package managedcluster registers external clusters with a GitOps runtime:
// a ServiceAccount with least privilege on the external cluster, and an
// Argo CD cluster Secret in the runtime's namespace that holds the server,
// the CA and that ServiceAccount's token.
//
// # What the ServiceAccount may do
//
// The ClusterRole onprem-argocd-manager-RUNTIME lets Argo CD read every
// kind (it watches the cluster to diff and to report health) and write
// only the kinds a GitOps deployment applies: workloads, Services,
// ConfigMaps, Secrets, Ingresses, Jobs, ServiceAccounts, namespaced Roles
// and RoleBindings, PersistentVolumeClaims, autoscalers, disruption
// budgets, NetworkPolicies and Namespaces. It may not escalate, bind or
// impersonate, write nodes, CustomResourceDefinitions, ClusterRoles,
// ClusterRoleBindings or admission webhooks: an application that needs
// those has them installed by the cluster's operators, not by Git. Roles
// and RoleBindings it writes cannot grant more than it holds (the API
// server's escalation check), since escalate and bind are not granted.
//
// The token is a kubernetes.io/service-account-token Secret, filled by the
// cluster's token controller; it is created once and kept (Add converges
// without regenerating it) and is never printed, logged or returned.
package managedcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"onprem.dev/onprem/installer/kube"
)

// Names on the external cluster and labels on both sides.
const (
	// Namespace holds the ServiceAccounts of every runtime that manages
	// the cluster.
	Namespace = "onprem-managed"
	// DefaultFieldManager applies what this package writes.
	DefaultFieldManager = "onprem-runtime"
	// LabelRuntime and LabelManagedCluster mark the runtime's Secret and
	// the objects on the external cluster.
	LabelRuntime        = "onprem.dev/runtime"
	LabelManagedCluster = "onprem.dev/managed-cluster"
	// ArgoSecretType is Argo CD's label that makes a Secret a cluster.
	ArgoSecretType = "argocd.argoproj.io/secret-type"
	// DefaultTimeout bounds the wait for the token and each health check.
	DefaultTimeout = time.Minute
)

// Health of a managed cluster, as List reports it.
const (
	Healthy      = "Healthy"
	Unreachable  = "Unreachable"
	Unauthorized = "Unauthorized"
	Forbidden    = "Forbidden"
)

// Options name the runtime and the managed cluster.
type Options struct {
	Runtime          string
	RuntimeNamespace string
	// Name of the cluster inside the runtime (a DNS label). List ignores
	// it.
	Name         string
	FieldManager string
	Timeout      time.Duration
}

func (o *Options) defaults() {
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
}

// InputError is a name or option that cannot be used; ConflictError a name
// already registered for another server. Nothing was changed.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// ConflictError refuses a registration that clashes with another.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// Result is one registration.
type Result struct {
	Name           string `json:"name"`
	Runtime        string `json:"runtime"`
	Server         string `json:"server"`
	ServiceAccount string `json:"serviceAccount"`
	ClusterRole    string `json:"clusterRole"`
	// Created: the cluster was not registered before this call.
	Created bool `json:"created"`
}

// Status is one managed cluster and its health.
type Status struct {
	Name    string `json:"name"`
	Server  string `json:"server"`
	Health  string `json:"health"`
	Message string `json:"message,omitempty"`
	Version string `json:"version,omitempty"`
}

// RemoveResult says what was removed and what stayed.
type RemoveResult struct {
	Name    string   `json:"name"`
	Removed []string `json:"removed"`
	Kept    []string `json:"kept,omitempty"`
}

// SecretName is the runtime's cluster Secret of a managed cluster.
func SecretName(name string) string { return "cluster-" + name }

func serviceAccount(runtime string) string { return "argocd-manager-" + runtime }
func clusterRole(runtime string) string    { return "onprem-argocd-manager-" + runtime }
func tokenSecret(runtime string) string    { return serviceAccount(runtime) + "-token" }

func check(o Options, needName bool) error {
	if msgs := validation.IsDNS1123Label(o.Runtime); len(msgs) > 0 {
		return &InputError{fmt.Sprintf("runtime name %q: %s", o.Runtime, strings.Join(msgs, "; "))}
	}
	if o.RuntimeNamespace == "" {
		return &InputError{"the runtime's namespace is required"}
	}
	if needName {
		if msgs := validation.IsDNS1123Label(o.Name); len(msgs) > 0 {
			return &InputError{fmt.Sprintf("managed cluster name %q: %s (valid: a DNS label, e.g. prod-eu)", o.Name, strings.Join(msgs, "; "))}
		}
		if len(SecretName(o.Name)) > validation.DNS1123SubdomainMaxLength {
			return &InputError{fmt.Sprintf("managed cluster name %q is too long", o.Name)}
		}
	}
	return nil
}

func labels(o Options) map[string]string {
	return map[string]string{
		"app.kubernetes.io/managed-by": "onprem", "app.kubernetes.io/part-of": "onprem",
		LabelRuntime: o.Runtime,
	}
}

// clusterConfig is the part of Argo CD's cluster Secret "config" key that
// onprem writes: a bearer token and the CA.
type clusterConfig struct {
	BearerToken     string          `json:"bearerToken"`
	TLSClientConfig tlsClientConfig `json:"tlsClientConfig"`
}

type tlsClientConfig struct {
	Insecure bool   `json:"insecure"`
	CAData   []byte `json:"caData,omitempty"`
}

// rules is the ClusterRole: read everything, write what a deployment
// applies.
func rules() []*rbacv1ac.PolicyRuleApplyConfiguration {
	write := []string{"create", "update", "patch", "delete"}
	rule := func(group string, resources ...string) *rbacv1ac.PolicyRuleApplyConfiguration {
		return rbacv1ac.PolicyRule().WithAPIGroups(group).WithResources(resources...).WithVerbs(write...)
	}
	return []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("*").WithResources("*").WithVerbs("get", "list", "watch"),
		rule("", "configmaps", "secrets", "services", "serviceaccounts", "persistentvolumeclaims", "namespaces", "pods"),
		rule("apps", "deployments", "statefulsets", "daemonsets", "replicasets"),
		rule("batch", "jobs", "cronjobs"),
		rule("networking.k8s.io", "ingresses", "networkpolicies"),
		rule("autoscaling", "horizontalpodautoscalers"),
		rule("policy", "poddisruptionbudgets"),
		rule("rbac.authorization.k8s.io", "roles", "rolebindings"),
	}
}

// Add registers external with the runtime on runtimeCluster. See the
// package documentation for what it creates.
func Add(ctx context.Context, runtimeCluster, external *kube.Cluster, o Options) (*Result, error) {
	o.defaults()
	if err := check(o, true); err != nil {
		return nil, err
	}
	if runtimeCluster == nil || external == nil {
		return nil, &InputError{"both the runtime's cluster and the cluster to add are required"}
	}
	res := &Result{Name: o.Name, Runtime: o.Runtime, Server: external.Server, ServiceAccount: Namespace + "/" + serviceAccount(o.Runtime), ClusterRole: clusterRole(o.Runtime)}
	secrets := runtimeCluster.Client.CoreV1().Secrets(o.RuntimeNamespace)
	cur, err := secrets.Get(ctx, SecretName(o.Name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		res.Created = true
	case err != nil:
		return nil, fmt.Errorf("managed cluster %s: reading Secret %s/%s: %w", o.Name, o.RuntimeNamespace, SecretName(o.Name), err)
	case cur.Labels[LabelRuntime] != o.Runtime || cur.Labels[LabelManagedCluster] != o.Name:
		return nil, &ConflictError{fmt.Sprintf("managed cluster %s: Secret %s/%s exists and is not onprem's registration of it: remove it or choose another name", o.Name, o.RuntimeNamespace, SecretName(o.Name))}
	case string(cur.Data["server"]) != external.Server:
		return nil, &ConflictError{fmt.Sprintf("managed cluster %s is already registered with runtime %s for the server %s, not %s: choose another name, or remove it first with 'onprem runtime cluster remove %s --runtime %s'",
			o.Name, o.Runtime, cur.Data["server"], external.Server, o.Name, o.Runtime)}
	}

	// One name per server and runtime: the registrations of one runtime
	// on one cluster share its ServiceAccount, so a second name would be
	// cut off when the first is removed.
	others, err := secrets.List(ctx, metav1.ListOptions{LabelSelector: ArgoSecretType + "=cluster," + LabelRuntime + "=" + o.Runtime + "," + LabelManagedCluster})
	if err != nil {
		return nil, fmt.Errorf("managed cluster %s: listing the runtime's clusters in %s: %w", o.Name, o.RuntimeNamespace, err)
	}
	for _, s := range others.Items {
		if other := s.Labels[LabelManagedCluster]; other != o.Name && string(s.Data["server"]) == external.Server {
			return nil, &ConflictError{fmt.Sprintf("the cluster at %s is already registered with runtime %s as %s: a cluster is registered once per runtime; use that name, or remove it first with 'onprem runtime cluster remove %s --runtime %s'",
				external.Server, o.Runtime, other, other, o.Runtime)}
		}
	}

	token, ca, err := ensureServiceAccount(ctx, external, o)
	if err != nil {
		return nil, err
	}
	defer clear(token)
	if len(ca) == 0 {
		ca = external.Config.CAData
	}
	cfg, err := json.Marshal(clusterConfig{BearerToken: string(token), TLSClientConfig: tlsClientConfig{CAData: ca}})
	if err != nil {
		return nil, fmt.Errorf("managed cluster %s: %w", o.Name, err)
	}
	defer clear(cfg)
	l := labels(o)
	l[LabelManagedCluster] = o.Name
	l[ArgoSecretType] = "cluster"
	ac := corev1ac.Secret(SecretName(o.Name), o.RuntimeNamespace).WithLabels(l).WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{"name": []byte(o.Name), "server": []byte(external.Server), "config": cfg})
	if _, err := secrets.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: o.FieldManager, Force: true}); err != nil {
		return nil, fmt.Errorf("managed cluster %s: applying Secret %s/%s on the runtime's cluster: %w", o.Name, o.RuntimeNamespace, SecretName(o.Name), err)
	}
	return res, nil
}

// ensureServiceAccount applies the namespace, ServiceAccount, token Secret,
// ClusterRole and binding on the external cluster and returns the token
// and CA once the token controller has filled them.
func ensureServiceAccount(ctx context.Context, ext *kube.Cluster, o Options) (token, ca []byte, err error) {
	opts := metav1.ApplyOptions{FieldManager: o.FieldManager, Force: true}
	c := ext.Client
	l := labels(o)
	fail := func(what string, err error) ([]byte, []byte, error) {
		return nil, nil, fmt.Errorf("managed cluster %s: %s on the cluster at %s: %w", o.Name, what, ext.Server, err)
	}
	nsLabels := map[string]string{"app.kubernetes.io/managed-by": "onprem", "app.kubernetes.io/part-of": "onprem"}
	if _, err := c.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace(Namespace).WithLabels(nsLabels), opts); err != nil {
		return fail("applying namespace "+Namespace, err)
	}
	sa := serviceAccount(o.Runtime)
	if _, err := c.CoreV1().ServiceAccounts(Namespace).Apply(ctx, corev1ac.ServiceAccount(sa, Namespace).WithLabels(l), opts); err != nil {
		return fail("applying ServiceAccount "+Namespace+"/"+sa, err)
	}
	ts := corev1ac.Secret(tokenSecret(o.Runtime), Namespace).WithLabels(l).WithType(corev1.SecretTypeServiceAccountToken).
		WithAnnotations(map[string]string{corev1.ServiceAccountNameKey: sa})
	if _, err := c.CoreV1().Secrets(Namespace).Apply(ctx, ts, opts); err != nil {
		return fail("applying the token Secret "+Namespace+"/"+tokenSecret(o.Runtime), err)
	}
	cr := rbacv1ac.ClusterRole(clusterRole(o.Runtime)).WithLabels(l).WithRules(rules()...)
	if _, err := c.RbacV1().ClusterRoles().Apply(ctx, cr, opts); err != nil {
		return fail("applying ClusterRole "+clusterRole(o.Runtime), err)
	}
	crb := rbacv1ac.ClusterRoleBinding(clusterRole(o.Runtime)).WithLabels(l).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(clusterRole(o.Runtime))).
		WithSubjects(rbacv1ac.Subject().WithKind("ServiceAccount").WithName(sa).WithNamespace(Namespace))
	if _, err := c.RbacV1().ClusterRoleBindings().Apply(ctx, crb, opts); err != nil {
		return fail("applying ClusterRoleBinding "+clusterRole(o.Runtime), err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, o.Timeout, true, func(ctx context.Context) (bool, error) {
		s, err := c.CoreV1().Secrets(Namespace).Get(ctx, tokenSecret(o.Runtime), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if len(s.Data[corev1.ServiceAccountTokenKey]) == 0 {
			return false, nil
		}
		token, ca = s.Data[corev1.ServiceAccountTokenKey], s.Data[corev1.ServiceAccountRootCAKey]
		return true, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("the token controller did not fill it within %s (is kube-controller-manager running there?)", o.Timeout)
		}
		return fail("waiting for the ServiceAccount token in Secret "+Namespace+"/"+tokenSecret(o.Runtime), err)
	}
	return token, ca, nil
}

// List reads the runtime's cluster Secrets and checks each cluster with its
// own credentials, in parallel, each bounded by o.Timeout.
func List(ctx context.Context, runtimeCluster *kube.Cluster, o Options) ([]Status, error) {
	o.defaults()
	if err := check(o, false); err != nil {
		return nil, err
	}
	list, err := runtimeCluster.Client.CoreV1().Secrets(o.RuntimeNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: ArgoSecretType + "=cluster," + LabelRuntime + "=" + o.Runtime + "," + LabelManagedCluster,
	})
	if err != nil {
		return nil, fmt.Errorf("runtime %s: listing its cluster Secrets in %s: %w", o.Runtime, o.RuntimeNamespace, err)
	}
	out := make([]Status, len(list.Items))
	var wg sync.WaitGroup
	for i := range list.Items {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out[i] = health(ctx, &list.Items[i], o.Timeout)
		}(i)
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// health connects as Argo CD would: the Secret's server, token and CA.
func health(ctx context.Context, s *corev1.Secret, timeout time.Duration) Status {
	st := Status{Name: string(s.Data["name"]), Server: string(s.Data["server"])}
	if st.Name == "" {
		st.Name = s.Labels[LabelManagedCluster]
	}
	var cfg clusterConfig
	if err := json.Unmarshal(s.Data["config"], &cfg); err != nil {
		st.Health, st.Message = Unauthorized, "its Secret's config is not valid JSON: "+err.Error()
		return st
	}
	rc := &rest.Config{Host: st.Server, BearerToken: cfg.BearerToken, Timeout: timeout,
		TLSClientConfig: rest.TLSClientConfig{CAData: cfg.TLSClientConfig.CAData, Insecure: cfg.TLSClientConfig.Insecure}}
	clear([]byte(cfg.BearerToken))
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		st.Health, st.Message = Unreachable, err.Error()
		return st
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	v, err := c.Discovery().ServerVersion()
	if err != nil {
		st.Health, st.Message = classify(err)
		return st
	}
	st.Version = v.GitVersion
	review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "apps", Resource: "deployments", Verb: "list"}}}
	got, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
	switch {
	case err != nil:
		st.Health, st.Message = classify(err)
	case !got.Status.Allowed:
		st.Health, st.Message = Forbidden, "its ServiceAccount may not list Deployments: its ClusterRole or binding was changed; run 'onprem runtime cluster add' again"
	default:
		st.Health = Healthy
	}
	return st
}

func classify(err error) (string, string) {
	switch {
	case apierrors.IsUnauthorized(err):
		return Unauthorized, "the cluster refuses its token (revoked, or the ServiceAccount was deleted): run 'onprem runtime cluster add' again"
	case apierrors.IsForbidden(err):
		return Forbidden, err.Error()
	}
	return Unreachable, err.Error()
}

// Remove unregisters a managed cluster: the runtime's Secret and, when
// external is not nil, the ServiceAccount, its token, the ClusterRole and
// binding, and the namespace when nothing else of onprem is left in it.
// What is already gone is skipped.
func Remove(ctx context.Context, runtimeCluster, external *kube.Cluster, o Options) (*RemoveResult, error) {
	o.defaults()
	if err := check(o, true); err != nil {
		return nil, err
	}
	out := &RemoveResult{Name: o.Name}
	secrets := runtimeCluster.Client.CoreV1().Secrets(o.RuntimeNamespace)
	cur, err := secrets.Get(ctx, SecretName(o.Name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if external == nil {
			return nil, &InputError{fmt.Sprintf("runtime %s has no managed cluster %q: 'onprem runtime cluster list --runtime %s' shows them", o.Runtime, o.Name, o.Runtime)}
		}
	case err != nil:
		return nil, fmt.Errorf("managed cluster %s: reading Secret %s/%s: %w", o.Name, o.RuntimeNamespace, SecretName(o.Name), err)
	case cur.Labels[LabelRuntime] != o.Runtime || cur.Labels[LabelManagedCluster] != o.Name:
		return nil, &ConflictError{fmt.Sprintf("Secret %s/%s is not onprem's registration of cluster %s: remove it with kubectl if you mean to", o.RuntimeNamespace, SecretName(o.Name), o.Name)}
	default:
		if external != nil && string(cur.Data["server"]) != external.Server {
			return nil, &ConflictError{fmt.Sprintf("managed cluster %s is %s, but the cluster given reaches %s: give that cluster's context", o.Name, cur.Data["server"], external.Server)}
		}
		if err := secrets.Delete(ctx, SecretName(o.Name), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("managed cluster %s: deleting Secret %s/%s: %w", o.Name, o.RuntimeNamespace, SecretName(o.Name), err)
		}
		out.Removed = append(out.Removed, fmt.Sprintf("Secret %s/%s on the runtime's cluster", o.RuntimeNamespace, SecretName(o.Name)))
	}
	if external == nil {
		out.Kept = append(out.Kept, fmt.Sprintf("on the managed cluster: ServiceAccount %s/%s, its token, ClusterRole and ClusterRoleBinding %s (give its --context to remove them)",
			Namespace, serviceAccount(o.Runtime), clusterRole(o.Runtime)))
		return out, nil
	}
	c := external.Client
	del := func(what string, f func() error) error {
		if err := f(); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("managed cluster %s: deleting %s on the cluster at %s: %w", o.Name, what, external.Server, err)
		}
		out.Removed = append(out.Removed, what+" on the managed cluster")
		return nil
	}
	steps := []struct {
		what string
		f    func() error
	}{
		{"ClusterRoleBinding " + clusterRole(o.Runtime), func() error {
			return c.RbacV1().ClusterRoleBindings().Delete(ctx, clusterRole(o.Runtime), metav1.DeleteOptions{})
		}},
		{"ClusterRole " + clusterRole(o.Runtime), func() error {
			return c.RbacV1().ClusterRoles().Delete(ctx, clusterRole(o.Runtime), metav1.DeleteOptions{})
		}},
		{"Secret " + Namespace + "/" + tokenSecret(o.Runtime), func() error {
			return c.CoreV1().Secrets(Namespace).Delete(ctx, tokenSecret(o.Runtime), metav1.DeleteOptions{})
		}},
		{"ServiceAccount " + Namespace + "/" + serviceAccount(o.Runtime), func() error {
			return c.CoreV1().ServiceAccounts(Namespace).Delete(ctx, serviceAccount(o.Runtime), metav1.DeleteOptions{})
		}},
	}
	for _, s := range steps {
		if err := del(s.what, s.f); err != nil {
			return out, err
		}
	}
	// The namespace goes when no other runtime's ServiceAccount is left.
	left, err := c.CoreV1().ServiceAccounts(Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelRuntime})
	if err != nil && !apierrors.IsNotFound(err) {
		return out, fmt.Errorf("managed cluster %s: listing ServiceAccounts in %s: %w", o.Name, Namespace, err)
	}
	if err == nil && len(left.Items) > 0 {
		out.Kept = append(out.Kept, fmt.Sprintf("namespace %s (other runtimes' ServiceAccounts are in it)", Namespace))
		return out, nil
	}
	if err := del("namespace "+Namespace, func() error { return c.CoreV1().Namespaces().Delete(ctx, Namespace, metav1.DeleteOptions{}) }); err != nil {
		return out, err
	}
	return out, nil
}
