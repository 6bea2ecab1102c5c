package action

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/state"
)

// scheduledBackup names the CronJob of scheduled backups (charts/backup).
const scheduledBackup = "onprem-backup"

// BackupStatus is how the platform's backups are doing.
type BackupStatus struct {
	// Schedule and TimeZone are the scheduled backups' (empty: none).
	Schedule string `json:"schedule,omitempty"`
	TimeZone string `json:"timeZone,omitempty"`
	// LastScheduled and LastSuccessful are the CronJob's.
	LastScheduled  *time.Time `json:"lastScheduled,omitempty"`
	LastSuccessful *time.Time `json:"lastSuccessful,omitempty"`
	// Running is set while a scheduled backup runs.
	Running bool `json:"running,omitempty"`
	// Last is the newest backup recorded in the history (manual,
	// scheduled, or before an upgrade step).
	Last *state.Operation `json:"last,omitempty"`
	// Failed says why the newest scheduled backup failed, also when it
	// failed before it could record itself (an image that cannot be
	// pulled, a Secret that is missing).
	Failed string `json:"failed,omitempty"`
}

// backupStatus reads the scheduled backups' CronJob and Jobs, and the
// newest backup of the history; nil when there is neither.
func backupStatus(ctx context.Context, c kubernetes.Interface, ns string, st *state.State) (*BackupStatus, error) {
	out := &BackupStatus{}
	for i := len(st.History) - 1; i >= 0; i-- {
		if st.History[i].Kind == state.KindBackup {
			op := st.History[i]
			out.Last = &op
			break
		}
	}
	cj, err := c.BatchV1().CronJobs(ns).Get(ctx, scheduledBackup, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if out.Last == nil {
			return nil, nil
		}
		return out, nil
	case err != nil:
		return nil, fmt.Errorf("reading the scheduled backups (CronJob %s): %w", scheduledBackup, err)
	}
	out.Schedule = cj.Spec.Schedule
	if cj.Spec.TimeZone != nil {
		out.TimeZone = *cj.Spec.TimeZone
	}
	if t := cj.Status.LastScheduleTime; t != nil {
		out.LastScheduled = &t.Time
	}
	if t := cj.Status.LastSuccessfulTime; t != nil {
		out.LastSuccessful = &t.Time
	}
	jobs, err := c.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + scheduledBackup})
	if err != nil {
		return nil, fmt.Errorf("reading the scheduled backups' Jobs: %w", err)
	}
	if len(jobs.Items) == 0 {
		return out, nil
	}
	slices.SortFunc(jobs.Items, func(a, b batchv1.Job) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	newest := jobs.Items[len(jobs.Items)-1]
	for _, cond := range newest.Status.Conditions {
		if cond.Type == batchv1.JobFailed && cond.Status == corev1.ConditionTrue {
			out.Failed = fmt.Sprintf("job %s at %s: %s", newest.Name, newest.CreationTimestamp.Format(time.RFC3339), jobFailure(ctx, c, &newest, cond))
		}
	}
	if newest.Status.Active > 0 {
		out.Running = true
		if why := podsWaiting(ctx, c, &newest); why != "" {
			out.Failed = fmt.Sprintf("job %s is stuck: %s", newest.Name, why)
		}
	}
	return out, nil
}

// jobFailure says why a Job failed: its condition and its pods'
// containers.
func jobFailure(ctx context.Context, c kubernetes.Interface, j *batchv1.Job, cond batchv1.JobCondition) string {
	parts := []string{strings.TrimSpace(cond.Reason + " " + cond.Message)}
	pods, err := c.CoreV1().Pods(j.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + j.Name})
	if err == nil {
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
					msg := fmt.Sprintf("container exited with code %d", t.ExitCode)
					if m := strings.TrimSpace(t.Message); m != "" {
						msg += ": " + m
					}
					parts = append(parts, msg)
				}
			}
		}
	}
	return strings.Join(parts, "; ") + fmt.Sprintf(" (logs: kubectl -n %s logs job/%s)", j.Namespace, j.Name)
}

// podsWaiting names the reasons a running Job's pods wait (an image that
// cannot be pulled, a missing Secret), or "".
func podsWaiting(ctx context.Context, c kubernetes.Interface, j *batchv1.Job) string {
	pods, err := c.CoreV1().Pods(j.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + j.Name})
	if err != nil {
		return ""
	}
	for _, p := range pods.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
				return strings.TrimSpace(w.Reason + ": " + w.Message)
			}
		}
	}
	return ""
}
