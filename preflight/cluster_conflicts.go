package preflight

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/metadata"

	"onprem.dev/onprem/installer/render"
)

const namespaceConflictsID = "namespace.conflicts"

// namespaceConflictsCheck: objects the install would create that exist
// already and belong to someone else, and Helm releases named like a
// component but made from another chart. onprem's Helm installs take
// ownership of leftovers of an interrupted install, so without this check
// they would silently take over someone else's objects.
func namespaceConflictsCheck() Check {
	return Check{
		ID:       namespaceConflictsID,
		Title:    "no object or Helm release the install creates already exists under another owner",
		Severity: Blocking,
		Run:      runNamespaceConflicts,
	}
}

// chartOf is the chart name of a component's Helm release (the platform
// component is released from a chart onprem makes on the fly).
func chartOf(c *render.Component) string {
	if c.Chart == "" {
		return "onprem-" + c.Name
	}
	return c.Chart
}

// digestLabel is the label onprem's installer puts on its Helm releases
// (installer/apply.DigestLabel).
const digestLabel = "onprem.dev/digest"

// releaseChart is what a Helm release record says of its chart.
type releaseChart struct {
	Name     string   `json:"name"`
	Version  string   `json:"version"`
	Keywords []string `json:"keywords"`
}

// helmReleaseChart decodes the chart of a Helm release Secret's data
// (base64 of gzipped JSON).
func helmReleaseChart(data []byte) (releaseChart, error) {
	var none releaseChart
	raw, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		return none, fmt.Errorf("not base64: %w", err)
	}
	if bytes.HasPrefix(raw, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return none, err
		}
		if raw, err = io.ReadAll(zr); err != nil {
			return none, err
		}
	}
	var rel struct {
		Chart struct {
			Metadata releaseChart `json:"metadata"`
		} `json:"chart"`
	}
	if err := json.Unmarshal(raw, &rel); err != nil {
		return none, err
	}
	return rel.Chart.Metadata, nil
}

type wanted struct {
	component string
	kind      string
	name      string
}

func runNamespaceConflicts(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Blocking, "cluster", "rendered"); !ok {
		return out
	}
	if env.Cluster.Getter == nil || env.Cluster.Config == nil {
		return missingInput(Blocking, "the cluster's REST mapper")
	}
	ns := platformNamespace(env)
	var conflicts []string

	// Helm releases of the components' names.
	charts := map[string]string{}
	for _, c := range env.Rendered.Components {
		charts[c.Name] = chartOf(c)
	}
	secs, err := env.Cluster.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
	if err != nil {
		return cannotRun(Blocking, namespaceConflictsID, "list Helm release Secrets in namespace "+ns, err)
	}
	seenRel := map[string]bool{}
	for _, s := range secs.Items {
		rel := s.Labels["name"]
		want, ok := charts[rel]
		if !ok || seenRel[rel] {
			continue
		}
		chart, err := helmReleaseChart(s.Data["release"])
		_, byOnprem := s.Labels[digestLabel]
		switch {
		case err != nil:
			seenRel[rel] = true
			conflicts = append(conflicts, fmt.Sprintf("Helm release %s (Secret %s) cannot be read (%v): it is not onprem's", rel, s.Name, err))
		case chart.Name != want:
			seenRel[rel] = true
			conflicts = append(conflicts, fmt.Sprintf("Helm release %s is of chart %s %s, not onprem's chart %s", rel, chart.Name, chart.Version, want))
		case !byOnprem && !slices.Contains(chart.Keywords, "onprem"):
			seenRel[rel] = true
			conflicts = append(conflicts, fmt.Sprintf("Helm release %s is of a chart named %s %s that is not onprem's (it was not installed by onprem)", rel, chart.Name, chart.Version))
		}
	}

	// Objects, listed per resource and namespace (metadata only).
	mapper, err := env.Cluster.Getter.ToRESTMapper()
	if err != nil {
		return cannotRun(Blocking, namespaceConflictsID, "discover the cluster's API resources", err)
	}
	mc, err := metadata.NewForConfig(env.Cluster.Config)
	if err != nil {
		return cannotRun(Blocking, namespaceConflictsID, "make a metadata client", err)
	}
	type scope struct {
		gvr schema.GroupVersionResource
		ns  string
	}
	byScope := map[scope]map[string]wanted{}
	var scopes []scope
	for _, c := range env.Rendered.Components {
		for _, o := range c.Objects {
			gvk := o.GroupVersionKind()
			if gvk.Group == "" && gvk.Kind == "Namespace" {
				// Operators often create the namespace first: it is
				// applied, not owned.
				continue
			}
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				continue // a kind the cluster does not serve: the permissions check reports it
			}
			sc := scope{gvr: m.Resource}
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				sc.ns = o.GetNamespace()
				if sc.ns == "" {
					sc.ns = ns
				}
			}
			if byScope[sc] == nil {
				byScope[sc] = map[string]wanted{}
				scopes = append(scopes, sc)
			}
			byScope[sc][o.GetName()] = wanted{component: c.Name, kind: gvk.Kind, name: o.GetName()}
		}
	}
	type listed struct {
		lines []string
		err   error
		what  string
	}
	results := make([]listed, len(scopes))
	idx := map[scope]int{}
	for i, s := range scopes {
		idx[s] = i
	}
	clusterForEach(scopes, 8, func(s scope) {
		r := &results[idx[s]]
		var ri metadata.ResourceInterface = mc.Resource(s.gvr)
		r.what = "list " + s.gvr.Resource
		if s.ns != "" {
			ri = mc.Resource(s.gvr).Namespace(s.ns)
			r.what += " in namespace " + s.ns
		}
		l, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			r.err = err
			return
		}
		for _, item := range l.Items {
			w, ok := byScope[s][item.Name]
			if !ok {
				continue
			}
			a := item.Annotations
			if a[helmReleaseNameAnnotation] == w.component && a[helmReleaseNamespaceAnnotation] == ns {
				continue
			}
			owner := "not managed by Helm"
			if rel := a[helmReleaseNameAnnotation]; rel != "" {
				owner = fmt.Sprintf("managed by Helm release %s in namespace %s", rel, a[helmReleaseNamespaceAnnotation])
			} else if mb := item.Labels["app.kubernetes.io/managed-by"]; mb != "" {
				owner = "managed by " + mb
			}
			where := w.name
			if s.ns != "" {
				where = s.ns + "/" + w.name
			}
			r.lines = append(r.lines, fmt.Sprintf("%s %s exists, %s (component %s would take it over)", w.kind, where, owner, w.component))
		}
	})
	for _, r := range results {
		if r.err != nil {
			return cannotRun(Blocking, namespaceConflictsID, r.what, r.err)
		}
		conflicts = append(conflicts, r.lines...)
	}
	if len(conflicts) == 0 {
		return Passed("none of the %d objects and %d Helm releases the install creates exists under another owner", countObjects(env.Rendered), len(charts))
	}
	sort.Strings(conflicts)
	return Outcome{Result: Fail,
		Message: fmt.Sprintf("%d object%s or Helm release%s the install creates already exist%s and belong%s to someone else: %s",
			len(conflicts), clusterPlural(len(conflicts)), clusterPlural(len(conflicts)), clusterVerbS(len(conflicts)), clusterVerbS(len(conflicts)), clusterList(conflicts, 4)),
		Remediation: fmt.Sprintf("install the platform into a namespace of its own (spec.namespace), or remove these objects and releases (helm -n %s uninstall NAME for a release) if they are leftovers you no longer need; "+
			"onprem does not take over objects it did not create", ns),
		Details: conflicts}
}

func clusterVerbS(n int) string {
	if n == 1 {
		return "s"
	}
	return ""
}

func countObjects(r *render.Result) int {
	n := 0
	for _, c := range r.Components {
		n += len(c.Objects)
	}
	return n
}
