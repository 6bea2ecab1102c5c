package backup

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
)

// ReplicasAnnotation keeps, on a Deployment a restore stopped, how many
// replicas it had: a restore killed while the services are stopped is
// finished by the next run, which finds them here.
const ReplicasAnnotation = "onprem.dev/restore-replicas"

// StopServices suspends the scheduled backup (see SuspendAnnotation),
// scales the Deployments of components to zero, noting their replicas in
// ReplicasAnnotation (kept from an earlier interrupted run), and waits
// until their pods are gone: nothing writes to the databases, and no
// scheduled backup reads them, while they are restored or replaced.
func StopServices(ctx context.Context, c kubernetes.Interface, ns string, components []string) ([]string, error) {
	deps, err := deployments(ctx, c, ns, components)
	if err != nil {
		return nil, err
	}
	if _, err := pauseSchedules(ctx, c, ns); err != nil {
		return nil, err
	}
	var stopped []string
	for _, d := range deps {
		replicas := "1"
		if d.Spec.Replicas != nil {
			replicas = strconv.Itoa(int(*d.Spec.Replicas))
		}
		if prev, ok := d.Annotations[ReplicasAnnotation]; ok {
			replicas = prev // stopped by an earlier run: its count is the real one
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"replicas":0}}`, ReplicasAnnotation, replicas)
		if _, err := c.AppsV1().Deployments(ns).Patch(ctx, d.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "onprem-restore"}); err != nil {
			return stopped, fmt.Errorf("stopping deployment %s: %w", d.Name, err)
		}
		stopped = append(stopped, d.Name)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, d := range deps {
			pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: metav1.FormatLabelSelector(d.Spec.Selector)})
			if err != nil || len(pods.Items) > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return stopped, fmt.Errorf("waiting for the services' pods to stop: %w", err)
	}
	return stopped, nil
}

// StartServices gives every Deployment of namespace that StopServices
// stopped its replicas back, resumes the scheduled backup (the data is
// back), and waits until the services are available.
func StartServices(ctx context.Context, c kubernetes.Interface, ns string, timeout time.Duration) ([]string, error) {
	started, err := endStop(ctx, c, ns, true)
	if err != nil {
		return started, err
	}
	var waiting []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		waiting = waiting[:0]
		for _, name := range started {
			d, err := c.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || !available(d) {
				waiting = append(waiting, name)
			}
		}
		return len(waiting) == 0, nil
	})
	if err != nil {
		return started, fmt.Errorf("services not available again after the restore: %s: %w", strings.Join(waiting, ", "), err)
	}
	return started, nil
}

// ReleaseServices undoes StopServices without starting the services: the
// note of their replicas goes (they stay at zero) and the scheduled backups
// resume. It is for a caller that applies the services next in another
// form (the move between spec.availability single and high): the apply
// sets their replicas and their new pod template at once, so they start
// once, in the form they keep, instead of starting in the old form only
// to be rolled. The apply sees a Deployment at zero as drifted from its
// release and repairs it even when nothing else of it changed.
func ReleaseServices(ctx context.Context, c kubernetes.Interface, ns string) ([]string, error) {
	return endStop(ctx, c, ns, false)
}

// endStop removes StopServices' note from every Deployment of namespace
// that carries it, giving back the replicas it noted when start is set
// (zero stays otherwise), and resumes the scheduled backups. It returns
// the Deployments it changed.
func endStop(ctx context.Context, c kubernetes.Interface, ns string, start bool) ([]string, error) {
	list, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the services' deployments: %w", err)
	}
	var changed []string
	for _, d := range list.Items {
		replicas, ok := d.Annotations[ReplicasAnnotation]
		if !ok {
			continue
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, ReplicasAnnotation)
		if start {
			n, err := strconv.Atoi(replicas)
			if err != nil || n < 0 {
				n = 1
			}
			patch = fmt.Sprintf(`{"metadata":{"annotations":{%q:null}},"spec":{"replicas":%d}}`, ReplicasAnnotation, n)
		}
		if _, err := c.AppsV1().Deployments(ns).Patch(ctx, d.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "onprem-restore"}); err != nil {
			return changed, fmt.Errorf("ending the stop of deployment %s: %w", d.Name, err)
		}
		changed = append(changed, d.Name)
	}
	if _, err := resumeSchedules(ctx, c, ns); err != nil {
		return changed, err
	}
	return changed, nil
}

func available(d *appsv1.Deployment) bool {
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas >= want && d.Status.AvailableReplicas >= want
}

func deployments(ctx context.Context, c kubernetes.Interface, ns string, components []string) ([]appsv1.Deployment, error) {
	if len(components) == 0 {
		return nil, nil
	}
	sel := componentLabel + " in (" + strings.Join(components, ",") + ")"
	list, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
	if err != nil {
		return nil, fmt.Errorf("listing the services' deployments: %w", err)
	}
	return list.Items, nil
}

// componentLabel selects a component's objects (render.ComponentLabel).
const componentLabel = "onprem.dev/component"
