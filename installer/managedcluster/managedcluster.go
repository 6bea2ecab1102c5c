package managedcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
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

const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelPartOf    = "app.kubernetes.io/part-of"
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
	// Runtime is the runtime's name (a DNS label).
	Runtime string
	// RuntimeNamespace is the runtime's namespace on its cluster, where
	// the cluster Secrets are.
	RuntimeNamespace string
	// Name of the cluster inside the runtime (a DNS label). List ignores
	// it.
	Name string
	// FieldManager of the server-side applies; DefaultFieldManager when
	// empty.
	FieldManager string
	// Timeout bounds the wait for the token (Add), the check of the new
	// credentials (Add) and each cluster's health check (List);
	// DefaultTimeout when zero.
	Timeout time.Duration
}

func (o *Options) defaults() {
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
}

// InputError is a name, option or kubeconfig that cannot be used: the
// operator's to fix. Only the kubeconfig that skips TLS verification of a
// cluster without a published CA is found after the external side was
// applied (a later Add converges it); otherwise nothing was changed.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

// ConflictError refuses a registration or removal that clashes with
// another registration. Nothing was changed.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// Result is one registration. It holds no credentials.
type Result struct {
	Name    string `json:"name"`
	Runtime string `json:"runtime"`
	Server  string `json:"server"`
	// ServiceAccount is NAMESPACE/NAME on the managed cluster.
	ServiceAccount string `json:"serviceAccount"`
	// ClusterRole (and ClusterRoleBinding) on the managed cluster.
	ClusterRole string `json:"clusterRole"`
	// Created: the cluster was not registered before this call.
	Created bool `json:"created"`
}

// Status is one managed cluster and its health.
type Status struct {
	Name   string `json:"name"`
	Server string `json:"server"`
	// Health is Healthy, Unreachable, Unauthorized or Forbidden.
	Health  string `json:"health"`
	Message string `json:"message,omitempty"`
	// Version is the cluster's Kubernetes version, when it answered.
	Version string `json:"version,omitempty"`
}

// RemoveResult says what was removed and what stayed. A piece that was
// already gone is listed in Removed with "(already gone)".
type RemoveResult struct {
	Name    string   `json:"name"`
	Removed []string `json:"removed"`
	Kept    []string `json:"kept,omitempty"`
	// RuntimeOnly: no connection to the managed cluster was given, so its
	// ServiceAccount, token, ClusterRole and binding stayed there (Kept
	// names them).
	RuntimeOnly bool `json:"runtimeOnly,omitempty"`
}

// SecretName is the runtime's cluster Secret of a managed cluster.
func SecretName(name string) string { return "cluster-" + name }

func serviceAccount(runtime string) string { return "argocd-manager-" + runtime }
func clusterRole(runtime string) string    { return "onprem-argocd-manager-" + runtime }
func tokenSecret(runtime string) string    { return serviceAccount(runtime) + "-token" }

// validate checks the names; needName for Add and Remove.
func validate(o Options, needName bool) error {
	if msgs := validation.IsDNS1123Label(o.Runtime); len(msgs) > 0 {
		return &InputError{fmt.Sprintf("runtime name %q: %s", o.Runtime, strings.Join(msgs, "; "))}
	}
	if o.RuntimeNamespace == "" {
		return &InputError{fmt.Sprintf("the namespace of runtime %s is required", o.Runtime)}
	}
	if msgs := validation.IsDNS1123Label(o.RuntimeNamespace); len(msgs) > 0 {
		return &InputError{fmt.Sprintf("the runtime's namespace %q: %s", o.RuntimeNamespace, strings.Join(msgs, "; "))}
	}
	if needName {
		if msgs := validation.IsDNS1123Label(o.Name); len(msgs) > 0 {
			return &InputError{fmt.Sprintf("managed cluster name %q: %s (a DNS label, e.g. prod-eu)", o.Name, strings.Join(msgs, "; "))}
		}
	}
	return nil
}

// labels of the objects on the external cluster.
func labels(o Options) map[string]string {
	return map[string]string{
		labelManagedBy: "onprem", labelPartOf: "onprem",
		LabelRuntime: o.Runtime, LabelManagedCluster: o.Name,
	}
}

// selector finds the cluster Secrets of a runtime.
func selector(runtime string) string {
	return ArgoSecretType + "=cluster," + LabelRuntime + "=" + runtime + "," + LabelManagedCluster
}

// Add registers external with the runtime on runtimeCluster: see the
// package documentation for what it creates and checks. It converges: a
// second call changes nothing and keeps the token. It refuses (with a
// *ConflictError, before changing anything) a name registered with the
// runtime for another server and a server registered under another name.
func Add(ctx context.Context, runtimeCluster, external *kube.Cluster, o Options) (*Result, error) {
	o.defaults()
	if err := validate(o, true); err != nil {
		return nil, err
	}
	if runtimeCluster == nil || runtimeCluster.Client == nil || external == nil || external.Client == nil || external.Config == nil {
		return nil, &InputError{"adding a managed cluster needs connections to both the runtime's cluster and the cluster to add"}
	}
	if external.Server == "" {
		return nil, &InputError{fmt.Sprintf("managed cluster %s: the connection to it has no server URL", o.Name)}
	}
	res := &Result{Name: o.Name, Runtime: o.Runtime, Server: external.Server,
		ServiceAccount: Namespace + "/" + serviceAccount(o.Runtime), ClusterRole: clusterRole(o.Runtime)}
	secrets := runtimeCluster.Client.CoreV1().Secrets(o.RuntimeNamespace)
	where := fmt.Sprintf("Secret %s/%s on the runtime's cluster (%s)", o.RuntimeNamespace, SecretName(o.Name), runtimeCluster.Server)
	cur, err := secrets.Get(ctx, SecretName(o.Name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		res.Created = true
	case err != nil:
		return nil, fmt.Errorf("managed cluster %s: reading %s: %w", o.Name, where, err)
	case cur.Labels[LabelRuntime] != o.Runtime || cur.Labels[LabelManagedCluster] != o.Name:
		return nil, &ConflictError{fmt.Sprintf("managed cluster %s: %s exists and is not onprem's registration of this cluster with runtime %s: remove it or choose another name",
			o.Name, where, o.Runtime)}
	case string(cur.Data["server"]) != external.Server:
		return nil, &ConflictError{fmt.Sprintf("managed cluster %s is already registered with runtime %s for the server %s, not %s: choose another name, or remove it first with 'onprem runtime cluster remove %s --runtime %s'",
			o.Name, o.Runtime, cur.Data["server"], external.Server, o.Name, o.Runtime)}
	}
	if other, err := registeredAs(ctx, runtimeCluster, o, external.Server); err != nil {
		return nil, err
	} else if other != "" {
		return nil, &ConflictError{fmt.Sprintf("the cluster at %s is already registered with runtime %s as %s: a cluster is registered once per runtime; use that name, or remove it first with 'onprem runtime cluster remove %s --runtime %s'",
			external.Server, o.Runtime, other, other, o.Runtime)}
	}

	token, ca, err := ensureExternal(ctx, external, o)
	if err != nil {
		return nil, err
	}
	tc, err := tlsFor(external, ca, o.Name)
	if err != nil {
		return nil, err
	}
	cc := &clusterConfig{BearerToken: string(token), TLSClientConfig: tc}
	if err := verify(ctx, external.Server, cc, o.Timeout, o.Name, o.Runtime); err != nil {
		return nil, err
	}
	cfg, err := json.Marshal(cc)
	if err != nil {
		return nil, fmt.Errorf("managed cluster %s: encoding the cluster config: %w", o.Name, err)
	}
	l := labels(o)
	l[ArgoSecretType] = "cluster"
	ac := corev1ac.Secret(SecretName(o.Name), o.RuntimeNamespace).WithLabels(l).WithType(corev1.SecretTypeOpaque).
		WithData(map[string][]byte{"name": []byte(o.Name), "server": []byte(external.Server), "config": cfg})
	if _, err := secrets.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: o.FieldManager, Force: true}); err != nil {
		hint := ""
		if apierrors.IsNotFound(err) {
			hint = fmt.Sprintf("; is runtime %s installed in namespace %s of that cluster?", o.Runtime, o.RuntimeNamespace)
		}
		return nil, fmt.Errorf("managed cluster %s: applying %s: %w%s", o.Name, where, err, hint)
	}
	return res, nil
}

// registeredAs returns the name under which server is registered with the
// runtime, other than o.Name ("" if none).
func registeredAs(ctx context.Context, runtimeCluster *kube.Cluster, o Options, server string) (string, error) {
	list, err := runtimeCluster.Client.CoreV1().Secrets(o.RuntimeNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector(o.Runtime)})
	if err != nil {
		return "", fmt.Errorf("managed cluster %s: listing the cluster Secrets of runtime %s in namespace %s on the cluster at %s: %w",
			o.Name, o.Runtime, o.RuntimeNamespace, runtimeCluster.Server, err)
	}
	for _, s := range list.Items {
		if other := s.Labels[LabelManagedCluster]; other != o.Name && string(s.Data["server"]) == server {
			return other, nil
		}
	}
	return "", nil
}

// tlsFor is the TLS part of the registration: the CA the kubeconfig
// trusts for the server, else (the kubeconfig skips verification) the
// cluster's root CA from the token Secret, else (system roots) none.
func tlsFor(ext *kube.Cluster, saCA []byte, name string) (tlsClientConfig, error) {
	c := rest.CopyConfig(ext.Config)
	if err := rest.LoadTLSFiles(c); err != nil {
		return tlsClientConfig{}, fmt.Errorf("managed cluster %s: reading the certificate files of its kubeconfig %s: %w", name, ext.Kubeconfig, err)
	}
	t := tlsClientConfig{ServerName: c.ServerName}
	switch {
	case len(c.CAData) > 0:
		t.CAData = c.CAData
	case c.Insecure:
		if len(saCA) == 0 {
			return tlsClientConfig{}, &InputError{fmt.Sprintf("managed cluster %s: its kubeconfig skips TLS verification (insecure-skip-tls-verify) and the cluster's token controller published no ca.crt, so the runtime could not verify %s: give a kubeconfig with certificate-authority-data for it",
				name, ext.Server)}
		}
		t.CAData = saCA
	}
	return t, nil
}

// ensureExternal applies the namespace, ServiceAccount, ClusterRole,
// binding and token Secret on the external cluster and returns the token
// and the CA once the token controller has filled them for the current
// ServiceAccount.
func ensureExternal(ctx context.Context, ext *kube.Cluster, o Options) (token, ca []byte, err error) {
	opts := metav1.ApplyOptions{FieldManager: o.FieldManager, Force: true}
	c := ext.Client
	l := labels(o)
	sa, cr, ts := serviceAccount(o.Runtime), clusterRole(o.Runtime), tokenSecret(o.Runtime)
	fail := func(what string, err error) ([]byte, []byte, error) {
		return nil, nil, fmt.Errorf("managed cluster %s: %s on the cluster at %s: %w", o.Name, what, ext.Server, err)
	}
	nsLabels := map[string]string{labelManagedBy: "onprem", labelPartOf: "onprem"}
	if _, err := c.CoreV1().Namespaces().Apply(ctx, corev1ac.Namespace(Namespace).WithLabels(nsLabels), opts); err != nil {
		return fail("applying namespace "+Namespace, err)
	}
	applied, err := c.CoreV1().ServiceAccounts(Namespace).Apply(ctx, corev1ac.ServiceAccount(sa, Namespace).WithLabels(l), opts)
	if err != nil {
		return fail("applying ServiceAccount "+Namespace+"/"+sa, err)
	}
	get, err := discoverGettable(ctx, c.Discovery(), o.Name, ext.Server)
	if err != nil {
		return nil, nil, err
	}
	if _, err := c.RbacV1().ClusterRoles().Apply(ctx, rbacv1ac.ClusterRole(cr).WithLabels(l).WithRules(policyRules(get)...), opts); err != nil {
		return fail("applying ClusterRole "+cr, err)
	}
	crb := rbacv1ac.ClusterRoleBinding(cr).WithLabels(l).
		WithRoleRef(rbacv1ac.RoleRef().WithAPIGroup("rbac.authorization.k8s.io").WithKind("ClusterRole").WithName(cr)).
		WithSubjects(rbacv1ac.Subject().WithKind("ServiceAccount").WithName(sa).WithNamespace(Namespace))
	if _, err := c.RbacV1().ClusterRoleBindings().Apply(ctx, crb, opts); err != nil {
		return fail("applying ClusterRoleBinding "+cr, err)
	}

	secrets := c.CoreV1().Secrets(Namespace)
	applyToken := func() error {
		ac := corev1ac.Secret(ts, Namespace).WithLabels(l).WithType(corev1.SecretTypeServiceAccountToken).
			WithAnnotations(map[string]string{corev1.ServiceAccountNameKey: sa})
		_, err := secrets.Apply(ctx, ac, opts)
		return err
	}
	if err := applyToken(); err != nil {
		return fail("applying the token Secret "+Namespace+"/"+ts, err)
	}
	// The token controller fills token, ca.crt and namespace in one
	// update. A token Secret of a deleted ServiceAccount (another UID) is
	// deleted by it, or by us here, and issued anew.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, o.Timeout, true, func(ctx context.Context) (bool, error) {
		s, err := secrets.Get(ctx, ts, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, applyToken()
		}
		if err != nil {
			return false, err
		}
		if uid := s.Annotations[corev1.ServiceAccountUIDKey]; uid != "" && types.UID(uid) != applied.UID {
			err := secrets.Delete(ctx, ts, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &s.UID}})
			if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
				return false, err
			}
			return false, nil
		}
		if len(s.Data[corev1.ServiceAccountTokenKey]) == 0 {
			return false, nil
		}
		token, ca = s.Data[corev1.ServiceAccountTokenKey], s.Data[corev1.ServiceAccountRootCAKey]
		return true, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("the token controller did not fill it within %s (%w): is kube-controller-manager running on that cluster, with its service account token controller (--service-account-private-key-file)?", o.Timeout, err)
		}
		return fail("waiting for the ServiceAccount token in Secret "+Namespace+"/"+ts, err)
	}
	return token, ca, nil
}
