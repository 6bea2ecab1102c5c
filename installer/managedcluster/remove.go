package managedcluster

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/kube"
)

const alreadyGone = " (already gone)"

// Remove unregisters a managed cluster: the runtime's cluster Secret and,
// when external is not nil, the ServiceAccount, its token Secret, the
// ClusterRole and ClusterRoleBinding on that cluster, and the namespace
// onprem-managed when nothing else is left in it. Pieces already gone are
// fine: Remove can be run again. With external nil only the runtime's side
// is removed and the result says so (RuntimeOnly, Kept).
//
// It refuses (a *ConflictError, before changing anything) a Secret that is
// not onprem's registration, an external cluster that is not the
// registered server, and an external cluster registered with the runtime
// under another name (its ServiceAccount serves that registration).
func Remove(ctx context.Context, runtimeCluster, external *kube.Cluster, o Options) (*RemoveResult, error) {
	o.defaults()
	if err := validate(o, true); err != nil {
		return nil, err
	}
	if runtimeCluster == nil || runtimeCluster.Client == nil {
		return nil, &InputError{"removing a managed cluster needs a connection to the runtime's cluster"}
	}
	if external != nil && external.Client == nil {
		return nil, &InputError{fmt.Sprintf("managed cluster %s: the connection to it has no client", o.Name)}
	}
	out := &RemoveResult{Name: o.Name}
	secrets := runtimeCluster.Client.CoreV1().Secrets(o.RuntimeNamespace)
	where := fmt.Sprintf("Secret %s/%s on the runtime's cluster", o.RuntimeNamespace, SecretName(o.Name))
	cur, err := secrets.Get(ctx, SecretName(o.Name), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		cur = nil
	case err != nil:
		return nil, fmt.Errorf("managed cluster %s: reading %s (%s): %w", o.Name, where, runtimeCluster.Server, err)
	case cur.Labels[LabelRuntime] != o.Runtime || cur.Labels[LabelManagedCluster] != o.Name:
		return nil, &ConflictError{fmt.Sprintf("%s is not onprem's registration of cluster %s with runtime %s: nothing was removed; delete it with kubectl if you mean to",
			where, o.Name, o.Runtime)}
	case external != nil && string(cur.Data["server"]) != external.Server:
		return nil, &ConflictError{fmt.Sprintf("managed cluster %s of runtime %s is the server %s, but the cluster given is %s: nothing was removed; give the context of %s, or none to remove the runtime's side only",
			o.Name, o.Runtime, cur.Data["server"], external.Server, cur.Data["server"])}
	}
	if external != nil {
		other, err := registeredAs(ctx, runtimeCluster, o, external.Server)
		if err != nil {
			return nil, err
		}
		if other != "" {
			return nil, &ConflictError{fmt.Sprintf("the cluster at %s is registered with runtime %s as %s, and its ServiceAccount there serves that registration: nothing was removed; remove %s instead, or leave out the cluster's context to remove only the runtime's side of %s",
				external.Server, o.Runtime, other, other, o.Name)}
		}
	}

	if cur == nil {
		out.Removed = append(out.Removed, where+alreadyGone)
	} else {
		err := secrets.Delete(ctx, SecretName(o.Name), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &cur.UID}})
		switch {
		case apierrors.IsNotFound(err):
			out.Removed = append(out.Removed, where+alreadyGone)
		case err != nil:
			return out, fmt.Errorf("managed cluster %s: deleting %s (%s): %w", o.Name, where, runtimeCluster.Server, err)
		default:
			out.Removed = append(out.Removed, where)
		}
	}
	if external == nil {
		out.RuntimeOnly = true
		out.Kept = append(out.Kept, fmt.Sprintf("on the managed cluster: ServiceAccount %s/%s, its token Secret %s, ClusterRole and ClusterRoleBinding %s (no connection to that cluster was given; remove them with its --context)",
			Namespace, serviceAccount(o.Runtime), tokenSecret(o.Runtime), clusterRole(o.Runtime)))
		return out, nil
	}
	if err := removeExternal(ctx, external, o, out); err != nil {
		return out, err
	}
	return out, nil
}

// removeExternal deletes the runtime's objects on the managed cluster,
// then the namespace if it is empty.
func removeExternal(ctx context.Context, ext *kube.Cluster, o Options, out *RemoveResult) error {
	c := ext.Client
	sa, cr, ts := serviceAccount(o.Runtime), clusterRole(o.Runtime), tokenSecret(o.Runtime)
	steps := []struct {
		what string
		del  func() error
	}{
		{"ClusterRoleBinding " + cr, func() error { return c.RbacV1().ClusterRoleBindings().Delete(ctx, cr, metav1.DeleteOptions{}) }},
		{"ClusterRole " + cr, func() error { return c.RbacV1().ClusterRoles().Delete(ctx, cr, metav1.DeleteOptions{}) }},
		{"Secret " + Namespace + "/" + ts, func() error { return c.CoreV1().Secrets(Namespace).Delete(ctx, ts, metav1.DeleteOptions{}) }},
		{"ServiceAccount " + Namespace + "/" + sa, func() error {
			return c.CoreV1().ServiceAccounts(Namespace).Delete(ctx, sa, metav1.DeleteOptions{})
		}},
	}
	for _, s := range steps {
		err := s.del()
		switch {
		case apierrors.IsNotFound(err):
			out.Removed = append(out.Removed, s.what+" on the managed cluster"+alreadyGone)
		case err != nil:
			return fmt.Errorf("managed cluster %s: deleting %s on the cluster at %s: %w; run the removal again", o.Name, s.what, ext.Server, err)
		default:
			out.Removed = append(out.Removed, s.what+" on the managed cluster")
		}
	}

	ns, err := c.CoreV1().Namespaces().Get(ctx, Namespace, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		out.Removed = append(out.Removed, "namespace "+Namespace+" on the managed cluster"+alreadyGone)
		return nil
	case err != nil:
		return fmt.Errorf("managed cluster %s: reading namespace %s on the cluster at %s: %w", o.Name, Namespace, ext.Server, err)
	case ns.DeletionTimestamp != nil:
		out.Removed = append(out.Removed, "namespace "+Namespace+" on the managed cluster (already being deleted)")
		return nil
	case ns.Labels[labelManagedBy] != "onprem":
		out.Kept = append(out.Kept, fmt.Sprintf("namespace %s on the managed cluster (onprem did not create it)", Namespace))
		return nil
	}
	left, err := leftIn(ctx, c)
	if err != nil {
		return fmt.Errorf("managed cluster %s: listing what is left in namespace %s on the cluster at %s: %w", o.Name, Namespace, ext.Server, err)
	}
	if len(left) > 0 {
		out.Kept = append(out.Kept, fmt.Sprintf("namespace %s on the managed cluster (it still holds %s)", Namespace, strings.Join(left, ", ")))
		return nil
	}
	err = c.CoreV1().Namespaces().Delete(ctx, Namespace, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ns.UID}})
	switch {
	case apierrors.IsNotFound(err):
		out.Removed = append(out.Removed, "namespace "+Namespace+" on the managed cluster"+alreadyGone)
	case err != nil:
		return fmt.Errorf("managed cluster %s: deleting namespace %s on the cluster at %s: %w", o.Name, Namespace, ext.Server, err)
	default:
		out.Removed = append(out.Removed, "namespace "+Namespace+" on the managed cluster")
	}
	return nil
}

// leftIn names what the namespace still holds besides what Kubernetes
// puts in every namespace: other runtimes' ServiceAccounts and tokens, or
// anything someone else put there.
func leftIn(ctx context.Context, c kubernetes.Interface) ([]string, error) {
	var left []string
	sas, err := c.CoreV1().ServiceAccounts(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, s := range sas.Items {
		if s.Name != "default" {
			left = append(left, "ServiceAccount "+s.Name)
		}
	}
	secrets, err := c.CoreV1().Secrets(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, s := range secrets.Items {
		left = append(left, "Secret "+s.Name)
	}
	cms, err := c.CoreV1().ConfigMaps(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, cm := range cms.Items {
		if cm.Name != "kube-root-ca.crt" {
			left = append(left, "ConfigMap "+cm.Name)
		}
	}
	return left, nil
}
