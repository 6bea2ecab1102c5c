package fault

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The API server's words for pods its admission refuses. The controller
// retries, and is refused again until someone changes the pods or the
// policy; anything else that stops a controller creating pods (a
// ServiceAccount not there yet, a namespace being deleted) may pass.
var (
	refusedPodSecurity = regexp.MustCompile(`(?i)violates PodSecurity`)
	refusedQuota       = regexp.MustCompile(`(?i)exceeded quota|must specify (limits|requests)\.`)
	refusedLimitRange  = regexp.MustCompile(`(?i)(maximum|minimum) \S+ usage per (container|pod)|limit to request ratio`)
	refusedWebhook     = regexp.MustCompile(`(?i)admission webhook .* denied|denied the request`)
)

// refusal says which admission refused pods, and what to do, or "" when the
// message is not a refusal.
func refusal(msg, ns, comp string) (what, fix string) {
	switch {
	case refusedPodSecurity.MatchString(msg):
		return "pod security", fmt.Sprintf("onprem's own pods meet the namespace's pod security level: an overlay or values (spec.components.%s.values) that add privileges (privileged, host paths or network, capabilities, running as root) break it; remove them, or have the cluster's administrator relax the pod-security.kubernetes.io/enforce label of namespace %s; then run the command again", orUnknown(comp), ns)
	case refusedQuota.MatchString(msg):
		return "a resource quota", fmt.Sprintf("the ResourceQuota of namespace %s has no room for the pods (kubectl describe resourcequota -n %s): raise it, or lower the requests (spec.profile, spec.components.%s.values); a rolling update needs room for one more pod per Deployment; then run the command again", ns, ns, orUnknown(comp))
	case refusedLimitRange.MatchString(msg):
		return "a limit range", fmt.Sprintf("the LimitRange of namespace %s refuses the pods' resources: change their requests and limits (spec.profile, spec.components.%s.values) or the LimitRange; then run the command again", ns, orUnknown(comp))
	case refusedWebhook.MatchString(msg):
		return "an admission webhook", "an admission webhook of the cluster refuses the pods: its message above says why; change what it asks for (an overlay, the component's values), or have the webhook's owner allow the platform's namespace; then run the command again"
	}
	return "", ""
}

// controllers: a ReplicaSet, StatefulSet, DaemonSet or Job that cannot
// create its pods.
func (a *analysis) controllers() {
	for i := range a.o.ReplicaSets {
		rs := &a.o.ReplicaSets[i]
		for _, c := range rs.Status.Conditions {
			if c.Type == appsv1.ReplicaSetReplicaFailure && c.Status == corev1.ConditionTrue {
				a.failedCreate("ReplicaSet", rs, c.Reason+": "+c.Message, c.LastTransitionTime.Time,
					fmt.Sprintf("ReplicaSet %s: ReplicaFailure %s: %s", rs.Name, c.Reason, c.Message))
			}
		}
	}
	for i := range a.o.StatefulSets {
		a.failedCreateEvent("StatefulSet", &a.o.StatefulSets[i])
	}
	for i := range a.o.DaemonSets {
		a.failedCreateEvent("DaemonSet", &a.o.DaemonSets[i])
	}
	for i := range a.o.Jobs {
		a.failedCreateEvent("Job", &a.o.Jobs[i])
	}
}

func (a *analysis) failedCreateEvent(kind string, o metav1.Object) {
	var newest *corev1.Event
	for i := range a.o.Events {
		e := &a.o.Events[i]
		if e.InvolvedObject.Kind != kind || e.InvolvedObject.Name != o.GetName() || e.Reason != "FailedCreate" || (a.in.Fresh != nil && !a.in.Fresh(e)) {
			continue
		}
		if newest == nil || EventTime(e).After(EventTime(newest)) {
			newest = e
		}
	}
	if newest == nil {
		return
	}
	a.failedCreate(kind, o, newest.Message, EventTime(newest), fmt.Sprintf("%s %s: event FailedCreate: %s", kind, o.GetName(), strings.TrimSpace(newest.Message)))
}

func (a *analysis) failedCreate(kind string, o metav1.Object, msg string, since time.Time, evidence string) {
	comp := a.component(kind, o)
	what, fix := refusal(msg, a.o.Namespace, comp)
	f := Fault{Component: comp, Object: Object(kind, a.o.Namespace, o.GetName()), Since: since, Evidence: []string{evidence}}
	if what == "" {
		f.Title = fmt.Sprintf("%s %s of component %s cannot create its pods", kind, o.GetName(), orUnknown(comp))
		f.Waiting = "cannot create pods yet: " + short(msg, 100)
		a.out = append(a.out, f)
		return
	}
	f.Analyzer, f.Definitive = AdmissionRefused, true
	f.Title = fmt.Sprintf("the API server refuses the pods of %s %s (component %s): %s", kind, o.GetName(), orUnknown(comp), what)
	f.Remediation = fix
	a.out = append(a.out, f)
}

// JobKind says what a platform Job is for, and how to run it again.
func JobKind(j *batchv1.Job) (what, fix string) {
	for _, r := range j.OwnerReferences {
		if r.Kind == "CronJob" {
			return "scheduled backup", "read its log above; 'onprem status' shows the backups; 'onprem backup create' writes one now, with the same configuration (spec.backup)"
		}
	}
	switch n := j.Name; {
	case strings.Contains(n, "db-provision"):
		return "database provisioning", "read its log above (a database that does not answer, or an admin password that does not match the database's): fix the database, then run 'onprem install' again, which runs it again"
	case strings.Contains(n, "migrat"):
		return "data migration", "the upgrade that ran it rolled back; read its log above, fix the cause, and run 'onprem upgrade apply' again: completed migrations are not run twice"
	case strings.Contains(n, "backup"):
		return "backup", "the upgrade that ran it stopped before changing anything; read its log above (a full volume shows in volume-full) and run 'onprem upgrade apply' again"
	}
	return "job", "read its log above and run the command that created it again"
}

// jobs: a Job that failed (past its backoff limit or its deadline). A
// scheduled Job that failed and was followed by one that succeeded is
// history, not a fault.
func (a *analysis) jobs() {
	lastOK := map[string]time.Time{}
	for _, j := range a.o.Jobs {
		if j.Status.Succeeded > 0 {
			for _, r := range j.OwnerReferences {
				if t := j.CreationTimestamp.Time; t.After(lastOK[r.Name]) {
					lastOK[r.Name] = t
				}
			}
		}
	}
	for i := range a.o.Jobs {
		j := &a.o.Jobs[i]
		var failed *batchv1.JobCondition
		for k, c := range j.Status.Conditions {
			if (c.Type == batchv1.JobFailed || c.Type == batchv1.JobFailureTarget) && c.Status == corev1.ConditionTrue {
				failed = &j.Status.Conditions[k]
			}
		}
		if failed == nil {
			continue
		}
		superseded := false
		for _, r := range j.OwnerReferences {
			if lastOK[r.Name].After(j.CreationTimestamp.Time) {
				superseded = true
			}
		}
		if superseded {
			continue
		}
		what, fix := JobKind(j)
		ev := []string{fmt.Sprintf("Job %s: %s: %s", j.Name, failed.Reason, failed.Message)}
		for k := range a.o.Pods {
			p := &a.o.Pods[k]
			if p.Labels["job-name"] != j.Name && p.Labels["batch.kubernetes.io/job-name"] != j.Name {
				continue
			}
			for _, cs := range statuses(p) {
				if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
					ev = append(ev, fmt.Sprintf("pod %s container %s exited %d: %s %s", p.Name, cs.Name, t.ExitCode, t.Reason, strings.TrimSpace(t.Message)))
				}
				if a.in.Log == nil {
					continue
				}
				if text, err := a.in.Log(p.Name, cs.Name, false); err == nil {
					for _, line := range Tail(text, 5) {
						ev = append(ev, "log: "+line)
					}
				}
			}
		}
		if len(ev) > 12 {
			ev = ev[:12]
		}
		comp := a.component("Job", j)
		a.out = append(a.out, Fault{Analyzer: JobFailed, Definitive: true, Component: comp, Object: Object("Job", a.o.Namespace, j.Name),
			Title: fmt.Sprintf("%s Job %s failed", what, j.Name), Evidence: ev, Remediation: fix, Since: failed.LastTransitionTime.Time})
	}
}
