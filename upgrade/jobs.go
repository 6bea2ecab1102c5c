package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/fault"
	"onprem.dev/onprem/installer/render"
)

// DefaultBackupSize is the size of the backup claim when it is created.
const DefaultBackupSize = "20Gi"

// JobFailedError says that a backup or migration Job failed, and why as far
// as the cluster tells (the pods' termination reasons and exit codes).
type JobFailedError struct {
	Job       string
	Namespace string
	Reason    string
}

func (e *JobFailedError) Error() string {
	return fmt.Sprintf("job %s failed: %s (logs: kubectl -n %s logs job/%s)", e.Job, e.Reason, e.Namespace, e.Job)
}

// RunJob runs one task's Job to completion: a Job of the same name left by
// an earlier attempt is deleted first, then the Job is created and watched
// until it completes, fails or the timeout passes. The Job stays afterwards
// for inspection (the next run of the same task replaces it).
func RunJob(ctx context.Context, c kubernetes.Interface, namespace string, obj *unstructured.Unstructured, timeout time.Duration) error {
	var j batchv1.Job
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.Object, &j); err != nil {
		return fmt.Errorf("job %s: %w", obj.GetName(), err)
	}
	j.Namespace = namespace
	jobs := c.BatchV1().Jobs(namespace)
	if err := deleteJob(ctx, c, namespace, j.Name); err != nil {
		return err
	}
	if _, err := jobs.Create(ctx, &j, metav1.CreateOptions{FieldManager: "onprem"}); err != nil {
		return fmt.Errorf("creating job %s: %w", j.Name, err)
	}
	// The Job's own deadline (activeDeadlineSeconds) fails it on the
	// cluster's side; this bound only covers a cluster that never says.
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Minute)
	defer cancel()
	var last *batchv1.Job
	var restarts fault.Restarts
	polls := 0
	// A quarter second: a task Job of a small database finishes in about
	// a second, and each upgrade step runs several in a row.
	err := wait.PollUntilContextCancel(ctx, 250*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		got, err := jobs.Get(ctx, j.Name, metav1.GetOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				return false, fmt.Errorf("job %s was deleted while it ran", j.Name)
			}
			return false, nil // transient: poll again
		}
		last = got
		for _, cond := range got.Status.Conditions {
			if cond.Status != corev1.ConditionTrue {
				continue
			}
			switch cond.Type {
			case batchv1.JobComplete:
				return true, nil
			case batchv1.JobFailed:
				return false, &JobFailedError{Job: j.Name, Namespace: namespace, Reason: failureReason(ctx, c, namespace, got, cond)}
			}
		}
		// Once a second, its pods as apply judges a component's: a
		// failure that waiting cannot fix (an image the registry does not
		// have, a missing Secret key, pods refused by admission) fails
		// the Job now rather than at its deadline.
		if polls++; polls%4 == 0 {
			if f := stuckJob(ctx, c, namespace, got, &restarts); f != nil {
				return false, &JobFailedError{Job: j.Name, Namespace: namespace,
					Reason: fmt.Sprintf("%s (%s); waiting cannot fix this [doctor: %s]; fix: %s", f.Title, strings.Join(f.Evidence[:min(1, len(f.Evidence))], ""), f.Analyzer, f.Remediation)}
			}
		}
		return false, nil
	})
	if err != nil {
		var jf *JobFailedError
		if errors.As(err, &jf) {
			return jf
		}
		if ctx.Err() != nil && last != nil {
			return &JobFailedError{Job: j.Name, Namespace: namespace, Reason: fmt.Sprintf("not finished after %s (%d active pods)", timeout, last.Status.Active)}
		}
		return fmt.Errorf("job %s: %w", j.Name, err)
	}
	return nil
}

// stuckJob returns the first fault of a running Job's pods (and its
// pod-creation events) that waiting cannot fix, or nil. What cannot be
// read is left to the next look.
func stuckJob(ctx context.Context, c kubernetes.Interface, namespace string, j *batchv1.Job, restarts *fault.Restarts) *fault.Fault {
	pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + j.Name})
	if err != nil {
		return nil
	}
	events, err := c.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.kind=Job,involvedObject.name=" + j.Name})
	if err != nil {
		return nil
	}
	// Events of an earlier Job of the same name do not count.
	var mine []corev1.Event
	for _, e := range events.Items {
		if e.InvolvedObject.UID == "" || e.InvolvedObject.UID == j.UID {
			mine = append(mine, e)
		}
	}
	objs := &fault.Objects{Namespace: namespace, Pods: pods.Items, Jobs: []batchv1.Job{*j}, Events: mine}
	for _, f := range fault.Analyze(objs, fault.Input{Restarts: restarts}) {
		if f.Definitive && f.Analyzer != fault.JobFailed {
			return &f
		}
	}
	return nil
}

// deleteJob deletes a Job and its pods and waits until it is gone.
func deleteJob(ctx context.Context, c kubernetes.Interface, namespace, name string) error {
	jobs := c.BatchV1().Jobs(namespace)
	bg := metav1.DeletePropagationBackground
	err := jobs.Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting the earlier job %s: %w", name, err)
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := jobs.Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
}

// failureReason describes why a Job failed: its condition, then each of its
// pods' terminated containers.
func failureReason(ctx context.Context, c kubernetes.Interface, namespace string, j *batchv1.Job, cond batchv1.JobCondition) string {
	parts := []string{strings.TrimSpace(cond.Reason + ": " + cond.Message)}
	pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "batch.kubernetes.io/job-name=" + j.Name})
	if err == nil {
		for _, p := range pods.Items {
			for _, cs := range p.Status.ContainerStatuses {
				if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
					msg := fmt.Sprintf("pod %s container %s exited with code %d", p.Name, cs.Name, t.ExitCode)
					if t.Reason != "" {
						msg += " (" + t.Reason + ")"
					}
					parts = append(parts, msg)
				}
				if w := cs.State.Waiting; w != nil && w.Reason != "" {
					parts = append(parts, fmt.Sprintf("pod %s container %s waiting: %s %s", p.Name, cs.Name, w.Reason, w.Message))
				}
			}
		}
	}
	return strings.Join(parts, "; ")
}

// ensureBackupClaim creates the claim backups are written to, unless it
// exists. It is not part of any Helm release, so that nothing onprem does
// short of uninstall --purge deletes it.
func ensureBackupClaim(ctx context.Context, c kubernetes.Interface, namespace, storageClass, size string) error {
	claims := c.CoreV1().PersistentVolumeClaims(namespace)
	if _, err := claims.Get(ctx, render.BackupClaim, metav1.GetOptions{}); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return fmt.Errorf("reading claim %s: %w", render.BackupClaim, err)
	}
	if size == "" {
		size = DefaultBackupSize
	}
	q, err := resource.ParseQuantity(size)
	if err != nil {
		return fmt.Errorf("backup size %q: %w", size, err)
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{
			Name: render.BackupClaim, Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/managed-by": "onprem", "app.kubernetes.io/part-of": "onprem"},
		},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: q}},
		},
	}
	if storageClass != "" {
		pvc.Spec.StorageClassName = &storageClass
	}
	if _, err := claims.Create(ctx, pvc, metav1.CreateOptions{FieldManager: "onprem"}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating claim %s for backups: %w", render.BackupClaim, err)
	}
	return nil
}

// backupJob returns the task's Job writing to file (a path under
// render.BackupMount).
func backupJob(t *render.Task, file string) (*unstructured.Unstructured, error) {
	obj := t.Job.DeepCopy()
	cs, _, err := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	if err != nil || len(cs) == 0 {
		return nil, fmt.Errorf("backup %s: no container", t.Name)
	}
	c := cs[0].(map[string]any)
	env, _ := c["env"].([]any)
	set := false
	for _, e := range env {
		if m, ok := e.(map[string]any); ok && m["name"] == render.BackupFileEnv {
			m["value"] = file
			set = true
		}
	}
	if !set {
		return nil, fmt.Errorf("backup %s: no %s variable", t.Name, render.BackupFileEnv)
	}
	if err := unstructured.SetNestedSlice(obj.Object, cs, "spec", "template", "spec", "containers"); err != nil {
		return nil, err
	}
	return obj, nil
}
