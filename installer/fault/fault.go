// Package fault tells why a workload of the platform is not ready, from what
// the cluster shows of it (its pods, their controllers and their events),
// and whether waiting can fix it. Doctor's workload analyzers
// (installer/doctor) and the wait of every apply (installer/apply) read the
// same classification, so that the failure an install or an upgrade stops
// on is named, with its fix, exactly as 'onprem doctor' names it.
//
// A Fault is definitive when it cannot resolve by itself: the registry
// says an image does not exist or refuses the credentials, an image
// reference is invalid, a container's configuration names a Secret or
// ConfigMap key that is not there, the API server's admission refuses the
// pods (pod security, quota, a webhook), a Job failed past its backoff
// limit, a container crashed a few times in a row with the same exit code.
// Anything else (a registry that does not answer, a pull under way, a pod
// waiting for capacity, a readiness probe not passing yet) is transient:
// waiting may fix it, and Waiting says what is waited for.
package fault

import (
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/render"
)

// Analyzer IDs: the doctor analyzer that reports each kind of fault.
const (
	ImagePull        = "image-pull"
	CrashLoop        = "crash-loop"
	OOMKilled        = "oom-killed"
	ConfigError      = "config-error"
	AdmissionRefused = "admission-refused"
	JobFailed        = "job-failed"
	PodPending       = "pod-pending"
)

// CrashLoopRestarts is how many restarts with the same exit code make a
// crash loop definitive: a service that cannot reach a dependency yet
// crashes a time or two and then starts; one that crashed three times in a
// row the same way will not start by itself.
const CrashLoopRestarts = 3

// Fault is one reason a workload is not ready.
type Fault struct {
	// Analyzer is the ID of the doctor analyzer that reports it ("" for
	// a state doctor does not report: a pull under way, a probe not
	// passing yet).
	Analyzer string
	// Definitive: waiting cannot fix it.
	Definitive bool
	// Component is the platform component of Object ("" when unknown).
	Component string
	// Object is the object it is about: Kind/namespace/name.
	Object string
	// Title says what is wrong in one line; Evidence the facts it rests
	// on; Remediation what to do.
	Title       string
	Evidence    []string
	Remediation string
	// Waiting says, for a progress line, what a transient fault waits
	// for ("pulling image"); Since is when it began (zero: unknown).
	Waiting string
	Since   time.Time
}

// Objects are one namespace's objects to judge.
type Objects struct {
	Namespace    string
	Pods         []corev1.Pod
	ReplicaSets  []appsv1.ReplicaSet
	StatefulSets []appsv1.StatefulSet
	DaemonSets   []appsv1.DaemonSet
	Jobs         []batchv1.Job
	Events       []corev1.Event
}

// Input is what Analyze reads besides the objects.
type Input struct {
	// Now is the time the objects are judged at (zero: time.Now).
	Now time.Time
	// Component names the platform component of an object of kind (nil:
	// its labels).
	Component func(kind string, o metav1.Object) string
	// Log returns a container's log (previous: of its last run);
	// ErrNotCollected when it was not read. Nil: no logs.
	Log func(pod, container string, previous bool) (string, error)
	// Fresh says whether an event counts (nil: every event). An apply
	// counts only the events that happened while it waits, so that an
	// earlier failure that is over does not fail it.
	Fresh func(e *corev1.Event) bool
	// Restarts holds the exit codes seen in earlier looks at the same
	// pods (nil: this look only).
	Restarts *Restarts
	// ConfigAtRunTime says that the objects' own components create, once
	// running, Secrets and ConfigMaps that others of them read (an
	// upstream chart such as the GitOps runtime's: its app-proxy makes the
	// runtime's tokens, its Argo CD server the admin Secret). A container
	// that cannot start for want of one is then waited for, not a
	// definitive fault. The platform's charts make none: every Secret they
	// read exists before they are applied.
	ConfigAtRunTime bool
}

// ErrNotCollected is Input.Log's answer for a log that was not read.
var ErrNotCollected = fmt.Errorf("not collected")

// Analyze returns the faults of the objects: definitive ones first, then
// the others, each in the order of the objects.
func Analyze(o *Objects, in Input) []Fault {
	if in.Now.IsZero() {
		in.Now = time.Now()
	}
	a := &analysis{o: o, in: in}
	a.pods()
	a.controllers()
	a.jobs()
	out := a.out
	slices.SortStableFunc(out, func(x, y Fault) int {
		switch {
		case x.Definitive == y.Definitive:
			return 0
		case x.Definitive:
			return -1
		}
		return 1
	})
	return out
}

type analysis struct {
	o   *Objects
	in  Input
	out []Fault
	// pulls merges the image pull faults of one image of one component.
	pulls map[[2]string]int
}

func (a *analysis) component(kind string, o metav1.Object) string {
	if a.in.Component != nil {
		return a.in.Component(kind, o)
	}
	return ComponentOf(o.GetLabels(), "")
}

// ComponentOf returns the component an object's labels name, or fallback.
func ComponentOf(l map[string]string, fallback string) string {
	if c := l[render.ComponentLabel]; c != "" {
		return c
	}
	if c := l["app.kubernetes.io/instance"]; c != "" {
		return c
	}
	return fallback
}

// Object names an object for a finding: Kind/namespace/name.
func Object(kind, ns, name string) string {
	if ns == "" {
		return kind + "/" + name
	}
	return fmt.Sprintf("%s/%s/%s", kind, ns, name)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// Events returns the lines of the warning events about an object (the
// last five, newest last).
func (o *Objects) events(kind, name string, fresh func(*corev1.Event) bool) []string {
	var out []string
	for i := range o.Events {
		e := &o.Events[i]
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Type != corev1.EventTypeNormal && (fresh == nil || fresh(e)) {
			out = append(out, fmt.Sprintf("event %s: %s", e.Reason, strings.TrimSpace(e.Message)))
		}
	}
	if len(out) > 5 {
		out = out[len(out)-5:]
	}
	return slices.Compact(out)
}

// messages returns the messages of the events of reason about an object,
// newest last.
func (o *Objects) messages(kind, name, reason string, fresh func(*corev1.Event) bool) []string {
	var evs []*corev1.Event
	for i := range o.Events {
		e := &o.Events[i]
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name && e.Reason == reason && (fresh == nil || fresh(e)) {
			evs = append(evs, e)
		}
	}
	slices.SortStableFunc(evs, func(x, y *corev1.Event) int { return EventTime(x).Compare(EventTime(y)) })
	var out []string
	for _, e := range evs {
		out = append(out, strings.TrimSpace(e.Message))
	}
	return out
}

// EventTime is when an event last happened.
func EventTime(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// Since says how long ago t was, rounded for humans.
func Since(now, t time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return d.Round(time.Minute).String()
	default:
		return d.Round(time.Hour).String()
	}
}

// Tail returns the last n non-empty lines of a log.
func Tail(text string, n int) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		if strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

func short(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n-3] + "..."
	}
	return s
}

// shortTail keeps the end of a message, where an error chain says why.
func shortTail(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return "..." + s[len(s)-n+3:]
	}
	return s
}
