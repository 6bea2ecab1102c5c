package gitops

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/installer/state"
)

// Keys of the Git credentials Secret (Argo CD's credential template).
const (
	argoSecretTypeLabel = "argocd.argoproj.io/secret-type"
	keyURL              = "url"
	keyUsername         = "username"
	keyPassword         = render.RuntimeGitPasswordKey
)

func labels(name string) map[string]string {
	return map[string]string{"app.kubernetes.io/managed-by": state.ManagedBy, "app.kubernetes.io/part-of": state.ManagedBy, LabelRuntime: name}
}

// ensureNamespace applies the runtime's namespace, Pod Security Admission
// restricted. A namespace that onprem creates is marked so and removed
// with the runtime; an existing one (the operator's) only gets the labels.
func ensureNamespace(ctx context.Context, cl *kube.Cluster, ns, name string) error {
	api := cl.Client.CoreV1().Namespaces()
	cur, err := api.Get(ctx, ns, metav1.GetOptions{})
	created := apierrors.IsNotFound(err)
	switch {
	case created:
	case err != nil:
		return fmt.Errorf("runtime %s: reading namespace %s: %w", name, ns, err)
	case cur.DeletionTimestamp != nil:
		return fmt.Errorf("runtime %s: namespace %s is being deleted (an uninstall?): wait until it is gone, then run again", name, ns)
	case cur.Labels[LabelRuntime] != "" && cur.Labels[LabelRuntime] != name:
		return &attachment.ConflictError{Msg: fmt.Sprintf("runtime %s: namespace %s belongs to runtime %s (label %s): give each runtime its own namespace", name, ns, cur.Labels[LabelRuntime], LabelRuntime)}
	}
	l := labels(name)
	for k, v := range map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/enforce-version": "latest",
		"pod-security.kubernetes.io/warn": "restricted", "pod-security.kubernetes.io/warn-version": "latest",
	} {
		l[k] = v
	}
	ac := corev1ac.Namespace(ns).WithLabels(l)
	if created || cur.Annotations[AnnotationCreatedBy] == state.ManagedBy {
		ac = ac.WithAnnotations(map[string]string{AnnotationCreatedBy: state.ManagedBy})
	}
	if _, err := api.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("runtime %s: applying namespace %s: %w", name, ns, err)
	}
	return nil
}

// applyCredentials writes the Git token into the runtime's namespace as an
// Argo CD credential template for the configuration repository's URL. The
// token is not logged or returned.
func applyCredentials(ctx context.Context, cl *kube.Cluster, ns, name, repoURL string, token []byte) error {
	l := labels(name)
	l[argoSecretTypeLabel] = "repo-creds"
	// The URL (without credentials) and the user name are not secret: a
	// support bundle keeps them (secrets.AnnotationPublicKeys).
	ac := corev1ac.Secret(render.RuntimeGitCredentials, ns).WithLabels(l).WithType("Opaque").
		WithAnnotations(map[string]string{secrets.AnnotationPublicKeys: keyURL + "," + keyUsername}).
		WithData(map[string][]byte{keyURL: []byte(redactURL(repoURL)), keyUsername: []byte(GitUsername), keyPassword: token})
	if _, err := cl.Client.CoreV1().Secrets(ns).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("runtime %s: applying Secret %s/%s (the Git token): %w", name, ns, render.RuntimeGitCredentials, err)
	}
	return nil
}

// applyPlatformToken writes the platform token the runtime registers with
// into its namespace (render.RuntimePlatformToken). It is not logged or
// returned.
func applyPlatformToken(ctx context.Context, cl *kube.Cluster, ns, name string, token []byte) error {
	ac := corev1ac.Secret(render.RuntimePlatformToken, ns).WithLabels(labels(name)).WithType("Opaque").
		WithData(map[string][]byte{render.RuntimePlatformTokenKey: token})
	if _, err := cl.Client.CoreV1().Secrets(ns).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("runtime %s: applying Secret %s/%s (the platform token): %w", name, ns, render.RuntimePlatformToken, err)
	}
	return nil
}

// PlatformCA returns the CA certificates a runtime must trust to reach
// the platform: ca.crt of the platform's TLS Secret (the CA onprem
// generated, or the one the operator's Secret carries); nil when the
// Secret has none (a certificate the nodes already trust).
func PlatformCA(ctx context.Context, p *Platform) ([]byte, error) {
	name := credentials.TLS
	if tls := p.Installation.Spec.TLS; tls.Mode == "secret" {
		name = tls.SecretName
	}
	s, err := p.Cluster.Client.CoreV1().Secrets(p.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the platform's CA (Secret %s/%s): %w", p.Namespace, name, err)
	}
	return s.Data["ca.crt"], nil
}

// applyPlatformCA writes the platform's CA certificates into the runtime's
// namespace (render.RuntimePlatformCA), or removes a copy the platform no
// longer needs. Certificates are public: a support bundle keeps them.
func applyPlatformCA(ctx context.Context, cl *kube.Cluster, ns, name string, ca []byte) error {
	api := cl.Client.CoreV1().Secrets(ns)
	if len(ca) == 0 {
		if err := api.Delete(ctx, render.RuntimePlatformCA, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("runtime %s: deleting Secret %s/%s: %w", name, ns, render.RuntimePlatformCA, err)
		}
		return nil
	}
	ac := corev1ac.Secret(render.RuntimePlatformCA, ns).WithLabels(labels(name)).WithType("Opaque").
		WithAnnotations(map[string]string{secrets.AnnotationPublicKeys: render.RuntimePlatformCAKey}).
		WithData(map[string][]byte{render.RuntimePlatformCAKey: ca})
	if _, err := api.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("runtime %s: applying Secret %s/%s (the platform's CA): %w", name, ns, render.RuntimePlatformCA, err)
	}
	return nil
}

// readToken returns the Git token kept on the runtime's cluster, nil when
// there is none yet.
func readToken(ctx context.Context, cl *kube.Cluster, ns string) ([]byte, error) {
	return readSecretKey(ctx, cl, ns, render.RuntimeGitCredentials, keyPassword, "the Git token")
}

// readSecretKey returns a copy of key of Secret ns/name, nil when the
// Secret or the key is missing or empty.
func readSecretKey(ctx context.Context, cl *kube.Cluster, ns, name, key, what string) ([]byte, error) {
	s, err := cl.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s (Secret %s/%s): %w", what, ns, name, err)
	}
	if len(s.Data[key]) == 0 {
		return nil, nil
	}
	return append([]byte(nil), s.Data[key]...), nil
}

// pullSecret reads the registry's pull Secret (spec.registry.pullSecret)
// from the platform's namespace, for the runtime's namespace: nil when
// none is configured, an *InputError when it does not exist there.
func pullSecret(ctx context.Context, p *Platform, runtime string) (*corev1.Secret, error) {
	name := p.Installation.Spec.Registry.PullSecret
	if name == "" {
		return nil, nil
	}
	s, err := p.Cluster.Client.CoreV1().Secrets(p.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &InputError{fmt.Sprintf("runtime %s: spec.registry.pullSecret: Secret %s does not exist in the platform namespace %s: create it there (kubectl -n %s create secret docker-registry %s --docker-server=%s ...)",
			runtime, name, p.Namespace, p.Namespace, name, p.Installation.Spec.Registry.Host)}
	}
	if err != nil {
		return nil, fmt.Errorf("runtime %s: reading the pull Secret %s/%s: %w", runtime, p.Namespace, name, err)
	}
	return s, nil
}

// applyPullSecret copies the registry's pull Secret into the runtime's
// namespace (its pods and ServiceAccounts name it: see
// render.RenderRuntime), on every run, so that a renewed one reaches the
// runtime with 'onprem install' or 'onprem runtime upgrade'.
func applyPullSecret(ctx context.Context, cl *kube.Cluster, ns, name string, src *corev1.Secret) error {
	if src == nil {
		return nil
	}
	ac := corev1ac.Secret(src.Name, ns).WithLabels(labels(name)).WithType(src.Type).WithData(src.Data)
	if _, err := cl.Client.CoreV1().Secrets(ns).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("runtime %s: applying the pull Secret %s/%s: %w", name, ns, src.Name, err)
	}
	return nil
}
