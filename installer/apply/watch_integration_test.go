package apply

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/fault"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
)

// faultCase is one way a component's pods fail, made real on the
// integration ring: by the simulated kubelet's stages (what a kubelet
// reports of an image pull, a container's configuration, a crash loop),
// or by the real API server and scheduler (admission, quota, capacity).
type faultCase struct {
	name string
	// annotations go on the pod template; job makes the workload a Job
	// (backoffLimit 0) instead of a Deployment.
	annotations map[string]string
	job         bool
	// one applies the component with ApplyOne, as runner and runtime
	// install do, instead of Apply.
	one bool
	// pod changes the pod spec; prepare the namespace before the apply;
	// during runs once the apply waits (the test plays the kubelet).
	pod     func(*corev1.PodSpec)
	prepare func(t *testing.T, c *testcluster.Cluster, ns string)
	during  func(t *testing.T, c *testcluster.Cluster, ns string)
	// analyzer of a definitive fault; says is in the component's error
	// (definitive) or in its waiting line (transient).
	analyzer string
	says     string
	// configAtRunTime marks the component as one whose own pods make
	// Secrets that others read (a GitOps runtime's upstream chart).
	configAtRunTime bool
}

func waitingFor(reason, message string) map[string]string {
	return map[string]string{testcluster.AnnotationWaiting: reason, testcluster.AnnotationWaitingMessage: message}
}

const webImage = "registry.example.com/onprem/web:1.0.0"

// faultComponent renders component "web" of a platform in namespace ns:
// one Deployment (or Job) whose pods the case scripts.
func faultComponent(t *testing.T, ns string, fc faultCase) *render.Result {
	t.Helper()
	no, yes, uid := false, true, int64(1000)
	spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: webImage,
		SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &no, RunAsNonRoot: &yes, RunAsUser: &uid,
			Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}}}}
	if fc.pod != nil {
		fc.pod(&spec)
	}
	labels := map[string]string{render.ComponentLabel: "web", "app.kubernetes.io/instance": "web"}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: fc.annotations}, Spec: spec}
	var obj any
	if fc.job {
		zero := int32(0)
		tmpl.Spec.RestartPolicy = corev1.RestartPolicyNever
		obj = map[string]any{"apiVersion": "batch/v1", "kind": "Job", "metadata": map[string]any{"name": "web-provision", "namespace": ns, "labels": labels},
			"spec": batchv1.JobSpec{BackoffLimit: &zero, Template: tmpl}}
	} else {
		obj = map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": "web", "namespace": ns, "labels": labels},
			"spec": map[string]any{"replicas": 1, "selector": map[string]any{"matchLabels": labels}, "template": tmpl}}
	}
	data, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(data); err != nil {
		t.Fatal(err)
	}
	unstructured.RemoveNestedField(u.Object, "spec", "template", "metadata", "creationTimestamp")
	return &render.Result{Version: "1.0.0", Namespace: ns, Components: []*render.Component{{Name: "web", Objects: []*unstructured.Unstructured{u}, ConfigAtRunTime: fc.configAtRunTime}}}
}

// firstFault is when the cluster first showed the fault: the earliest
// failed condition of the component's pods, ReplicaSets and Jobs (their
// times are the API server's, on this machine's clock).
func firstFault(t *testing.T, c *testcluster.Cluster, ns string) time.Time {
	t.Helper()
	ctx := context.Background()
	var first time.Time
	seen := func(tm metav1.Time) {
		if !tm.IsZero() && (first.IsZero() || tm.Before(&metav1.Time{Time: first})) {
			first = tm.Time
		}
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionFalse && cond.Reason != "" {
				seen(cond.LastTransitionTime)
			}
		}
	}
	rss, err := c.Client.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rs := range rss.Items {
		for _, cond := range rs.Status.Conditions {
			seen(cond.LastTransitionTime)
		}
	}
	jobs, err := c.Client.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs.Items {
		for _, cond := range j.Status.Conditions {
			if cond.Type == batchv1.JobFailed || cond.Type == batchv1.JobFailureTarget {
				seen(cond.LastTransitionTime)
			}
		}
	}
	if first.IsZero() {
		t.Fatalf("namespace %s shows no failed condition", ns)
	}
	return first
}

// waitingLines records the waiting lines reported per component.
type waitingLines struct {
	mu    sync.Mutex
	lines []string
}

func (w *waitingLines) Report(e Event) {
	if e.Phase == PhaseWaiting {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.lines = append(w.lines, e.Component+": "+describe(e))
	}
}

func (w *waitingLines) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

// Each failure that waiting cannot fix ends the component's wait within
// 15 s of the cluster first showing it (the timeout is 3 minutes): the
// component fails with a *StuckError naming the cause as doctor's
// analyzer does, with the fix.
func TestDefinitiveFaultsEndTheWait(t *testing.T) {
	c := testcluster.Start(t)
	cases := []faultCase{
		{name: "image not found", analyzer: fault.ImagePull, says: "the registry says it does not exist",
			annotations: waitingFor("ErrImagePull", `rpc error: code = NotFound desc = failed to pull and unpack image "`+webImage+`": failed to resolve reference "`+webImage+`": `+webImage+`: not found`)},
		{name: "image unauthorized", analyzer: fault.ImagePull, says: "the registry refuses access to it",
			annotations: waitingFor("ImagePullBackOff", `Back-off pulling image "`+webImage+`": ErrImagePull: failed to authorize: failed to fetch anonymous token: unexpected status: 401 Unauthorized`)},
		{name: "image not found, one component as runner and runtime install apply it", one: true, analyzer: fault.ImagePull, says: "the registry says it does not exist",
			annotations: waitingFor("ErrImagePull", `rpc error: code = NotFound desc = failed to pull and unpack image "`+webImage+`": `+webImage+`: not found`)},
		{name: "invalid image reference", analyzer: fault.ImagePull, says: "not a valid image name",
			annotations: waitingFor("InvalidImageName", `Failed to apply default image tag "registry.example.com/onprem/web:": couldn't parse image name`)},
		{name: "missing secret key", analyzer: fault.ConfigError, says: "couldn't find key password in Secret",
			annotations: waitingFor("CreateContainerConfigError", `couldn't find key password in Secret web-db`)},
		{name: "crash loop", analyzer: fault.CrashLoop, says: "keeps crashing (exit code 2)",
			annotations: map[string]string{testcluster.AnnotationWaiting: "CrashLoopBackOff", testcluster.AnnotationLastReason: "Error",
				testcluster.AnnotationRestarts: "4", testcluster.AnnotationExitCode: "2"}},
		{name: "job past its backoff limit", analyzer: fault.JobFailed, says: "Job web-provision failed", job: true,
			annotations: map[string]string{testcluster.AnnotationFail: "true", testcluster.AnnotationExitCode: "3"}},
		{name: "pod security", analyzer: fault.AdmissionRefused, says: "refuses the pods of ReplicaSet",
			pod: func(s *corev1.PodSpec) {
				yes := true
				s.Containers[0].SecurityContext.Privileged = &yes
				s.Containers[0].SecurityContext.AllowPrivilegeEscalation = &yes
			},
			prepare: func(t *testing.T, c *testcluster.Cluster, ns string) {
				createNamespace(t, c, ns, map[string]string{"pod-security.kubernetes.io/enforce": "restricted"})
			}},
		{name: "quota", analyzer: fault.AdmissionRefused, says: "a resource quota",
			prepare: func(t *testing.T, c *testcluster.Cluster, ns string) {
				createNamespace(t, c, ns, nil)
				q := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-pods"}, Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("0")}}}
				if _, err := c.Client.CoreV1().ResourceQuotas(ns).Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for i, fc := range cases {
		t.Run(fc.name, func(t *testing.T) {
			t.Parallel()
			ns := fmt.Sprintf("definitive-%d", i)
			if fc.prepare != nil {
				fc.prepare(t, c, ns)
			}
			res := faultComponent(t, ns, fc)
			var web ComponentResult
			var err error
			if fc.one {
				web, err = ApplyOne(context.Background(), &kube.Cluster{Getter: getter(c), Client: c.Client}, res.Version, ns, res.Components[0], 3*time.Minute, nil)
			} else {
				var rep *Report
				rep, err = Apply(context.Background(), Options{Getter: getter(c), Client: c.Client, Result: res, Timeout: 3 * time.Minute})
				web, _ = rep.Component("web")
			}
			ended := time.Now()
			var stuck *StuckError
			if !errors.As(err, &stuck) {
				t.Fatalf("err = %v, want a *StuckError", err)
			}
			if stuck.Fault.Analyzer != fc.analyzer || !stuck.Fault.Definitive || !strings.Contains(web.Error, fc.says) || !strings.Contains(web.Error, "fix: ") || web.Action != Failed {
				t.Errorf("web = %+v\nfault = %+v", web, stuck.Fault)
			}
			if took := ended.Sub(firstFault(t, c, ns)); took > 15*time.Second {
				t.Errorf("the wait ended %s after the cluster first showed the fault (at most 15 s)", took.Round(100*time.Millisecond))
			} else {
				t.Logf("%s: ended %s after the fault showed, %s after the apply began: %s", fc.name, took.Round(100*time.Millisecond), web.Elapsed.Round(100*time.Millisecond), web.Error)
			}
			// Helm records the release as failed, as at a timeout.
			last, lerr := NewHelmReleases(getter(c), ns, nil).Last(context.Background(), "web")
			if lerr != nil || last == nil || last.Status != "failed" {
				t.Errorf("release after the failure: %+v %v", last, lerr)
			}
		})
	}
}

// Failures that may pass keep the component waiting until its timeout,
// and the waiting line says what it waits for.
func TestTransientFaultsWaitTillTheTimeout(t *testing.T) {
	c := testcluster.Start(t)
	const timeout = 20 * time.Second
	cases := []faultCase{
		{name: "registry unreachable", says: "image pull failing, retrying: registry unreachable",
			annotations: waitingFor("ErrImagePull", `failed to pull and unpack image "`+webImage+`": failed to resolve reference: failed to do request: Head "https://registry.example.com/v2/onprem/web/manifests/1.0.0": dial tcp 10.255.0.9:443: i/o timeout`)},
		{name: "slow pull", says: "0/1 ready, pulling image",
			annotations: waitingFor("ContainerCreating", ""),
			during: func(t *testing.T, c *testcluster.Cluster, ns string) {
				// The kubelet's event, as it starts a pull.
				p := podOf(t, c, ns)
				ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: p.Name + "."}, Type: corev1.EventTypeNormal, Reason: "Pulling",
					Message:        `Pulling image "` + webImage + `"`,
					InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: p.Name, UID: p.UID, APIVersion: "v1"},
					FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1, Source: corev1.EventSource{Component: "kubelet"}}
				if _, err := c.Client.CoreV1().Events(ns).Create(context.Background(), ev, metav1.CreateOptions{}); err != nil {
					t.Error(err)
				}
			}},
		{name: "pending for capacity", says: "pending: Unschedulable",
			pod: func(s *corev1.PodSpec) {
				// kwok's nodes have 1000 CPUs each.
				s.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000000")}
			}},
		{name: "probe not passing yet", says: "0/1 ready, not ready yet",
			annotations: map[string]string{testcluster.AnnotationNeverReady: "true"}},
		{name: "a Secret another pod of the chart makes at run time (a runtime's)", configAtRunTime: true,
			says:        `container web waits: secret "codefresh-token" not found`,
			annotations: waitingFor("CreateContainerConfigError", `secret "codefresh-token" not found`)},
		{name: "crashed once", says: "crashed, restarted 1 times",
			annotations: map[string]string{testcluster.AnnotationWaiting: "CrashLoopBackOff", testcluster.AnnotationLastReason: "Error",
				testcluster.AnnotationRestarts: "1", testcluster.AnnotationExitCode: "1"}},
	}
	for i, fc := range cases {
		t.Run(fc.name, func(t *testing.T) {
			t.Parallel()
			ns := fmt.Sprintf("transient-%d", i)
			res := faultComponent(t, ns, fc)
			lines := &waitingLines{}
			if fc.during != nil {
				go func() {
					time.Sleep(3 * time.Second)
					fc.during(t, c, ns)
				}()
			}
			rep, err := Apply(context.Background(), Options{Getter: getter(c), Client: c.Client, Result: res, Timeout: timeout, Reporter: lines})
			var stuck *StuckError
			if err == nil || errors.As(err, &stuck) {
				t.Fatalf("err = %v, want the timeout", err)
			}
			web, _ := rep.Component("web")
			if web.Elapsed < timeout {
				t.Errorf("web failed after %s, before its timeout of %s: %s", web.Elapsed, timeout, web.Error)
			}
			if got := lines.all(); !strings.Contains(got, "web: ") || !strings.Contains(got, fc.says) {
				t.Errorf("waiting lines do not say %q:\n%s", fc.says, got)
			}
			if !strings.Contains(web.Error, "it was still waiting: ") {
				t.Errorf("the error does not say what it waited for: %s", web.Error)
			}
			t.Logf("%s: %s\n%s", fc.name, web.Error, lines.all())
		})
	}
}

func createNamespace(t *testing.T, c *testcluster.Cluster, ns string, labels map[string]string) {
	t.Helper()
	if _, err := c.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podOf waits for the component's pod in ns.
func podOf(t *testing.T, c *testcluster.Cluster, ns string) *corev1.Pod {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		pods, err := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err == nil && len(pods.Items) > 0 {
			return &pods.Items[0]
		}
	}
	t.Fatalf("no pod in %s", ns)
	return nil
}

// A rollback starts a Job of the revision it returns to and does not wait
// for it to finish (that revision ran the same Job before): rev 1's Job
// here never completes, and the rollback to it still returns
// within seconds, not at its bound.
func TestRollbackStartsJobsWithoutWaiting(t *testing.T) {
	c := testcluster.Start(t)
	ctx := context.Background()
	const ns = "rollback-job"
	rel := NewHelmReleases(getter(c), ns, nil)
	// Revision 1: a Job whose pod never runs to its end (it waits for a
	// node with room; applied with a short bound, its release is failed,
	// as a rollback target may be).
	running := faultComponent(t, ns, faultCase{job: true, pod: func(s *corev1.PodSpec) {
		s.Containers[0].Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1000000")}
	}})
	if _, err := Apply(ctx, Options{Getter: getter(c), Client: c.Client, Result: running, Timeout: 5 * time.Second}); err == nil {
		t.Fatal("a Job that never completes was applied as ready")
	}
	// Revision 2: another Job (another name, as a changed spec's hash
	// makes it), which completes.
	done := faultComponent(t, ns, faultCase{job: true})
	done.Components[0].Objects[0].SetName("web-provision-2")
	if _, err := Apply(ctx, Options{Getter: getter(c), Client: c.Client, Result: done, Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	const bound = time.Minute
	t0 := time.Now()
	rev, err := rel.Rollback(ctx, "web", 1, bound)
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("rollback to the revision of a running Job: %v (after %s)", err, took.Round(100*time.Millisecond))
	}
	if rev != 3 || took > 30*time.Second {
		t.Fatalf("rollback: revision %d after %s (want 3, well before its bound of %s)", rev, took.Round(100*time.Millisecond), bound)
	}
	j, err := c.Client.BatchV1().Jobs(ns).Get(ctx, "web-provision", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the rollback did not start revision 1's Job again: %v", err)
	}
	t.Logf("rolled back in %s; Job %s active %d, succeeded %d", took.Round(100*time.Millisecond), j.Name, j.Status.Active, j.Status.Succeeded)
}
