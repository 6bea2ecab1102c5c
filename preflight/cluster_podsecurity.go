package preflight

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const podSecurityID = "pod-security"

// Pod Security Admission labels of a namespace.
const psaPrefix = "pod-security.kubernetes.io/"

var (
	psaModes      = []string{"enforce", "audit", "warn"}
	psaLevels     = map[string]bool{"privileged": true, "baseline": true, "restricted": true}
	psaVersionRE  = regexp.MustCompile(`^(latest|v1\.(0|[1-9][0-9]*))$`)
	platformLevel = "restricted"
)

// podSecurityCheck reads the Pod Security Admission labels of the platform
// namespace. The platform's pods are restricted-compliant (the render
// checks enforce it), so every valid level admits them; the install sets
// enforce=restricted itself. Cluster-wide admission policies (a
// ValidatingAdmissionPolicy, Kyverno, Gatekeeper) are not inspected.
func podSecurityCheck() Check {
	return Check{
		ID:       podSecurityID,
		Title:    "the platform namespace's Pod Security Admission labels admit the platform's (restricted) pods",
		Severity: Advisory,
		Run:      runPodSecurity,
	}
}

// psaLabelProblems lists the invalid pod-security labels.
func psaLabelProblems(labels map[string]string) []string {
	var out []string
	for _, mode := range psaModes {
		if v, ok := labels[psaPrefix+mode]; ok && !psaLevels[v] {
			out = append(out, fmt.Sprintf("%s%s=%q is not a level (privileged, baseline, restricted)", psaPrefix, mode, v))
		}
		if v, ok := labels[psaPrefix+mode+"-version"]; ok && !psaVersionRE.MatchString(v) {
			out = append(out, fmt.Sprintf("%s%s-version=%q is not a version (latest or v1.N)", psaPrefix, mode, v))
		}
	}
	sort.Strings(out)
	return out
}

func runPodSecurity(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Advisory, "cluster"); !ok {
		return out
	}
	ns := platformNamespace(env)
	n, err := env.Cluster.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return Passed("namespace %s does not exist yet; the install creates it with pod-security enforce=%s, which the platform's pods satisfy", ns, platformLevel)
	}
	if err != nil {
		return cannotRun(Advisory, podSecurityID, "read namespace "+ns, err)
	}
	var have []string
	for _, mode := range psaModes {
		if v, ok := n.Labels[psaPrefix+mode]; ok {
			have = append(have, mode+"="+v)
		}
	}
	if probs := psaLabelProblems(n.Labels); len(probs) > 0 {
		return Outcome{Result: Warn,
			Message:     fmt.Sprintf("namespace %s has invalid Pod Security labels: %s (the API server treats an invalid level as restricted)", ns, strings.Join(probs, "; ")),
			Remediation: fmt.Sprintf("fix or remove them (kubectl label namespace %s %senforce-); the install sets enforce=%s itself", ns, psaPrefix, platformLevel)}
	}
	enforce, ok := n.Labels[psaPrefix+"enforce"]
	if !ok {
		return Outcome{Result: Warn,
			Message: fmt.Sprintf("namespace %s has no %senforce label (has: %s); the cluster-wide default level applies until the install sets enforce=%s",
				ns, psaPrefix, clusterOrNone(have), platformLevel),
			Remediation: fmt.Sprintf("nothing to do for the platform: the install sets the label; other pods in %s that are not restricted-compliant will then be refused when they are recreated, so move them to another namespace", ns)}
	}
	msg := fmt.Sprintf("namespace %s has Pod Security %s: the platform's restricted-compliant pods are admitted", ns, strings.Join(have, ", "))
	if enforce != platformLevel {
		msg += fmt.Sprintf(" (the install changes enforce to %s: other pods in %s must comply too)", platformLevel, ns)
	}
	return Passed("%s", msg)
}

func clusterOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
