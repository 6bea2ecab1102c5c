package preflight

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/config"
)

// clusterChecks are the checks that read the cluster. Each lives in its own
// file (cluster_<name>.go) with its own tests.
func clusterChecks() []Check {
	return []Check{
		kubernetesVersionCheck(),
		permissionsCheck(),
		capacityCheck(),
		storageCheck(),
		ingressCheck(),
		namespaceConflictsCheck(),
		podSecurityCheck(),
		clockSkewCheck(),
		installationExistingCheck(),
		runtimesCheck(),
		networkPolicyCheck(),
		availabilityCheck(),
	}
}

// eachRenderedEntry calls fn, in the order they are rendered, with each
// entry of the list at fields (e.g. spec, ports) of every rendered object
// of kind, with the name of the component and the object that hold it.
// Entries that are not maps are passed over.
func eachRenderedEntry(env *Env, kind string, fields []string, fn func(component string, o *unstructured.Unstructured, entry map[string]any)) {
	for _, c := range env.Rendered.Components {
		for _, o := range c.Objects {
			if o.GetKind() != kind {
				continue
			}
			list, _, _ := unstructured.NestedSlice(o.Object, fields...)
			for _, e := range list {
				m, ok := e.(map[string]any)
				if !ok {
					continue
				}
				fn(c.Name, o, m)
			}
		}
	}
}

// Annotations Helm puts on every object of a release.
const (
	helmReleaseNameAnnotation      = "meta.helm.sh/release-name"
	helmReleaseNamespaceAnnotation = "meta.helm.sh/release-namespace"
)

// platformNamespace is the namespace the platform is installed into.
func platformNamespace(env *Env) string {
	if env.Rendered != nil && env.Rendered.Namespace != "" {
		return env.Rendered.Namespace
	}
	if env.Installation != nil && env.Installation.Spec.Namespace != "" {
		return env.Installation.Spec.Namespace
	}
	return config.DefaultNamespace
}

// missingInput is the outcome of a check run without what it reads (a bug
// in the caller, never an operator's mistake).
func missingInput(sev Severity, what string) Outcome {
	return Outcome{Result: notPassing(sev),
		Message:     "the check could not run: " + what + " is missing (a bug in onprem)",
		Remediation: "report this as a bug in onprem, with the output of 'onprem preflight -o json'"}
}

// requireEnv returns a not-passing outcome when env lacks what a check
// reads: "cluster", "installation", "rendered", "release".
func requireEnv(env *Env, sev Severity, needs ...string) (Outcome, bool) {
	for _, n := range needs {
		switch {
		case n == "cluster" && (env.Cluster == nil || env.Cluster.Client == nil):
			return missingInput(sev, "the cluster connection"), false
		case n == "installation" && env.Installation == nil:
			return missingInput(sev, "the configuration"), false
		case n == "rendered" && env.Rendered == nil:
			return missingInput(sev, "the rendered platform"), false
		case n == "release" && env.Release == nil:
			return missingInput(sev, "the release manifest"), false
		}
	}
	return Outcome{}, true
}

// cannotRun is the outcome of a check that could not read what it needs
// from the cluster: what it tried, why it failed, and what to do.
func cannotRun(sev Severity, id, what string, err error) Outcome {
	out := Outcome{Result: notPassing(sev),
		Message: fmt.Sprintf("the check could not run: %s: %v", what, err)}
	switch {
	case apierrors.IsForbidden(err):
		out.Remediation = fmt.Sprintf("the kubeconfig's user may not %s: grant it that permission (or run preflight as a cluster administrator), or skip the check with --skip-check %s if you have verified it yourself", what, id)
	case apierrors.IsUnauthorized(err):
		out.Remediation = "the cluster rejected the credentials: refresh the kubeconfig's token or certificate and run preflight again"
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		out.Remediation = "the API server did not answer in time: check the cluster's health and the connection to it, then run preflight again"
	default:
		out.Remediation = fmt.Sprintf("check the cluster's health and the connection to it, then run preflight again; skip the check with --skip-check %s only if you have verified it yourself", id)
	}
	return out
}

// clusterForEach runs f on every item with at most limit at once and waits.
func clusterForEach[T any](items []T, limit int, f func(T)) {
	if limit <= 0 {
		limit = 1
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, limit)
	for _, it := range items {
		wg.Add(1)
		slots <- struct{}{}
		go func(it T) {
			defer wg.Done()
			defer func() { <-slots }()
			f(it)
		}(it)
	}
	wg.Wait()
}

// listOf joins names for a message, at most max of them ("a, b, c and 4
// more").
func clusterList(names []string, max int) string {
	if len(names) <= max || max <= 0 {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

func clusterSortedUnique(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}
