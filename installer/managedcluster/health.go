package managedcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"onprem.dev/onprem/installer/kube"
	onpremversion "onprem.dev/onprem/installer/version"
)

// maxParallel bounds the health checks List runs at once.
const maxParallel = 16

// clusterConfig is the part of Argo CD's ClusterConfig (the "config" key of
// a cluster Secret) that onprem writes: a bearer token and the TLS
// settings. The JSON names are Argo CD's.
type clusterConfig struct {
	BearerToken     string          `json:"bearerToken"`
	TLSClientConfig tlsClientConfig `json:"tlsClientConfig"`
}

type tlsClientConfig struct {
	Insecure   bool   `json:"insecure"`
	ServerName string `json:"serverName,omitempty"`
	CAData     []byte `json:"caData,omitempty"`
}

// restConfig is the client configuration Argo CD builds from the Secret.
func (c *clusterConfig) restConfig(server string, timeout time.Duration) *rest.Config {
	return &rest.Config{
		Host:        server,
		BearerToken: c.BearerToken,
		Timeout:     timeout,
		UserAgent:   "onprem/" + onpremversion.Version + " (managed cluster check)",
		TLSClientConfig: rest.TLSClientConfig{
			Insecure:   c.TLSClientConfig.Insecure,
			ServerName: c.TLSClientConfig.ServerName,
			CAData:     c.TLSClientConfig.CAData,
		},
	}
}

// errNotAllowed is the cause of a Forbidden probe whose access review was
// denied.
var errNotAllowed = errors.New("access review denied")

// probeResult is the outcome of one check with a Secret's credentials.
type probeResult struct {
	health, message, version string
	err                      error // the cause; nil when Healthy
}

// remedy is the command that issues new credentials for name.
func remedy(name, runtime string) string {
	return fmt.Sprintf("'onprem runtime cluster add %s --runtime %s --context CONTEXT-OF-THAT-CLUSTER'", name, runtime)
}

// probe connects to server with cc, as Argo CD would: GET /version, then
// two SelfSubjectAccessReviews (list and create Deployments in every
// namespace). Bounded by timeout.
func probe(ctx context.Context, server string, cc *clusterConfig, timeout time.Duration, name, runtime string) probeResult {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := kubernetes.NewForConfig(cc.restConfig(server, timeout))
	if err != nil {
		return probeResult{health: Unreachable, err: err,
			message: "its Secret's TLS settings cannot be used: " + err.Error() + "; run " + remedy(name, runtime) + " again"}
	}
	body, err := c.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return classify(ctx, err, server, timeout, name, runtime)
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil || info.GitVersion == "" {
		return probeResult{health: Unreachable, err: fmt.Errorf("GET %s/version: not a Kubernetes version", server),
			message: fmt.Sprintf("%s answered /version, but not like a Kubernetes API server; check the server URL", server)}
	}
	r := probeResult{version: info.GitVersion}
	for _, verb := range []string{"list", "create"} {
		review := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Group: "apps", Resource: "deployments", Verb: verb}}}
		got, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			cr := classify(ctx, err, server, timeout, name, runtime)
			// A token rejected now says nothing about what it read a
			// moment ago (the API server accepts a revoked token for up to
			// 10 s from its cache): no version with Unauthorized.
			if cr.health != Unauthorized {
				cr.version = r.version
			}
			return cr
		}
		if !got.Status.Allowed {
			r.health, r.err = Forbidden, errNotAllowed
			r.message = fmt.Sprintf("the token is accepted but may not %s Deployments: ClusterRole or ClusterRoleBinding %s on that cluster was changed or deleted; run %s again",
				verb, clusterRole(runtime), remedy(name, runtime))
			return r
		}
	}
	r.health = Healthy
	return r
}

// classify turns a failed request into a health and a message. The
// messages never hold the token: client-go's errors name the method and
// URL, not the headers.
func classify(ctx context.Context, err error, server string, timeout time.Duration, name, runtime string) probeResult {
	r := probeResult{err: err}
	var (
		verify    *tls.CertificateVerificationError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
	)
	switch {
	case apierrors.IsUnauthorized(err):
		r.health = Unauthorized
		r.message = fmt.Sprintf("the cluster rejects the registered token (401 Unauthorized): ServiceAccount %s/%s or its token Secret was deleted there; run %s again to issue a new token",
			Namespace, serviceAccount(runtime), remedy(name, runtime))
	case apierrors.IsForbidden(err):
		r.health = Forbidden
		r.message = fmt.Sprintf("the token is accepted but the request was refused (403 Forbidden): %v", err)
	case errors.As(err, &verify) || errors.As(err, &unknownCA) || errors.As(err, &hostname):
		r.health = Unreachable
		r.message = fmt.Sprintf("TLS: the CA in the registration does not verify the certificate of %s: %v; run %s again with a kubeconfig whose certificate-authority matches that server",
			server, err, remedy(name, runtime))
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		r.health = Unreachable
		r.message = fmt.Sprintf("%s did not answer within %s", server, timeout)
	default:
		r.health = Unreachable
		r.message = fmt.Sprintf("%v; check that the cluster is up and that %s is reachable from here", err, server)
	}
	return r
}

// List reads the runtime's cluster Secrets (by label) and checks each
// cluster with its own credentials, in parallel, each check bounded by
// o.Timeout. o.Name is ignored. The result is sorted by name; it holds no
// credentials.
func List(ctx context.Context, runtimeCluster *kube.Cluster, o Options) ([]Status, error) {
	o.defaults()
	if err := validate(o, false); err != nil {
		return nil, err
	}
	if runtimeCluster == nil || runtimeCluster.Client == nil {
		return nil, &InputError{"listing managed clusters needs a connection to the runtime's cluster"}
	}
	list, err := runtimeCluster.Client.CoreV1().Secrets(o.RuntimeNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector(o.Runtime)})
	if err != nil {
		return nil, fmt.Errorf("runtime %s: listing its cluster Secrets in namespace %s on the cluster at %s: %w; check that the kubeconfig's user may list Secrets there",
			o.Runtime, o.RuntimeNamespace, runtimeCluster.Server, err)
	}
	out := make([]Status, len(list.Items))
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for i := range list.Items {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			out[i] = health(ctx, &list.Items[i], o)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("runtime %s: checking its managed clusters: %w", o.Runtime, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// health checks one registration as Argo CD would connect: the Secret's
// server, token and CA.
func health(ctx context.Context, s *corev1.Secret, o Options) Status {
	st := Status{Name: string(s.Data["name"]), Server: string(s.Data["server"])}
	if st.Name == "" {
		st.Name = s.Labels[LabelManagedCluster]
	}
	var cc clusterConfig
	if err := json.Unmarshal(s.Data["config"], &cc); err != nil || cc.BearerToken == "" {
		// encoding/json's error may quote a character of the token: it
		// is not shown.
		why := "its config has no bearer token"
		if err != nil {
			why = "its config is not valid JSON"
		}
		st.Health, st.Message = Unauthorized, fmt.Sprintf("Secret %s/%s holds no usable credentials (%s); run %s again", s.Namespace, s.Name, why, remedy(st.Name, o.Runtime))
		return st
	}
	if st.Server == "" {
		st.Health, st.Message = Unreachable, fmt.Sprintf("Secret %s/%s has no server; run %s again", s.Namespace, s.Name, remedy(st.Name, o.Runtime))
		return st
	}
	r := probe(ctx, st.Server, &cc, o.Timeout, st.Name, o.Runtime)
	st.Health, st.Message, st.Version = r.health, r.message, r.version
	return st
}

// verify is Add's check of the credentials it is about to register. The
// API server's authorizer sees a new binding a moment after it was
// written, so 401 and 403 are retried until timeout; an unreachable
// server or a TLS failure is not.
func verify(ctx context.Context, server string, cc *clusterConfig, timeout time.Duration, name, runtime string) error {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left < time.Second {
			left = time.Second
		}
		r := probe(ctx, server, cc, left, name, runtime)
		if r.health == Healthy {
			return nil
		}
		if r.health == Unreachable || !time.Now().Add(250*time.Millisecond).Before(deadline) || ctx.Err() != nil {
			return fmt.Errorf("managed cluster %s: the credentials issued for the runtime do not work against %s (%s), so nothing was written on the runtime's cluster: %s: %w",
				name, server, r.health, r.message, r.err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}
