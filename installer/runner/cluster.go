package runner

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

// Connect reaches a runner's cluster: the platform's connection itself when
// ref names no other cluster (attachment.ConnectRef). An unreachable cluster
// comes back as the *kube.UnreachableError (or *kube.AuthError) of
// kube.Connect, which names the kubeconfig, the context and the server,
// wrapped with the runner's name.
func Connect(ctx context.Context, name string, ref config.ClusterRef, platform kube.Options, platformCluster *kube.Cluster) (*kube.Cluster, error) {
	return attachment.Connect(ctx, fmt.Sprintf("runner %s: its cluster (%s)", name, attachment.DescribeRef(ref)), ref, platform, platformCluster)
}

// RecordRef is the cluster reference recorded for a runner.
func RecordRef(rec state.Runner) config.ClusterRef {
	return config.ClusterRef{Kubeconfig: rec.Kubeconfig, Context: rec.Context}
}

// NotFound says that no runner called name is recorded in st.
func NotFound(st *state.State, name string) *attachment.NotFoundError {
	return &attachment.NotFoundError{Kind: "runner", Recorded: "registered with", Name: name, Known: Names(st)}
}

// Names lists the recorded runners, sorted.
func Names(st *state.State) []string { return attachment.Names(st.Runners) }

// CheckPlace refuses a runner called name on the cluster of server in
// namespace when the name is taken by a runner somewhere else (names are
// unique across the installation), when the namespace (or its engine's) is
// another runner's, or when it is the platform's own namespace. The same
// name at the same place is a re-install: allowed.
func CheckPlace(p *Platform, name, server, namespace string) error {
	engineNS := config.RunnerEngineNamespace(namespace)
	if rec, ok := p.State.Runners[name]; ok && (rec.Server != server || rec.Namespace != namespace) {
		return &attachment.ConflictError{Msg: fmt.Sprintf("runner %s is already installed on %s: runner names are unique in an installation; "+
			"choose another name, or remove it first with 'onprem runner uninstall %s'", name, attachment.Place{Server: rec.Server, Context: rec.Context, Namespace: rec.Namespace}.Where(), name)}
	}
	if server == p.Cluster.Server && (namespace == p.Namespace || engineNS == p.Namespace) {
		return &attachment.ConflictError{Msg: fmt.Sprintf("runner %s: namespace %s is the platform's own: give the runner a namespace of its own (the default is %s%s)",
			name, p.Namespace, config.RunnerNamespacePrefix, name)}
	}
	for _, other := range Names(p.State) {
		rec := p.State.Runners[other]
		if other == name || rec.Server != server {
			continue
		}
		for _, mine := range []string{namespace, engineNS} {
			if mine == rec.Namespace || mine == rec.EngineNamespace {
				return &attachment.ConflictError{Msg: fmt.Sprintf("runner %s: namespace %s on %s is runner %s's: give each runner its own namespace", name, mine, server, other)}
			}
		}
	}
	return nil
}

// Pod Security Admission levels of the two namespaces of a runner.
const (
	levelRestricted = "restricted"
	levelPrivileged = "privileged"
)

// ensureNamespace applies one of a runner's namespaces with its Pod
// Security Admission labels. The runner's namespace enforces restricted
// (the agent and every build pod it creates); the engine's enforces
// privileged, the level rootless BuildKit's user namespaces need, and
// audits against restricted so that the cluster's audit log records the
// exception. A namespace that onprem creates is marked so, and removed
// with the runner; an existing one (the operator's) only gets the labels.
func ensureNamespace(ctx context.Context, cl *kube.Cluster, name, runner, level string) error {
	api := cl.Client.CoreV1().Namespaces()
	cur, err := api.Get(ctx, name, metav1.GetOptions{})
	created := apierrors.IsNotFound(err)
	switch {
	case created:
	case err != nil:
		return fmt.Errorf("runner %s: reading namespace %s: %w", runner, name, err)
	case cur.DeletionTimestamp != nil:
		return fmt.Errorf("runner %s: namespace %s is being deleted (an uninstall?): wait until it is gone, then run again", runner, name)
	case cur.Labels[LabelRunner] != "" && cur.Labels[LabelRunner] != runner:
		return &attachment.ConflictError{Msg: fmt.Sprintf("runner %s: namespace %s belongs to runner %s (label %s): give each runner its own namespace",
			runner, name, cur.Labels[LabelRunner], LabelRunner)}
	}
	labels := map[string]string{
		"app.kubernetes.io/managed-by":               state.ManagedBy,
		"app.kubernetes.io/part-of":                  state.ManagedBy,
		LabelRunner:                                  runner,
		"pod-security.kubernetes.io/enforce":         level,
		"pod-security.kubernetes.io/enforce-version": "latest",
		"pod-security.kubernetes.io/audit":           levelRestricted,
		"pod-security.kubernetes.io/audit-version":   "latest",
		"pod-security.kubernetes.io/warn":            level,
		"pod-security.kubernetes.io/warn-version":    "latest",
	}
	ac := corev1ac.Namespace(name).WithLabels(labels)
	if created || cur.Annotations[AnnotationCreatedBy] == state.ManagedBy {
		ac = ac.WithAnnotations(map[string]string{AnnotationCreatedBy: state.ManagedBy})
	}
	if _, err := api.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: FieldManager, Force: true}); err != nil {
		return fmt.Errorf("runner %s: applying namespace %s: %w", runner, name, err)
	}
	return nil
}

// copyPlatformObjects gives the runner what it needs of the platform's
// namespace: the platform's CA (when its TLS Secret has one) for the agent,
// and the registry pull Secret (spec.registry.pullSecret) in both of the
// runner's namespaces. Both are applied on every run, so a renewed CA or
// pull Secret reaches the runner with 'onprem install' or 'onprem runner
// upgrade'.
func copyPlatformObjects(ctx context.Context, p *Platform, cl *kube.Cluster, runner, namespace, engineNS string) error {
	spec := p.Installation.Spec
	labels := map[string]string{"app.kubernetes.io/managed-by": state.ManagedBy, "app.kubernetes.io/part-of": state.ManagedBy, LabelRunner: runner}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}

	tlsName := credentials.TLS
	if spec.TLS.Mode == config.TLSModeSecret {
		tlsName = spec.TLS.SecretName
	}
	var ca []byte
	switch tls, err := p.Cluster.Client.CoreV1().Secrets(p.Namespace).Get(ctx, tlsName, metav1.GetOptions{}); {
	case err == nil:
		ca = tls.Data["ca.crt"]
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("runner %s: reading the platform's TLS Secret %s/%s: %w", runner, p.Namespace, tlsName, err)
	}
	cms := cl.Client.CoreV1().ConfigMaps(namespace)
	if len(ca) > 0 {
		ac := corev1ac.ConfigMap(PlatformCAConfigMap, namespace).WithLabels(labels).
			WithData(map[string]string{"ca.crt": string(ca)})
		if _, err := cms.Apply(ctx, ac, opts); err != nil {
			return fmt.Errorf("runner %s: applying ConfigMap %s/%s (the platform's CA): %w", runner, namespace, PlatformCAConfigMap, err)
		}
	} else if err := cms.Delete(ctx, PlatformCAConfigMap, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("runner %s: deleting ConfigMap %s/%s: %w", runner, namespace, PlatformCAConfigMap, err)
	}

	name := spec.Registry.PullSecret
	if name == "" {
		return nil
	}
	src, err := p.Cluster.Client.CoreV1().Secrets(p.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("runner %s: spec.registry.pullSecret: Secret %s does not exist in the platform namespace %s: create it there (kubectl -n %s create secret docker-registry %s ...)",
			runner, name, p.Namespace, p.Namespace, name)
	}
	if err != nil {
		return fmt.Errorf("runner %s: reading the pull Secret %s/%s: %w", runner, p.Namespace, name, err)
	}
	for _, ns := range []string{namespace, engineNS} {
		ac := corev1ac.Secret(name, ns).WithLabels(labels).WithType(src.Type).WithData(src.Data)
		if _, err := cl.Client.CoreV1().Secrets(ns).Apply(ctx, ac, opts); err != nil {
			return fmt.Errorf("runner %s: applying the pull Secret %s/%s: %w", runner, ns, name, err)
		}
	}
	return nil
}
