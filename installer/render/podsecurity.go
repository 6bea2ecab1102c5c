package render

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	psaapi "k8s.io/pod-security-admission/api"
	psapolicy "k8s.io/pod-security-admission/policy"
)

// The restricted Pod Security Standard, judged by the code of the
// admission controller itself (k8s.io/pod-security-admission), at its
// latest version: what the namespaces onprem creates enforce.
var (
	// pssAll holds every check of the standard: the judge of upstream
	// charts' pods.
	pssAll = newPSS(nil)
	// pssBeyond holds the checks the platform's own rules (checkPod) do
	// not already make, per container and with their own messages:
	// host namespaces, ports and paths, volume types, /proc mounts,
	// SELinux, sysctls, Windows host processes, probes and lifecycle
	// hooks on the host.
	pssBeyond = newPSS([]psapolicy.CheckID{
		"allowPrivilegeEscalation", "appArmorProfile", "capabilities_baseline", "capabilities_restricted",
		"privileged", "runAsNonRoot", "runAsUser", "seccompProfile_baseline", "seccompProfile_restricted",
	})
)

func newPSS(without []psapolicy.CheckID) psapolicy.Evaluator {
	var checks []psapolicy.Check
	for _, c := range psapolicy.DefaultChecks() {
		if !slices.Contains(without, c.ID) {
			checks = append(checks, c)
		}
	}
	e, err := psapolicy.NewEvaluator(checks, nil)
	if err != nil {
		panic(fmt.Sprintf("the Pod Security Standard's checks: %v", err))
	}
	return e
}

func pss(upstream bool) psapolicy.Evaluator {
	if upstream {
		return pssAll
	}
	return pssBeyond
}

// podMetaOf returns the metadata of a workload's pods and the path of
// their spec in the object.
func podMetaOf(o *unstructured.Unstructured) (metav1.ObjectMeta, string) {
	path := []string{"spec", "template"}
	switch o.GetKind() {
	case "CronJob":
		path = []string{"spec", "jobTemplate", "spec", "template"}
	case "Pod":
		return metav1.ObjectMeta{Name: o.GetName(), Labels: o.GetLabels(), Annotations: o.GetAnnotations()}, "spec"
	}
	var meta metav1.ObjectMeta
	if m, ok, _ := unstructured.NestedMap(o.Object, append(path, "metadata")...); ok {
		meta.Labels, _, _ = unstructured.NestedStringMap(m, "labels")
		meta.Annotations, _, _ = unstructured.NestedStringMap(m, "annotations")
	}
	return meta, strings.Join(path, ".") + ".spec"
}

// restrictedFields says, per reason the standard gives, which field of
// the pod breaks it and how to fix it.
var restrictedFields = map[string]struct{ field, fix string }{
	"allowPrivilegeEscalation != false": {"containers[].securityContext.allowPrivilegeEscalation", "set allowPrivilegeEscalation: false in the securityContext of the containers named"},
	"unrestricted capabilities":         {"containers[].securityContext.capabilities", "drop ALL (capabilities.drop: [ALL]) and add none but NET_BIND_SERVICE"},
	"non-default capabilities":          {"containers[].securityContext.capabilities.add", "add none but NET_BIND_SERVICE"},
	"runAsNonRoot != true":              {"securityContext.runAsNonRoot", "set runAsNonRoot: true in the pod's securityContext (or every container's), with an image that runs as a non-zero UID"},
	"runAsUser=0":                       {"securityContext.runAsUser", "run as a non-zero UID (runAsUser), in the pod's and the containers' securityContext"},
	"seccompProfile":                    {"securityContext.seccompProfile", "set seccompProfile.type: RuntimeDefault (or Localhost) in the pod's securityContext"},
	"privileged":                        {"containers[].securityContext.privileged", "remove privileged: true"},
	"host namespaces":                   {"hostNetwork, hostPID, hostIPC", "leave out hostNetwork, hostPID and hostIPC"},
	"hostPort":                          {"containers[].ports[].hostPort", "leave out hostPort (use a Service)"},
	"hostPath volumes":                  {"volumes[].hostPath", "use another volume type (configMap, secret, emptyDir, persistentVolumeClaim, projected, downwardAPI, csi, ephemeral)"},
	"restricted volume types":           {"volumes", "use only configMap, secret, emptyDir, persistentVolumeClaim, projected, downwardAPI, csi or ephemeral volumes"},
	"forbidden AppArmor profile":        {"securityContext.appArmorProfile", "use the RuntimeDefault or a Localhost AppArmor profile, not Unconfined"},
	"forbidden AppArmor profiles":       {"securityContext.appArmorProfile", "use the RuntimeDefault or a Localhost AppArmor profile, not Unconfined"},
	"seLinuxOptions":                    {"securityContext.seLinuxOptions", "leave out seLinuxOptions' user and role, and use one of the container_t, container_init_t, container_kvm_t, container_engine_t types"},
	"procMount":                         {"containers[].securityContext.procMount", "leave out procMount (Default)"},
	"forbidden sysctls":                 {"securityContext.sysctls", "use only the safe sysctls"},
	"hostProcess":                       {"securityContext.windowsOptions.hostProcess", "leave out hostProcess"},
}

// restrictedProblems judges one pod by the restricted standard: a
// Problem per check it fails, naming the field (under specPath) and the
// fix.
func restrictedProblems(e psapolicy.Evaluator, meta metav1.ObjectMeta, pod *corev1.PodSpec, specPath string) []Problem {
	var out []Problem
	for _, r := range e.EvaluatePod(psaapi.LevelVersion{Level: psaapi.LevelRestricted, Version: psaapi.LatestVersion()}, &meta, pod) {
		if r.Allowed {
			continue
		}
		p := Problem{Rule: "restricted", Message: "breaks the restricted Pod Security Standard: " + r.ForbiddenReason, Field: specPath}
		if r.ForbiddenDetail != "" {
			p.Message += " (" + r.ForbiddenDetail + ")"
		}
		for reason, f := range restrictedFields {
			if strings.HasPrefix(r.ForbiddenReason, reason) {
				p.Field, p.Fix = specPath+"."+f.field, f.fix
				break
			}
		}
		out = append(out, p)
	}
	return out
}
