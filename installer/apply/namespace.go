package apply

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"

	"onprem.dev/onprem/installer/render"
)

// FieldManager is the server-side apply field manager of objects onprem
// applies itself (the namespace, generated secrets).
const FieldManager = "onprem"

// ensureNamespace applies the platform namespace (its labels: Pod Security
// Admission) with server-side apply. It is not part of any Helm release.
func ensureNamespace(ctx context.Context, o Options, res *render.Result) error {
	if o.Client == nil {
		return nil
	}
	ac := corev1ac.Namespace(res.Namespace)
	if p := res.Component(render.PlatformComponent); p != nil {
		for _, obj := range p.Objects {
			if isNamespace(obj) && obj.GetName() == res.Namespace {
				ac = ac.WithLabels(obj.GetLabels()).WithAnnotations(obj.GetAnnotations())
			}
		}
	}
	opts := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	if o.DryRun {
		// The API server validates namespaced objects only in a namespace
		// that exists, even in a dry run.
		if _, err := o.Client.CoreV1().Namespaces().Get(ctx, res.Namespace, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return fmt.Errorf("--dry-run validates on the API server, which needs namespace %s to exist; create it first (kubectl create namespace %s) or use 'onprem render' to review the objects offline", res.Namespace, res.Namespace)
		} else if err != nil {
			return fmt.Errorf("reading namespace %s: %w", res.Namespace, err)
		}
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := o.Client.CoreV1().Namespaces().Apply(ctx, ac, opts); err != nil {
		return fmt.Errorf("applying namespace %s: %w", res.Namespace, err)
	}
	return nil
}
