package fault

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's words for an image pull that failed, sorted by whether the
// registry answered. A registry that does not answer may come back; one
// that says the image does not exist, or that the credentials are refused,
// will say so again.
var (
	pullUnreachable = regexp.MustCompile(`(?i)i/o timeout|timed? ?out|connection refused|connection reset|no such host|network is unreachable|no route to host|tls handshake|deadline exceeded|temporary failure|server misbehaving|unexpected eof|\b50[234]\b|bad gateway|service unavailable|gateway timeout|too ?many ?requests|\b429\b`)
	pullDenied      = regexp.MustCompile(`(?i)unauthorized|authentication required|\b40[13]\b|forbidden|access denied|insufficient_scope|no basic auth credentials|authorization failed|denied:`)
	pullNotFound    = regexp.MustCompile(`(?i)code ?= ?NotFound|: not found|manifest unknown|name unknown|not found: manifest|repository .*not found|\b404\b|does not exist`)
)

// pullVerdict is what a pull error says.
type pullVerdict int

const (
	pullFailing pullVerdict = iota // an error that says nothing definite: retried
	pullUnreachableRegistry
	pullImageNotFound
	pullAccessDenied
)

func judgePull(text string) pullVerdict {
	switch {
	case pullUnreachable.MatchString(text):
		return pullUnreachableRegistry
	case pullDenied.MatchString(text):
		return pullAccessDenied
	case pullNotFound.MatchString(text):
		return pullImageNotFound
	}
	return pullFailing
}

func statuses(p *corev1.Pod) []corev1.ContainerStatus {
	return append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...)
}

func container(p *corev1.Pod, name string) *corev1.Container {
	for _, list := range [][]corev1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range list {
			if list[i].Name == name {
				return &list[i]
			}
		}
	}
	return nil
}

// RegistryOf returns the registry host of an image reference (docker.io
// when the reference names none).
func RegistryOf(image string) string {
	first, _, found := strings.Cut(image, "/")
	if !found || (!strings.ContainsAny(first, ".:") && first != "localhost") {
		return "docker.io"
	}
	return first
}

func (a *analysis) pods() {
	for i := range a.o.Pods {
		p := &a.o.Pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded {
			continue
		}
		comp := a.component("Pod", p)
		n := len(a.out)
		a.scheduling(p, comp)
		for _, cs := range statuses(p) {
			a.container(p, comp, cs)
		}
		if len(a.out) == n {
			a.notReady(p, comp)
		}
	}
}

func (a *analysis) object(p *corev1.Pod) string { return Object("Pod", a.o.Namespace, p.Name) }

// scheduling: a pod the scheduler cannot place waits for capacity (a node
// that comes, pods that end) or for a fix of its placement.
func (a *analysis) scheduling(p *corev1.Pod, comp string) {
	if p.Status.Phase != corev1.PodPending {
		return
	}
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodScheduled || c.Status != corev1.ConditionFalse {
			continue
		}
		a.out = append(a.out, Fault{Analyzer: PodPending, Component: comp, Object: a.object(p),
			Title:       fmt.Sprintf("pod %s of component %s cannot be scheduled: %s", p.Name, orUnknown(comp), c.Reason),
			Evidence:    append([]string{fmt.Sprintf("PodScheduled=False for %s: %s", Since(a.in.Now, c.LastTransitionTime.Time), c.Message)}, a.o.events("Pod", p.Name, a.in.Fresh)...),
			Remediation: "read the scheduler's message: insufficient cpu or memory needs more or larger nodes or a smaller sizing profile (spec.profile); a node selector, affinity or taint that no node satisfies needs spec.placement fixed; an unbound volume is in pvc-pending",
			Waiting:     "pending: " + short(c.Reason+": "+c.Message, 100), Since: c.LastTransitionTime.Time})
	}
}

func (a *analysis) container(p *corev1.Pod, comp string, cs corev1.ContainerStatus) {
	image := cs.Image
	if ct := container(p, cs.Name); ct != nil {
		image = ct.Image
	}
	last := cs.LastTerminationState.Terminated
	if w := cs.State.Waiting; w != nil {
		switch w.Reason {
		case "ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull":
			a.pull(p, comp, cs, image)
			return
		case "CreateContainerConfigError":
			a.configError(p, comp, cs)
			return
		case "CrashLoopBackOff":
			if last != nil && last.Reason == "OOMKilled" {
				break // oom-killed below says why
			}
			a.crashLoop(p, comp, cs)
			return
		case "ContainerCreating", "PodInitializing":
			what := "starting containers"
			if a.pulling(p) {
				what = "pulling image"
			}
			a.out = append(a.out, Fault{Component: comp, Object: a.object(p), Title: fmt.Sprintf("pod %s of component %s: %s", p.Name, orUnknown(comp), what),
				Waiting: what, Since: p.CreationTimestamp.Time})
			return
		default:
			a.out = append(a.out, Fault{Component: comp, Object: a.object(p),
				Title:   fmt.Sprintf("container %s of pod %s waiting: %s %s", cs.Name, p.Name, w.Reason, strings.TrimSpace(w.Message)),
				Waiting: short(fmt.Sprintf("container %s: %s %s", cs.Name, w.Reason, w.Message), 100), Since: p.CreationTimestamp.Time})
			return
		}
	}
	var oom *corev1.ContainerStateTerminated
	if t := cs.State.Terminated; t != nil && t.Reason == "OOMKilled" {
		oom = t
	} else if last != nil && last.Reason == "OOMKilled" {
		oom = last
	}
	if oom != nil {
		a.oomKilled(p, comp, cs, oom)
	}
}

// pulling says whether the kubelet reported pulling an image of the pod
// and not yet that it pulled it.
func (a *analysis) pulling(p *corev1.Pod) bool {
	pulling := a.o.messages("Pod", p.Name, "Pulling", nil)
	pulled := a.o.messages("Pod", p.Name, "Pulled", nil)
	return len(pulling) > len(pulled)
}

// pull: an image that cannot be pulled. The same image of the same
// component in several pods is one fault.
func (a *analysis) pull(p *corev1.Pod, comp string, cs corev1.ContainerStatus, image string) {
	w := cs.State.Waiting
	line := fmt.Sprintf("pod %s container %s: %s", p.Name, cs.Name, w.Reason)
	reg := RegistryOf(image)
	if a.pulls == nil {
		a.pulls = map[[2]string]int{}
	}
	k := [2]string{comp, image}
	if i, ok := a.pulls[k]; ok {
		a.out[i].Evidence = append(a.out[i].Evidence, line)
		return
	}
	// What the registry said: the waiting message (an ImagePullBackOff's
	// carries the error it backs off from) or the newest failed pull.
	said := strings.TrimSpace(w.Message)
	if w.Reason == "ImagePullBackOff" && judgePull(said) == pullFailing {
		// The kubelet's Failed events: "Failed to pull image ...: <why>",
		// then "Error: ErrImagePull", "Error: ImagePullBackOff". The
		// newest that says why counts.
		ms := a.o.messages("Pod", p.Name, "Failed", a.in.Fresh)
		for i := len(ms) - 1; i >= 0; i-- {
			if judgePull(ms[i]) != pullFailing {
				said = ms[i]
				break
			}
		}
	}
	f := Fault{Analyzer: ImagePull, Component: comp, Object: a.object(p), Since: p.CreationTimestamp.Time,
		Evidence: append([]string{fmt.Sprintf("%s: %s", line, strings.TrimSpace(w.Message))}, a.o.events("Pod", p.Name, a.in.Fresh)...)}
	why := "the pull fails"
	f.Remediation = fmt.Sprintf("make the image reachable: push it to %s (air-gapped: 'onprem bundle push' pushes every image of the release), or fix the registry in spec.registry/spec.images; if %s needs credentials, give the pull secret in spec.registry and check that the nodes trust its certificate", reg, reg)
	switch {
	case w.Reason == "InvalidImageName":
		why, f.Definitive = "the reference is not a valid image name", true
		f.Remediation = "correct the image reference: spec.registry (host and pathPrefix), spec.images, or the overlay or values that set it; then run the command again"
	case w.Reason == "ErrImageNeverPull":
		why, f.Definitive = "it is not on the node and its pull policy is Never", true
		f.Remediation = "load the image onto every node, or remove the imagePullPolicy: Never that an overlay or values set; then run the command again"
	default:
		switch judgePull(said) {
		case pullImageNotFound:
			why, f.Definitive = "the registry says it does not exist", true
			f.Remediation = fmt.Sprintf("push the image to %s (air-gapped: 'onprem bundle push' pushes every image of the release), or correct its reference (spec.registry, spec.images, an overlay); then run the command again", reg)
		case pullAccessDenied:
			why, f.Definitive = "the registry refuses access to it", true
			f.Remediation = fmt.Sprintf("give credentials that %s accepts for this repository: the pull secret in spec.registry (check that its account may read the repository); then run the command again", reg)
		case pullUnreachableRegistry:
			why = "the registry cannot be reached"
			f.Remediation = fmt.Sprintf("make %s reachable from the nodes (DNS, firewall, proxy: spec.proxy), and check that it is up; the kubelet retries by itself", reg)
			f.Waiting = "image pull failing, retrying: registry unreachable (" + shortTail(said, 80) + ")"
		default:
			f.Waiting = "image pull failing, retrying: " + shortTail(said, 80)
		}
	}
	f.Title = fmt.Sprintf("image %s of component %s cannot be pulled from %s: %s", image, orUnknown(comp), reg, why)
	a.pulls[k] = len(a.out)
	a.out = append(a.out, f)
}

// configError: the kubelet cannot build a container's configuration (a
// Secret or ConfigMap, or a key of one, that is not there; an invalid
// variable). It says so again at every try.
func (a *analysis) configError(p *corev1.Pod, comp string, cs corev1.ContainerStatus) {
	w := cs.State.Waiting
	if kubeletCacheWait(w.Message) {
		a.out = append(a.out, Fault{Component: comp, Object: a.object(p), Since: p.CreationTimestamp.Time,
			Title:   fmt.Sprintf("container %s of component %s waits for the kubelet to read its configuration: %s", cs.Name, orUnknown(comp), short(w.Message, 160)),
			Waiting: short(fmt.Sprintf("container %s waits for the kubelet: %s", cs.Name, strings.TrimSpace(w.Message)), 100)})
		return
	}
	if a.in.ConfigAtRunTime {
		a.out = append(a.out, Fault{Component: comp, Object: a.object(p), Since: p.CreationTimestamp.Time,
			Title:   fmt.Sprintf("container %s of component %s waits for what another of its components makes: %s", cs.Name, orUnknown(comp), short(w.Message, 160)),
			Waiting: short(fmt.Sprintf("container %s waits: %s", cs.Name, strings.TrimSpace(w.Message)), 100)})
		return
	}
	a.out = append(a.out, Fault{Analyzer: ConfigError, Definitive: true, Component: comp, Object: a.object(p), Since: p.CreationTimestamp.Time,
		Title:       fmt.Sprintf("container %s of component %s cannot start: %s", cs.Name, orUnknown(comp), short(w.Message, 160)),
		Evidence:    append([]string{fmt.Sprintf("pod %s container %s: %s: %s", p.Name, cs.Name, w.Reason, strings.TrimSpace(w.Message))}, a.o.events("Pod", p.Name, a.in.Fresh)...),
		Remediation: "the Secret or ConfigMap it names, or the key in it, is missing: a Secret onprem generates is made again by 'onprem install' (never changed once made); an external service's connection Secret (spec.databases) is the operator's and must hold the keys docs/configuration.md lists; a variable an overlay or values added must be valid. Then run the command again"})
}

// kubeletCacheWait reports whether a CreateContainerConfigError is the
// kubelet not having read a Secret or ConfigMap from the API server in
// time ("failed to sync secret cache: timed out waiting for the
// condition", on a busy node or API server): it tries again by itself, so
// it is a wait, not something missing.
func kubeletCacheWait(msg string) bool {
	return strings.Contains(msg, "failed to sync secret cache") || strings.Contains(msg, "failed to sync configmap cache")
}

// crashLoop: a container that keeps exiting. Definitive once it exited
// CrashLoopRestarts times and always with the same code.
func (a *analysis) crashLoop(p *corev1.Pod, comp string, cs corev1.ContainerStatus) {
	ev := []string{fmt.Sprintf("pod %s container %s restarted %d times", p.Name, cs.Name, cs.RestartCount)}
	f := Fault{Analyzer: CrashLoop, Component: comp, Object: a.object(p), Since: p.CreationTimestamp.Time,
		Title:       fmt.Sprintf("container %s of component %s keeps crashing", cs.Name, orUnknown(comp)),
		Remediation: "read the last log lines above: a database it cannot reach shows in database-down, a bad setting in its Helm values (spec.components." + orUnknown(comp) + ".values); after fixing the cause run 'onprem install' again, or send a support bundle"}
	if t := cs.LastTerminationState.Terminated; t != nil {
		ev = append(ev, fmt.Sprintf("last exit: code %d, %s %s", t.ExitCode, t.Reason, strings.TrimSpace(t.Message)))
		same := a.in.Restarts.observe(p, cs.Name, cs.RestartCount, t.ExitCode)
		f.Definitive = cs.RestartCount >= CrashLoopRestarts && same
		f.Title += fmt.Sprintf(" (exit code %d)", t.ExitCode)
	}
	f.Evidence = append(ev, a.logLines(p, cs.Name)...)
	if !f.Definitive {
		f.Waiting = fmt.Sprintf("container %s crashed, restarted %d times", cs.Name, cs.RestartCount)
	}
	a.out = append(a.out, f)
}

func (a *analysis) logLines(p *corev1.Pod, container string) []string {
	if a.in.Log == nil {
		return nil
	}
	text, err := a.in.Log(p.Name, container, true)
	switch {
	case errors.Is(err, ErrNotCollected):
		return []string{"its previous log was not collected"}
	case err != nil:
		return []string{"its previous log could not be read: " + err.Error()}
	}
	var out []string
	for _, line := range Tail(text, 10) {
		out = append(out, "log: "+line)
	}
	return out
}

func (a *analysis) oomKilled(p *corev1.Pod, comp string, cs corev1.ContainerStatus, t *corev1.ContainerStateTerminated) {
	limit := "no memory limit"
	if ct := container(p, cs.Name); ct != nil {
		if q, ok := ct.Resources.Limits[corev1.ResourceMemory]; ok {
			limit = "memory limit " + q.String()
		}
	}
	f := Fault{Analyzer: OOMKilled, Component: comp, Object: a.object(p), Since: t.FinishedAt.Time,
		Title:    fmt.Sprintf("container %s of component %s was killed for running out of memory (%s)", cs.Name, orUnknown(comp), limit),
		Evidence: []string{fmt.Sprintf("pod %s container %s: OOMKilled at %s, restarted %d times, %s", p.Name, cs.Name, t.FinishedAt.UTC().Format("2006-01-02 15:04:05Z"), cs.RestartCount, limit)},
		Remediation: fmt.Sprintf("give it more memory: a larger sizing profile (spec.profile: medium or large), or spec.components.%s.values with a higher resources.limits.memory; then run 'onprem install' again. Check the node's allocatable memory (node-pressure, cluster/nodes.json)",
			orUnknown(comp))}
	if w := cs.State.Waiting; w != nil && w.Reason == "CrashLoopBackOff" {
		same := a.in.Restarts.observe(p, cs.Name, cs.RestartCount, t.ExitCode)
		f.Definitive = cs.RestartCount >= CrashLoopRestarts && same
	}
	if !f.Definitive {
		f.Waiting = fmt.Sprintf("container %s ran out of memory, restarted %d times", cs.Name, cs.RestartCount)
	}
	a.out = append(a.out, f)
}

// notReady: a pod that runs and is not ready (its readiness probe does
// not pass yet), or has not started.
func (a *analysis) notReady(p *corev1.Pod, comp string) {
	if p.Status.Phase != corev1.PodRunning {
		return
	}
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodReady || c.Status == corev1.ConditionTrue {
			continue
		}
		what := "not ready yet"
		if ms := a.o.messages("Pod", p.Name, "Unhealthy", a.in.Fresh); len(ms) > 0 {
			what = "not ready: " + short(ms[len(ms)-1], 100)
		}
		a.out = append(a.out, Fault{Component: comp, Object: a.object(p), Title: fmt.Sprintf("pod %s of component %s is %s", p.Name, orUnknown(comp), what),
			Waiting: what, Since: c.LastTransitionTime.Time})
	}
}

// Restarts remembers the exit codes of each container's runs seen across
// looks at the same pods, so that a crash loop is judged on every exit
// seen, not only the last. Safe for concurrent use.
type Restarts struct {
	mu   sync.Mutex
	seen map[string]map[int32]int32 // pod UID/container → restart count → exit code
}

// observe records the exit code of a container's run numbered restarts and
// says whether every exit seen of it had that code. A nil Restarts knows
// only this one.
func (r *Restarts) observe(p *corev1.Pod, container string, restarts, code int32) bool {
	if r == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen == nil {
		r.seen = map[string]map[int32]int32{}
	}
	k := string(p.UID) + "/" + p.Name + "/" + container
	m := r.seen[k]
	if m == nil {
		m = map[int32]int32{}
		r.seen[k] = m
	}
	m[restarts] = code
	for _, c := range m {
		if c != code {
			return false
		}
	}
	return true
}
