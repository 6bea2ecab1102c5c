package backup

import (
	"context"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// SuspendAnnotation keeps, on a CronJob that StopServices suspended, the
// suspend value it had before ("true" or "false"): a scheduled backup
// must not read databases that are being replaced (it would store a
// partial backup, which retention could keep in place of good ones), and
// a restore or move killed in the middle is finished by the next run,
// which resumes the schedule from here.
const SuspendAnnotation = "onprem.dev/restore-suspend"

// pauseSchedules suspends every CronJob of ns (the scheduled backup), so
// that none starts while the databases are replaced. A backup already
// running holds the installation's lock, which the restore or install
// that calls this holds now: none is running.
func pauseSchedules(ctx context.Context, c kubernetes.Interface, ns string) ([]string, error) {
	list, err := c.BatchV1().CronJobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the scheduled backups (CronJobs) of %s: %w", ns, err)
	}
	var paused []string
	for _, cj := range list.Items {
		if _, ok := cj.Annotations[SuspendAnnotation]; ok {
			paused = append(paused, cj.Name)
			continue // paused by an earlier, interrupted run: its value is the real one
		}
		was := cj.Spec.Suspend != nil && *cj.Spec.Suspend
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}},"spec":{"suspend":true}}`, SuspendAnnotation, strconv.FormatBool(was))
		if _, err := c.BatchV1().CronJobs(ns).Patch(ctx, cj.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "onprem-restore"}); err != nil {
			return paused, fmt.Errorf("suspending the scheduled backup %s: %w", cj.Name, err)
		}
		paused = append(paused, cj.Name)
	}
	return paused, nil
}

// resumeSchedules gives every CronJob of ns that pauseSchedules suspended
// its own suspend value back.
func resumeSchedules(ctx context.Context, c kubernetes.Interface, ns string) ([]string, error) {
	list, err := c.BatchV1().CronJobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the scheduled backups (CronJobs) of %s: %w", ns, err)
	}
	var resumed []string
	for _, cj := range list.Items {
		was, ok := cj.Annotations[SuspendAnnotation]
		if !ok {
			continue
		}
		suspend, err := strconv.ParseBool(was)
		if err != nil {
			suspend = false
		}
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:null}},"spec":{"suspend":%t}}`, SuspendAnnotation, suspend)
		if _, err := c.BatchV1().CronJobs(ns).Patch(ctx, cj.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: "onprem-restore"}); err != nil {
			return resumed, fmt.Errorf("resuming the scheduled backup %s: %w", cj.Name, err)
		}
		resumed = append(resumed, cj.Name)
	}
	return resumed, nil
}
