package apply

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/render"
)

// maxEvents bounds the warning events reported per component.
const maxEvents = 8

// diagnose explains why a component is not ready: its pods that are not
// ready (conditions, container waiting and termination reasons) and the
// recent warning events of its objects and pods. Best effort: what cannot
// be read is said, not hidden.
func diagnose(ctx context.Context, c kubernetes.Interface, namespace string, comp *render.Component) []string {
	if c == nil {
		return nil
	}
	var out []string
	names := map[string]bool{}
	for _, o := range comp.Objects {
		names[o.GetName()] = true
	}
	pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + comp.Name})
	if err != nil {
		out = append(out, "cannot list pods: "+err.Error())
	} else {
		for _, p := range pods.Items {
			names[p.Name] = true
			if line := podProblem(&p); line != "" {
				out = append(out, line)
			}
		}
	}
	events, err := c.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "type=Warning"})
	if err != nil {
		return append(out, "cannot list events: "+err.Error())
	}
	var mine []corev1.Event
	for _, e := range events.Items {
		if names[e.InvolvedObject.Name] {
			mine = append(mine, e)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return eventTime(&mine[i]).After(eventTime(&mine[j]).Time) })
	for i, e := range mine {
		if i == maxEvents {
			break
		}
		out = append(out, fmt.Sprintf("event %s/%s: %s: %s", e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, strings.TrimSpace(e.Message)))
	}
	return out
}

func eventTime(e *corev1.Event) metav1.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp
	case !e.EventTime.IsZero():
		return metav1.NewTime(e.EventTime.Time)
	}
	return e.CreationTimestamp
}

// podProblem describes a pod that is not ready, or "" if it is.
func podProblem(p *corev1.Pod) string {
	if p.Status.Phase == corev1.PodSucceeded {
		return ""
	}
	var why []string
	ready := false
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			ready = true
		}
		if cond.Status != corev1.ConditionTrue && (cond.Reason != "" || cond.Message != "") && cond.Type != corev1.ContainersReady {
			why = append(why, strings.TrimSpace(fmt.Sprintf("%s: %s %s", cond.Type, cond.Reason, cond.Message)))
		}
	}
	for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		switch {
		case cs.State.Waiting != nil:
			why = append(why, strings.TrimSpace(fmt.Sprintf("container %s waiting: %s %s", cs.Name, cs.State.Waiting.Reason, cs.State.Waiting.Message)))
		case cs.State.Terminated != nil && cs.State.Terminated.ExitCode != 0:
			why = append(why, strings.TrimSpace(fmt.Sprintf("container %s terminated: %s (exit %d) %s", cs.Name, cs.State.Terminated.Reason, cs.State.Terminated.ExitCode, cs.State.Terminated.Message)))
		}
		if cs.RestartCount > 0 {
			why = append(why, fmt.Sprintf("container %s restarted %d times", cs.Name, cs.RestartCount))
		}
	}
	if ready && p.Status.Phase == corev1.PodRunning {
		return ""
	}
	if len(why) == 0 {
		why = append(why, "phase "+string(p.Status.Phase))
	}
	return fmt.Sprintf("pod %s not ready: %s", p.Name, strings.Join(why, "; "))
}
