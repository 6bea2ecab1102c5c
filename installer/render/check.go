package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/credentials"
)

// Exceptions to the platform's pod rules, in one place, each with why.
// Keys are "component/container"; "component/*" covers every container.
var (
	// NoProbes: containers that have no liveness/readiness probes.
	NoProbes = map[string]string{
		"db-provision/*":       "a Job's containers run to completion; there is no server to probe",
		"mongodb/replica-set":  "the Job that initiates MongoDB's replica set (high availability) runs to completion; there is no server to probe",
		TaskComponent + "/*":   "backups and migrations are Jobs that run to completion",
		BackupComponent + "/*": "the scheduled backup is a CronJob's Job that runs to completion",
	}
	// WritableRoot: containers whose root filesystem must stay writable.
	WritableRoot = map[string]string{}
	// UserNamespaces: containers that create user namespaces. They may run
	// with seccomp and AppArmor Unconfined, allow privilege escalation and
	// add SETUID and SETGID (after dropping ALL), and nothing more: they
	// stay non-root, unprivileged, with a read-only root. Keys may name a
	// chart instead of a component ("runner/engine": every runner).
	UserNamespaces = map[string]string{
		RunnerChart + "/engine": "rootless BuildKit builds images in user namespaces: the runtime's default seccomp and AppArmor " +
			"profiles forbid unshare(CLONE_NEWUSER) and mount, and the setuid newuidmap/newgidmap write the namespaces' ID maps; " +
			"it runs in a namespace of its own, the only one with Pod Security level privileged (charts/runner)",
	}
)

// Problem is one broken rule on one object.
type Problem struct {
	Component string `json:"component"`
	Object    string `json:"object"` // Kind/name
	Rule      string `json:"rule"`
	// Field is where in the object the rule breaks (a pod's field, for
	// the Pod Security rules), when the rule is about one.
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
	// Fix says what would satisfy the rule, when it is not plain from
	// the message.
	Fix string `json:"fix,omitempty"`
}

func (p Problem) String() string {
	s := fmt.Sprintf("%s: %s: [%s] ", p.Component, p.Object, p.Rule)
	if p.Field != "" {
		s += p.Field + ": "
	}
	s += p.Message
	if p.Fix != "" {
		s += " (fix: " + p.Fix + ")"
	}
	return s
}

// CheckError is a render that breaks the rules (Check): nothing was
// applied. The operator fixes it in what they gave (--set, an overlay,
// the runtime chart's values).
type CheckError struct{ Problems []Problem }

func (e *CheckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the rendered objects break %d rule(s) that the cluster or the platform enforces; nothing was applied:", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// Verify runs Check and turns its problems into a *CheckError (an input
// error: exit 2), nil when there are none. Install, upgrade and runtime
// and runner installs call it before anything is applied.
func Verify(res *Result, opts CheckOptions) error {
	if ps := Check(res, opts); len(ps) > 0 {
		return &CheckError{Problems: ps}
	}
	return nil
}

// CheckOptionsFor is what an installation's objects are checked against:
// with a private registry, every image comes from it.
func CheckOptionsFor(in *config.Installation) CheckOptions {
	var o CheckOptions
	if reg := in.Spec.Registry; reg.Host != "" {
		o.RegistryPrefix = strings.TrimSuffix(reg.Host, "/")
		if p := strings.Trim(reg.PathPrefix, "/"); p != "" {
			o.RegistryPrefix += "/" + p
		}
	}
	return o
}

// CheckOptions tunes Check.
type CheckOptions struct {
	// RegistryPrefix, when set, is where every image must come from.
	RegistryPrefix string
	// RequireDigests demands every image be pinned by digest.
	RequireDigests bool
}

var typedScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := gatewayv1.Install(s); err != nil {
		panic(err)
	}
	// Runtime charts bring CustomResourceDefinitions (Argo CD's).
	if err := apiextensionsv1.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// Check applies the rules to every rendered object: it decodes into its
// typed Kubernetes object with no unknown field; no two objects share
// kind/namespace/name; every pod meets the restricted Pod Security
// Standard, as the admission controller of the namespace judges it
// (k8s.io/pod-security-admission; but for the listed user-namespace
// exceptions, which run in a namespace of their own); images come from the
// configured registry (and are pinned, when asked). The charts onprem
// writes meet the platform's own rules too: every container has probes,
// resources, a read-only root and the restricted security context, every
// service with a database has its own credentials. An upstream chart (a
// GitOps runtime's) is held to the Pod Security Standard, the typed
// decoding of the kinds Kubernetes knows (its custom resources are the
// API server's to check) and the registry rules.
func Check(res *Result, opts CheckOptions) []Problem {
	var out []Problem
	seen := map[string]string{}
	dbSecrets := map[string]string{} // secret name -> service using it
	planned := map[string]bool{}
	for _, s := range res.Secrets {
		planned[s.Name] = true
	}
	for _, c := range res.Components {
		upstream := c.Group == RuntimeGroup
		for _, o := range c.Objects {
			id := o.GetKind() + "/" + o.GetName()
			add := func(rule, format string, a ...any) {
				out = append(out, Problem{Component: c.Name, Object: id, Rule: rule, Message: fmt.Sprintf(format, a...)})
			}
			key := o.GetAPIVersion() + "/" + o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
			if other, dup := seen[key]; dup {
				add("unique", "also rendered by component %s", other)
			}
			seen[key] = c.Name
			if upstream && !typedScheme.Recognizes(o.GroupVersionKind()) {
				continue
			}
			if err := decodeStrict(o); err != nil {
				add("typed", "%v", err)
				continue
			}
			pod, ok := podSpecOf(o)
			if !ok {
				continue
			}
			meta, field := podMetaOf(o)
			var excepted bool
			for _, ct := range append(append([]corev1.Container(nil), pod.InitContainers...), pod.Containers...) {
				excepted = excepted || exceptedFrom(UserNamespaces, c.Name, c.Chart, ct.Name)
			}
			if !excepted {
				for _, p := range restrictedProblems(pss(upstream), meta, pod, field) {
					p.Component, p.Object = c.Name, id
					out = append(out, p)
				}
			}
			if upstream {
				checkImages(pod, opts, add)
				continue
			}
			checkPod(c.Name, c.Chart, pod, opts, add)
			if c.Chart == "service" {
				checkServiceCredentials(c.Name, pod, planned, dbSecrets, add)
			}
		}
	}
	for _, t := range res.Tasks {
		id := "Job/" + t.Name
		add := func(rule, format string, a ...any) {
			out = append(out, Problem{Component: TaskComponent, Object: id, Rule: rule, Message: fmt.Sprintf(format, a...)})
		}
		if err := decodeStrict(t.Job); err != nil {
			add("typed", "%v", err)
			continue
		}
		if pod, ok := podSpecOf(t.Job); ok {
			meta, field := podMetaOf(t.Job)
			for _, p := range restrictedProblems(pss(false), meta, pod, field) {
				p.Component, p.Object = TaskComponent, id
				out = append(out, p)
			}
			checkPod(TaskComponent, "", pod, opts, add)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// decodeStrict decodes an object into its registered Go type, refusing
// unknown fields.
func decodeStrict(o *unstructured.Unstructured) error {
	gvk := o.GroupVersionKind()
	typed, err := typedScheme.New(gvk)
	if err != nil {
		return fmt.Errorf("%s is not a known Kubernetes type", gvk)
	}
	data, err := json.Marshal(o.Object)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(typed); err != nil {
		return fmt.Errorf("does not decode as %s: %v", gvk.Kind, err)
	}
	return nil
}

// podSpecOf returns the pod template spec of a workload.
func podSpecOf(o *unstructured.Unstructured) (*corev1.PodSpec, bool) {
	var path []string
	switch o.GetKind() {
	case "Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet":
		path = []string{"spec", "template", "spec"}
	case "CronJob":
		path = []string{"spec", "jobTemplate", "spec", "template", "spec"}
	case "Pod":
		path = []string{"spec"}
	default:
		return nil, false
	}
	m, found, err := unstructured.NestedMap(o.Object, path...)
	if err != nil || !found {
		return nil, false
	}
	var spec corev1.PodSpec
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
		return nil, false
	}
	return &spec, true
}

// exceptedFrom reports whether list names the container, by its
// component or by the component's chart.
func exceptedFrom(list map[string]string, component, chart, container string) bool {
	for _, who := range []string{component, chart} {
		if who == "" {
			continue
		}
		_, all := list[who+"/*"]
		_, one := list[who+"/"+container]
		if all || one {
			return true
		}
	}
	return false
}

func checkPod(component, chart string, pod *corev1.PodSpec, opts CheckOptions, add func(rule, format string, a ...any)) {
	psc := pod.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	checkImages(pod, opts, add)
	all := append(append([]corev1.Container(nil), pod.InitContainers...), pod.Containers...)
	for i, ct := range all {
		init := i < len(pod.InitContainers)
		name := ct.Name
		userns := exceptedFrom(UserNamespaces, component, chart, name)
		if !init && !exceptedFrom(NoProbes, component, chart, name) {
			if ct.LivenessProbe == nil {
				add("probes", "container %s has no liveness probe", name)
			}
			if ct.ReadinessProbe == nil {
				add("probes", "container %s has no readiness probe", name)
			}
		}
		if ct.Resources.Requests.Cpu().IsZero() || ct.Resources.Requests.Memory().IsZero() {
			add("resources", "container %s has no cpu and memory requests", name)
		}
		if ct.Resources.Limits.Memory().IsZero() {
			add("resources", "container %s has no memory limit", name)
		}
		sc := ct.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot := (sc.RunAsNonRoot != nil && *sc.RunAsNonRoot) || (sc.RunAsNonRoot == nil && psc.RunAsNonRoot != nil && *psc.RunAsNonRoot)
		if !nonRoot {
			add("security", "container %s does not set runAsNonRoot", name)
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			add("security", "container %s runs as uid 0", name)
		}
		if !userns && (sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation) {
			add("security", "container %s does not set allowPrivilegeEscalation: false", name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			add("security", "container %s is privileged", name)
		}
		if sc.Capabilities == nil || !dropsAll(sc.Capabilities.Drop) || !addsOnly(sc.Capabilities.Add, userns) {
			add("security", "container %s does not drop ALL capabilities (or adds some)", name)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		if !userns && (seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault) {
			add("security", "container %s has no RuntimeDefault seccomp profile", name)
		}
		apparmor := sc.AppArmorProfile
		if apparmor == nil {
			apparmor = psc.AppArmorProfile
		}
		if !userns && apparmor != nil && apparmor.Type == corev1.AppArmorProfileTypeUnconfined {
			add("security", "container %s runs without AppArmor (Unconfined)", name)
		}
		if !exceptedFrom(WritableRoot, component, chart, name) && (sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem) {
			add("security", "container %s has a writable root filesystem", name)
		}
	}
}

// checkImages checks every container's image: present, from the
// configured registry, pinned when asked.
func checkImages(pod *corev1.PodSpec, opts CheckOptions, add func(rule, format string, a ...any)) {
	for _, ct := range append(append([]corev1.Container(nil), pod.InitContainers...), pod.Containers...) {
		name := ct.Name
		if ct.Image == "" {
			add("image", "container %s has no image", name)
		}
		if opts.RegistryPrefix != "" && !strings.HasPrefix(ct.Image, strings.TrimSuffix(opts.RegistryPrefix, "/")+"/") {
			add("registry", "container %s image %s is not from %s", name, ct.Image, opts.RegistryPrefix)
		}
		if opts.RequireDigests && !strings.Contains(ct.Image, "@sha256:") {
			add("digest", "container %s image %s is not pinned by digest", name, ct.Image)
		}
	}
}

// addsOnly reports whether the added capabilities are allowed: none, or
// for a container that creates user namespaces SETUID and SETGID.
func addsOnly(caps []corev1.Capability, userns bool) bool {
	for _, c := range caps {
		name := strings.TrimPrefix(strings.ToUpper(string(c)), "CAP_")
		if !userns || (name != "SETUID" && name != "SETGID") {
			return false
		}
	}
	return true
}

func dropsAll(caps []corev1.Capability) bool {
	for _, c := range caps {
		if strings.EqualFold(string(c), "ALL") {
			return true
		}
	}
	return false
}

// checkServiceCredentials makes sure a service reads its databases with
// credentials of its own, which the installer generates.
func checkServiceCredentials(component string, pod *corev1.PodSpec, planned map[string]bool, used map[string]string, add func(rule, format string, a ...any)) {
	for _, ct := range pod.Containers {
		for _, e := range ct.Env {
			engine := ""
			switch e.Name {
			case "MONGODB_PASSWORD":
				engine = "mongodb"
			case "POSTGRESQL_PASSWORD":
				engine = "postgresql"
			default:
				continue
			}
			if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
				add("credentials", "%s is not read from a Secret", e.Name)
				continue
			}
			name := e.ValueFrom.SecretKeyRef.Name
			if want := credentials.ServiceSecret(component, engine); name != want {
				add("credentials", "%s comes from %s, not the service's own %s", e.Name, name, want)
			}
			if other, ok := used[name]; ok && other != component {
				add("credentials", "%s shares %s with %s", e.Name, name, other)
			}
			used[name] = component
			if !planned[name] {
				add("credentials", "%s reads Secret %s, which the installer does not generate", e.Name, name)
			}
		}
	}
}
