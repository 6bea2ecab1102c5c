package fault

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var now = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

const image = "registry.example.com/onprem/gitops-api:2.9.0"

func pod(name string, cs ...corev1.ContainerStatus) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem", UID: types.UID("uid-" + name), Labels: map[string]string{"onprem.dev/component": "gitops-api"}},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: cs}}
}

func waiting(reason, msg string) corev1.ContainerStatus {
	return corev1.ContainerStatus{Name: "app", Image: image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

func crashing(restarts, code int32, reason string) corev1.ContainerStatus {
	cs := waiting("CrashLoopBackOff", "back-off 40s restarting failed container")
	cs.RestartCount = restarts
	cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}
	return cs
}

func one(t *testing.T, o *Objects, in Input) Fault {
	t.Helper()
	fs := Analyze(o, in)
	if len(fs) != 1 {
		t.Fatalf("want one fault, got %d: %+v", len(fs), fs)
	}
	return fs[0]
}

// Each waiting reason and pull error the kubelet reports, with whether the
// wait must end on it: the registry's answers and the refusals end it,
// the network's failures and work under way do not.
func TestPodFaultsAreJudged(t *testing.T) {
	cases := []struct {
		name       string
		status     corev1.ContainerStatus
		analyzer   string
		definitive bool
		says       string // in the title
		waiting    string // in the waiting text of a transient fault
	}{
		{"not found (containerd)", waiting("ErrImagePull", `rpc error: code = NotFound desc = failed to pull and unpack image "`+image+`": failed to resolve reference "`+image+`": `+image+`: not found`),
			ImagePull, true, "the registry says it does not exist", ""},
		{"not found behind a back-off", waiting("ImagePullBackOff", `Back-off pulling image "`+image+`": ErrImagePull: reading manifest 2.9.0 in registry.example.com/onprem/gitops-api: manifest unknown`),
			ImagePull, true, "does not exist", ""},
		{"unauthorized", waiting("ErrImagePull", `failed to pull and unpack image: failed to resolve reference: unexpected status from HEAD request: 401 Unauthorized`),
			ImagePull, true, "refuses access", ""},
		{"pull access denied", waiting("ErrImagePull", `pull access denied, repository does not exist or may require authorization: server message: insufficient_scope`),
			ImagePull, true, "refuses access", ""},
		{"invalid reference", waiting("InvalidImageName", `Failed to apply default image tag "Registry/x:": couldn't parse image name`),
			ImagePull, true, "not a valid image name", ""},
		{"never pull", waiting("ErrImageNeverPull", `Container image is not present with pull policy of Never`),
			ImagePull, true, "pull policy is Never", ""},
		{"registry times out", waiting("ErrImagePull", `failed to do request: Head "https://registry.example.com/v2/onprem/gitops-api/manifests/2.9.0": dial tcp 10.0.0.9:443: i/o timeout`),
			ImagePull, false, "cannot be reached", "registry unreachable"},
		{"registry refuses connections (not found in the host's name)", waiting("ErrImagePull", `dial tcp: lookup notfound.example.com: no such host`),
			ImagePull, false, "cannot be reached", "registry unreachable"},
		{"registry overloaded", waiting("ImagePullBackOff", `Back-off pulling image "x": ErrImagePull: unexpected status code 503 Service Unavailable`),
			ImagePull, false, "cannot be reached", "retrying"},
		{"missing key", waiting("CreateContainerConfigError", `couldn't find key password in Secret onprem/gitops-api-mongodb`),
			ConfigError, true, "couldn't find key password", ""},
		{"missing secret", waiting("CreateContainerConfigError", `secret "gitops-api-mongodb" not found`),
			ConfigError, true, "not found", ""},
		// Seen on the kind ring's HA install: the kubelet retries, the
		// container started a moment later.
		{"the kubelet's secret cache late", waiting("CreateContainerConfigError", `failed to sync secret cache: timed out waiting for the condition`),
			"", false, "waits for the kubelet to read its configuration", "waits for the kubelet: failed to sync secret cache"},
		{"the kubelet's configmap cache late", waiting("CreateContainerConfigError", `failed to sync configmap cache: timed out waiting for the condition`),
			"", false, "waits for the kubelet", "failed to sync configmap cache"},
		{"crash loop, same exit three times", crashing(3, 2, "Error"), CrashLoop, true, "keeps crashing (exit code 2)", ""},
		{"crash loop, restarted twice", crashing(2, 2, "Error"), CrashLoop, false, "keeps crashing", "restarted 2 times"},
		{"out of memory, looping", crashing(5, 137, "OOMKilled"), OOMKilled, true, "running out of memory", ""},
		{"out of memory once", func() corev1.ContainerStatus {
			cs := corev1.ContainerStatus{Name: "app", RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}
			return cs
		}(), OOMKilled, false, "running out of memory", "ran out of memory"},
		{"creating", waiting("ContainerCreating", ""), "", false, "starting containers", "starting containers"},
		{"another wait", waiting("CreateContainerError", "context deadline exceeded"), "", false, "CreateContainerError", "CreateContainerError"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := one(t, &Objects{Namespace: "onprem", Pods: []corev1.Pod{pod("gitops-api-1", c.status)}}, Input{Now: now})
			if f.Analyzer != c.analyzer || f.Definitive != c.definitive || !strings.Contains(f.Title, c.says) {
				t.Errorf("fault = %+v", f)
			}
			if f.Component != "gitops-api" || f.Object != "Pod/onprem/gitops-api-1" {
				t.Errorf("component %q object %q", f.Component, f.Object)
			}
			if c.definitive && (f.Remediation == "" || f.Waiting != "") {
				t.Errorf("definitive fault without a fix, or with a wait: %+v", f)
			}
			if !c.definitive && !strings.Contains(f.Waiting, c.waiting) {
				t.Errorf("waiting %q, want it to say %q", f.Waiting, c.waiting)
			}
		})
	}
}

// A chart whose components make Secrets at run time (the GitOps
// runtime's): a container waiting for one is waited for, and says so.
func TestConfigMadeAtRunTimeIsWaitedFor(t *testing.T) {
	o := &Objects{Namespace: "codefresh", Pods: []corev1.Pod{pod("gitops-api-1", waiting("CreateContainerConfigError", `secret "codefresh-token" not found`))}}
	f := one(t, o, Input{Now: now, ConfigAtRunTime: true})
	if f.Definitive || f.Analyzer != "" || !strings.Contains(f.Waiting, `container app waits: secret "codefresh-token" not found`) ||
		!strings.Contains(f.Title, "waits for what another of its components makes") {
		t.Errorf("fault = %+v", f)
	}
	if f := one(t, o, Input{Now: now}); !f.Definitive || f.Analyzer != ConfigError {
		t.Errorf("the platform's charts make no Secret at run time: %+v", f)
	}
}

// An ImagePullBackOff whose message does not carry the error (older
// kubelets) is judged on the pod's newest failed pull; an earlier network
// failure does not hide the registry's answer, nor an event from before
// the wait (Fresh) count.
func TestBackOffIsJudgedOnTheNewestFailedPull(t *testing.T) {
	p := pod("gitops-api-1", waiting("ImagePullBackOff", `Back-off pulling image "`+image+`"`))
	ev := func(uid, msg string, at time.Time) corev1.Event {
		return corev1.Event{ObjectMeta: metav1.ObjectMeta{UID: types.UID("e-" + uid)}, Type: corev1.EventTypeWarning, Reason: "Failed",
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: p.Name}, Message: msg, LastTimestamp: metav1.NewTime(at)}
	}
	o := &Objects{Namespace: "onprem", Pods: []corev1.Pod{p}, Events: []corev1.Event{
		ev("c", "Error: ImagePullBackOff", now),
		ev("b", "Failed to pull image: rpc error: code = NotFound desc = not found", now.Add(-time.Second)),
		ev("a", "Failed to pull image: dial tcp 10.0.0.9:443: i/o timeout", now.Add(-time.Minute)),
	}}
	if f := one(t, o, Input{Now: now}); !f.Definitive || !strings.Contains(f.Title, "does not exist") {
		t.Errorf("newest pull said not found: %+v", f)
	}
	old := func(e *corev1.Event) bool {
		return !strings.Contains(e.Message, "NotFound") && !strings.Contains(e.Message, "timeout")
	}
	if f := one(t, o, Input{Now: now, Fresh: old}); f.Definitive {
		t.Errorf("a stale not-found event ended the wait: %+v", f)
	}
}

// The same image of one component in three pods is one fault with each
// pod in its evidence.
func TestOneFaultPerImageOfAComponent(t *testing.T) {
	msg := "code = NotFound desc = not found"
	o := &Objects{Namespace: "onprem", Pods: []corev1.Pod{pod("a", waiting("ErrImagePull", msg)), pod("b", waiting("ImagePullBackOff", "Back-off: ErrImagePull: "+msg)), pod("c", waiting("ErrImagePull", msg))}}
	f := one(t, o, Input{Now: now})
	if got := strings.Join(f.Evidence, "\n"); !strings.Contains(got, "pod b container app") || !strings.Contains(got, "pod c container app") {
		t.Errorf("evidence: %s", got)
	}
}

// A crash loop is definitive only when every exit seen had the same code:
// a container that exited 1 then 2 then 2 may be waiting for something.
func TestCrashLoopWantsTheSameExitCode(t *testing.T) {
	var r Restarts
	look := func(restarts, code int32) Fault {
		return one(t, &Objects{Namespace: "onprem", Pods: []corev1.Pod{pod("p", crashing(restarts, code, "Error"))}}, Input{Now: now, Restarts: &r})
	}
	if f := look(1, 1); f.Definitive {
		t.Errorf("first exit: %+v", f)
	}
	if f := look(2, 2); f.Definitive {
		t.Errorf("second exit: %+v", f)
	}
	if f := look(3, 2); f.Definitive {
		t.Errorf("exit codes 1, 2, 2 ended the wait: %+v", f)
	}
	var same Restarts
	for n := int32(1); n <= 3; n++ {
		f := one(t, &Objects{Namespace: "onprem", Pods: []corev1.Pod{pod("p", crashing(n, 3, "Error"))}}, Input{Now: now, Restarts: &same})
		if f.Definitive != (n == CrashLoopRestarts) {
			t.Errorf("restart %d (exit 3 each time): definitive %v", n, f.Definitive)
		}
	}
}

// A pod the scheduler cannot place waits for capacity; one that runs and
// is not ready waits for its probe, saying what the probe answers.
func TestPendingAndNotReadyAreWaitedFor(t *testing.T) {
	pending := pod("p")
	pending.Status = corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
		Reason: "Unschedulable", Message: "0/3 nodes are available: 3 Insufficient cpu.", LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))}}}
	f := one(t, &Objects{Namespace: "onprem", Pods: []corev1.Pod{pending}}, Input{Now: now})
	if f.Analyzer != PodPending || f.Definitive || !strings.Contains(f.Waiting, "Insufficient cpu") || !f.Since.Equal(now.Add(-time.Minute)) {
		t.Errorf("pending: %+v", f)
	}
	ready := pod("r", corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	o := &Objects{Namespace: "onprem", Pods: []corev1.Pod{ready}, Events: []corev1.Event{{Type: corev1.EventTypeWarning, Reason: "Unhealthy",
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "r"}, Message: "Readiness probe failed: HTTP probe failed with statuscode: 503"}}}
	if f := one(t, o, Input{Now: now}); f.Analyzer != "" || f.Definitive || !strings.Contains(f.Waiting, "Readiness probe failed") {
		t.Errorf("not ready: %+v", f)
	}
	ready.Status.Conditions[0].Status = corev1.ConditionTrue
	if fs := Analyze(&Objects{Namespace: "onprem", Pods: []corev1.Pod{ready}}, Input{Now: now}); len(fs) != 0 {
		t.Errorf("a ready pod: %+v", fs)
	}
}

// Pods the API server refuses: pod security, a quota, a limit range, a
// webhook end the wait; a ServiceAccount that is not there yet does not.
// A ReplicaSet says so in a condition, the other controllers in events.
func TestRefusedPods(t *testing.T) {
	rs := func(msg string) *Objects {
		return &Objects{Namespace: "onprem", ReplicaSets: []appsv1.ReplicaSet{{ObjectMeta: metav1.ObjectMeta{Name: "gitops-api-5d9f", Labels: map[string]string{"onprem.dev/component": "gitops-api"}},
			Status: appsv1.ReplicaSetStatus{Conditions: []appsv1.ReplicaSetCondition{{Type: appsv1.ReplicaSetReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: msg}}}}}}
	}
	for msg, says := range map[string]string{
		`pods "gitops-api-5d9f-x" is forbidden: violates PodSecurity "restricted:latest": privileged (container "app" must not set securityContext.privileged=true)`: "pod security",
		`pods "gitops-api-5d9f-x" is forbidden: exceeded quota: onprem-quota, requested: pods=1, used: pods=10, limited: pods=10`:                                    "a resource quota",
		`pods "gitops-api-5d9f-x" is forbidden: maximum cpu usage per Container is 1, but limit is 2`:                                                                "a limit range",
		`admission webhook "policy.example.com" denied the request: images must come from the mirror`:                                                                "an admission webhook",
	} {
		f := one(t, rs(msg), Input{Now: now})
		if f.Analyzer != AdmissionRefused || !f.Definitive || !strings.HasSuffix(f.Title, says) || f.Component != "gitops-api" || f.Remediation == "" {
			t.Errorf("%s: %+v", says, f)
		}
	}
	f := one(t, rs(`pods "gitops-api-5d9f-x" is forbidden: error looking up service account onprem/gitops-api: serviceaccount "gitops-api" not found`), Input{Now: now})
	if f.Definitive || !strings.Contains(f.Waiting, "cannot create pods yet") {
		t.Errorf("service account not there yet: %+v", f)
	}
	sts := &Objects{Namespace: "onprem", StatefulSets: []appsv1.StatefulSet{{ObjectMeta: metav1.ObjectMeta{Name: "mongodb"}}},
		Events: []corev1.Event{{Type: corev1.EventTypeWarning, Reason: "FailedCreate", InvolvedObject: corev1.ObjectReference{Kind: "StatefulSet", Name: "mongodb"},
			Message: `create Pod mongodb-0 in StatefulSet mongodb failed error: pods "mongodb-0" is forbidden: violates PodSecurity "restricted:latest": hostPath volumes`}}}
	if f := one(t, sts, Input{Now: now}); !f.Definitive || f.Object != "StatefulSet/onprem/mongodb" {
		t.Errorf("statefulset: %+v", f)
	}
	if fs := Analyze(sts, Input{Now: now, Fresh: func(*corev1.Event) bool { return false }}); len(fs) != 0 {
		t.Errorf("a refusal from before the wait: %+v", fs)
	}
}

// A Job past its backoff limit ends the wait with what it is for and its
// exit; one followed by a successful run of its CronJob is history.
func TestFailedJobs(t *testing.T) {
	failed := batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "gitops-api-db-provision", UID: "j1", CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
		Status: batchv1.JobStatus{Conditions: []batchv1.JobCondition{{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Reason: "BackoffLimitExceeded", Message: "Job has reached the specified backoff limit"}}}}
	jp := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "gitops-api-db-provision-x", Labels: map[string]string{"batch.kubernetes.io/job-name": failed.Name}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "provision", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}}}}}}
	o := &Objects{Namespace: "onprem", Jobs: []batchv1.Job{failed}, Pods: []corev1.Pod{jp}}
	logs := func(pod, c string, prev bool) (string, error) { return "connecting\nauthentication failed\n", nil }
	f := one(t, o, Input{Now: now, Log: logs})
	if f.Analyzer != JobFailed || !f.Definitive || !strings.Contains(f.Title, "database provisioning Job") ||
		!strings.Contains(strings.Join(f.Evidence, "\n"), "exited 3") || !strings.Contains(strings.Join(f.Evidence, "\n"), "log: authentication failed") {
		t.Errorf("failed job: %+v", f)
	}
	own := []metav1.OwnerReference{{Kind: "CronJob", Name: "backup"}}
	o.Jobs[0].OwnerReferences = own
	o.Jobs = append(o.Jobs, batchv1.Job{ObjectMeta: metav1.ObjectMeta{Name: "backup-2", OwnerReferences: own, CreationTimestamp: metav1.NewTime(now)}, Status: batchv1.JobStatus{Succeeded: 1}})
	if fs := Analyze(o, Input{Now: now}); len(fs) != 0 {
		t.Errorf("superseded: %+v", fs)
	}
}

// Definitive faults come first, whatever the order of the objects.
func TestDefinitiveFirst(t *testing.T) {
	o := &Objects{Namespace: "onprem", Pods: []corev1.Pod{pod("a", waiting("ContainerCreating", "")), pod("b", waiting("InvalidImageName", ""))}}
	fs := Analyze(o, Input{Now: now})
	if len(fs) != 2 || !fs[0].Definitive || fs[1].Definitive {
		t.Errorf("order: %+v", fs)
	}
}

func TestRegistryOf(t *testing.T) {
	for ref, want := range map[string]string{"nginx": "docker.io", "library/nginx:1": "docker.io", "localhost/x": "localhost",
		"registry.example.com/a/b:1": "registry.example.com", "10.0.0.1:5000/x": "10.0.0.1:5000"} {
		if got := RegistryOf(ref); got != want {
			t.Errorf("RegistryOf(%q) = %q, want %q", ref, got, want)
		}
	}
}
