package render

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/quote"
)

// podTemplatePathOf is where a workload kind keeps its pod: the path of the
// pod's metadata and spec.
func podTemplatePathOf(kind string) []string {
	switch kind {
	case "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job":
		return []string{"spec", "template"}
	case "CronJob":
		return []string{"spec", "jobTemplate", "spec", "template"}
	case "Pod":
		return []string{}
	}
	return nil
}

// enforce makes the built-in overlays' rules hold for every pod of the
// platform, whoever wrote it: the operator's overlays run after the
// built-in ones, and --set or values may change an image, so a sidecar
// or image they add would otherwise escape them. It relocates every image
// not yet in spec.registry, gives every pod and container the hardening
// fields it leaves unset, and refuses (a *CheckError, as Check's: the
// field and the fix named) a pod the restricted Pod Security Standard
// refuses or an image it cannot relocate. The charts' own pods already keep every
// rule: for them it changes nothing.
func (p *postRender) enforce(objs []*unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	var problems []Problem
	for _, o := range objs {
		path := podTemplatePathOf(o.GetKind())
		if path == nil {
			continue
		}
		id := Problem{Component: o.GetLabels()[ComponentLabel], Object: o.GetKind() + "/" + o.GetName()}
		if id.Component == "" {
			id.Component = PlatformComponent
		}
		tmpl := o.Object
		if len(path) > 0 {
			m, found, err := unstructured.NestedMap(o.Object, path...)
			if err != nil || !found {
				continue
			}
			tmpl = m
		}
		spec, _ := tmpl["spec"].(map[string]any)
		if spec == nil {
			continue
		}
		problems = append(problems, p.relocate(id, spec)...)
		harden(spec, o.GetLabels()["onprem.dev/kube-api"] == "true")
		if len(path) > 0 {
			if err := unstructured.SetNestedField(o.Object, tmpl, path...); err != nil {
				id.Rule, id.Message = "pod", err.Error()
				problems = append(problems, id)
				continue
			}
		}
		problems = append(problems, restricted(id, tmpl, strings.Join(append(path, "spec"), "."))...)
	}
	if len(problems) > 0 {
		return nil, &CheckError{Problems: problems}
	}
	return objs, nil
}

// containerLists are the fields of a pod spec that hold containers.
var containerLists = []string{"initContainers", "containers", "ephemeralContainers"}

// relocate points every image of a pod spec that is not in spec.registry
// there, as the built-in relocation does the charts' images.
func (p *postRender) relocate(id Problem, spec map[string]any) []Problem {
	reg := p.in.Spec.Registry
	if reg.Host == "" {
		return nil
	}
	var problems []Problem
	for _, field := range containerLists {
		cs, _ := spec[field].([]any)
		for _, c := range cs {
			cm, _ := c.(map[string]any)
			image, _ := cm["image"].(string)
			if image == "" {
				continue
			}
			to, err := relocateImage(image, reg.Host, reg.PathPrefix)
			if err != nil {
				pr := id
				pr.Rule, pr.Field = "registry", field+"[].image"
				pr.Message = fmt.Sprintf("container %s: image %s cannot be relocated to spec.registry: %v", quote.Value(fmt.Sprint(cm["name"])), quote.Value(image), err)
				pr.Fix = "give a valid image reference (REGISTRY/REPOSITORY:TAG or @sha256:DIGEST)"
				problems = append(problems, pr)
				continue
			}
			cm["image"] = to
		}
	}
	return problems
}

// relocateImage maps an image reference into the registry host/prefix,
// keeping its tag and digest; one already in host is left as it is.
func relocateImage(image, host, prefix string) (string, error) {
	repo, suffix := image, ""
	if at := strings.IndexByte(repo, '@'); at >= 0 {
		repo, suffix = repo[:at], repo[at:]
	}
	if colon := strings.LastIndexByte(repo, ':'); colon > strings.LastIndexByte(repo, '/') {
		repo, suffix = repo[:colon], repo[colon:]+suffix
	}
	if strings.HasPrefix(repo, strings.TrimSuffix(host, "/")+"/") {
		return image, nil
	}
	to, err := images.Relocate(repo, host, prefix)
	if err != nil {
		return "", err
	}
	return to + suffix, nil
}

// harden sets what the built-in hardening overlay sets on every pod and
// what the charts set on every container, wherever it is unset: non-root
// and the runtime's seccomp profile for the pod, no docker-link
// variables, no API token unless the workload says it calls the API
// (onprem.dev/kube-api: "true"); no privilege escalation and no
// capabilities for each container. A field that is set is kept: the
// restricted check then says whether it may be so.
func harden(spec map[string]any, kubeAPI bool) {
	psc, _ := spec["securityContext"].(map[string]any)
	if psc == nil {
		psc = map[string]any{}
		spec["securityContext"] = psc
	}
	setDefault(psc, "runAsNonRoot", true)
	setDefault(psc, "seccompProfile", map[string]any{"type": "RuntimeDefault"})
	setDefault(spec, "enableServiceLinks", false)
	if !kubeAPI {
		setDefault(spec, "automountServiceAccountToken", false)
	}
	for _, field := range containerLists {
		cs, _ := spec[field].([]any)
		for _, c := range cs {
			cm, _ := c.(map[string]any)
			if cm == nil {
				continue
			}
			sc, _ := cm["securityContext"].(map[string]any)
			if sc == nil {
				sc = map[string]any{}
				cm["securityContext"] = sc
			}
			setDefault(sc, "allowPrivilegeEscalation", false)
			caps, _ := sc["capabilities"].(map[string]any)
			if caps == nil {
				caps = map[string]any{}
				sc["capabilities"] = caps
			}
			drop, _ := caps["drop"].([]any)
			if !slices.ContainsFunc(drop, func(d any) bool { s, _ := d.(string); return strings.EqualFold(s, "ALL") }) {
				caps["drop"] = append(drop, "ALL")
			}
		}
	}
}

func setDefault(m map[string]any, key string, value any) {
	if _, ok := m[key]; !ok {
		m[key] = value
	}
}

// restricted is what the restricted Pod Security Standard (the latest
// version, as the namespace's label says) refuses in a pod template whose
// spec is at specPath, judged as Check judges an upstream chart's pods.
func restricted(id Problem, tmpl map[string]any, specPath string) []Problem {
	var pod struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
		Spec     corev1.PodSpec    `json:"spec"`
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(tmpl, &pod); err != nil {
		id.Rule, id.Message = "pod", "its pod is not a valid pod: "+err.Error()
		return []Problem{id}
	}
	ps := restrictedProblems(pssAll, pod.Metadata, &pod.Spec, specPath)
	for i := range ps {
		ps[i].Component, ps[i].Object = id.Component, id.Object
	}
	return ps
}
