package preflight

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

const permissionsID = "permissions"

// reviewConcurrency bounds the SelfSubjectAccessReviews sent at once.
const reviewConcurrency = 16

// objectVerbs are what the install does to each object it renders: Helm's
// server-side apply creates, reads, patches and (on upgrade or rollback)
// updates and deletes; kstatus lists and watches to wait for it.
var objectVerbs = []string{"create", "get", "list", "watch", "patch", "update", "delete"}

// permissionsCheck asks the API server, one SelfSubjectAccessReview per
// verb and resource, whether the kubeconfig's user may do what the install
// will do.
func permissionsCheck() Check {
	return Check{
		ID:       permissionsID,
		Title:    "the kubeconfig's user may create, change and watch every kind of object the install applies",
		Severity: Blocking,
		Run:      runPermissions,
	}
}

// access is one permission the install needs.
type access struct {
	Verb        string
	Group       string
	Resource    string
	Subresource string
	Name        string // a rule's resourceNames
	Namespace   string // "" for cluster-scoped resources
	Path        string // non-resource URL (then Resource is empty)
	// Why says what needs it, for the details.
	Why string
	// GrantedBy is set for the permissions a rendered Role or ClusterRole
	// grants: the API server refuses to create a role granting what its
	// creator does not hold, unless the creator may "escalate" roles.
	GrantedBy string
}

func (a access) resourceName() string {
	r := a.Resource
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	if a.Group != "" {
		r += "." + a.Group
	}
	if a.Name != "" {
		r += " " + a.Name
	}
	return r
}

func (a access) where() string {
	if a.Namespace == "" {
		return "cluster-wide"
	}
	return "in namespace " + a.Namespace
}

// String is "create deployments.apps in namespace onprem".
func (a access) String() string {
	if a.Path != "" {
		return a.Verb + " " + a.Path
	}
	return a.Verb + " " + a.resourceName() + " " + a.where()
}

func (a access) key() string {
	return strings.Join([]string{a.Verb, a.Group, a.Resource, a.Subresource, a.Name, a.Namespace, a.Path, a.GrantedBy}, "|")
}

// neededAccess lists the permissions the install uses, from the rendered
// objects (mapped to resources with mapper) and the installer's own needs.
// Kinds the cluster does not serve are returned separately.
func neededAccess(env *Env, mapper meta.RESTMapper) (needs []access, unserved []string) {
	ns := platformNamespace(env)
	seen := map[string]bool{}
	add := func(a access) {
		if !seen[a.key()] {
			seen[a.key()] = true
			needs = append(needs, a)
		}
	}
	unservedSeen := map[string]bool{}
	for _, c := range env.Rendered.Components {
		for _, o := range c.Objects {
			gvk := o.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				k := gvk.Kind + " (" + gvk.GroupVersion().String() + ")"
				if !unservedSeen[k] {
					unservedSeen[k] = true
					unserved = append(unserved, k)
				}
				continue
			}
			objNS := ""
			if m.Scope.Name() == meta.RESTScopeNameNamespace {
				objNS = o.GetNamespace()
				if objNS == "" {
					objNS = ns
				}
			}
			for _, v := range objectVerbs {
				add(access{Verb: v, Group: m.Resource.Group, Resource: m.Resource.Resource, Namespace: objNS,
					Why: "the rendered " + gvk.Kind + " objects"})
			}
			if gvk.Group == rbacv1.GroupName && (gvk.Kind == "Role" || gvk.Kind == "ClusterRole") {
				for _, a := range grantedBy(o, objNS) {
					add(a)
				}
			}
		}
	}
	for _, v := range objectVerbs {
		add(access{Verb: v, Resource: "secrets", Namespace: ns, Why: "generated secrets and Helm's release records"})
	}
	for _, v := range []string{"get", "create", "update", "delete"} {
		add(access{Verb: v, Group: "coordination.k8s.io", Resource: "leases", Namespace: ns, Why: "the installation's lock"})
	}
	for _, v := range []string{"get", "create", "patch"} {
		add(access{Verb: v, Resource: "namespaces", Why: "the platform namespace"})
	}
	add(access{Verb: "list", Resource: "events", Namespace: ns, Why: "diagnostics of components that do not turn ready"})
	add(access{Verb: "list", Resource: "pods", Namespace: ns, Why: "diagnostics of components that do not turn ready"})
	add(access{Verb: "create", Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews", Why: "this check"})
	sort.Strings(unserved)
	return needs, unserved
}

// grantedBy lists what a rendered Role (namespace ns) or ClusterRole (ns
// "") grants.
func grantedBy(o *unstructured.Unstructured, ns string) []access {
	raw, _, _ := unstructured.NestedSlice(o.Object, "rules")
	var out []access
	by := o.GetKind() + " " + o.GetName()
	for _, r := range raw {
		m, ok := r.(map[string]any)
		if !ok {
			continue
		}
		var rule rbacv1.PolicyRule
		if runtime.DefaultUnstructuredConverter.FromUnstructured(m, &rule) != nil {
			continue
		}
		for _, v := range rule.Verbs {
			for _, p := range rule.NonResourceURLs {
				out = append(out, access{Verb: v, Path: p, GrantedBy: by, Why: "granted by " + by})
			}
			for _, g := range rule.APIGroups {
				for _, res := range rule.Resources {
					resource, sub, _ := strings.Cut(res, "/")
					names := rule.ResourceNames
					if len(names) == 0 {
						names = []string{""}
					}
					for _, n := range names {
						out = append(out, access{Verb: v, Group: g, Resource: resource, Subresource: sub, Name: n,
							Namespace: ns, GrantedBy: by, Why: "granted by " + by})
					}
				}
			}
		}
	}
	return out
}

func (a access) review() *authorizationv1.SelfSubjectAccessReview {
	r := &authorizationv1.SelfSubjectAccessReview{}
	if a.Path != "" {
		r.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: a.Path, Verb: a.Verb}
		return r
	}
	r.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
		Namespace: a.Namespace, Verb: a.Verb, Group: a.Group, Resource: a.Resource,
		Subresource: a.Subresource, Name: a.Name,
	}
	return r
}

func runPermissions(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Blocking, "cluster", "rendered"); !ok {
		return out
	}
	if env.Cluster.Getter == nil {
		return missingInput(Blocking, "the cluster's REST mapper")
	}
	mapper, err := env.Cluster.Getter.ToRESTMapper()
	if err != nil {
		return cannotRun(Blocking, permissionsID, "discover the cluster's API resources", err)
	}
	needs, unserved := neededAccess(env, mapper)
	// Creating a role that grants more than its creator holds needs the
	// escalate verb on roles (or clusterroles).
	escalate := map[string]access{}
	for _, a := range needs {
		if a.GrantedBy == "" {
			continue
		}
		res := "roles"
		if a.Namespace == "" {
			res = "clusterroles"
		}
		e := access{Verb: "escalate", Group: rbacv1.GroupName, Resource: res, Namespace: a.Namespace}
		escalate[e.key()] = e
	}
	all := append([]access(nil), needs...)
	for _, e := range escalate {
		all = append(all, e)
	}

	allowed := make(map[string]bool, len(all))
	var (
		mu      sync.Mutex
		errs    []string
		lastErr error
	)
	client := env.Cluster.Client.AuthorizationV1().SelfSubjectAccessReviews()
	clusterForEach(all, reviewConcurrency, func(a access) {
		if ctx.Err() != nil {
			return
		}
		res, err := client.Create(ctx, a.review(), metav1.CreateOptions{})
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, a.String())
			lastErr = err
			return
		}
		allowed[a.key()] = res.Status.Allowed && !res.Status.Denied
	})
	if err := ctx.Err(); err != nil {
		return cannotRun(Blocking, permissionsID, "review the permissions", err)
	}
	if len(errs) > 0 {
		return cannotRun(Blocking, permissionsID,
			fmt.Sprintf("create SelfSubjectAccessReviews (%d of %d failed, e.g. for %s)", len(errs), len(all), errs[0]), lastErr)
	}

	var missing []access
	for _, a := range needs {
		if allowed[a.key()] {
			continue
		}
		if a.GrantedBy != "" {
			res := "roles"
			if a.Namespace == "" {
				res = "clusterroles"
			}
			if allowed[access{Verb: "escalate", Group: rbacv1.GroupName, Resource: res, Namespace: a.Namespace}.key()] {
				continue
			}
		}
		missing = append(missing, a)
	}
	if len(missing) == 0 && len(unserved) == 0 {
		return Passed("the kubeconfig's user holds all %d permissions the install uses", len(needs))
	}
	return permissionsOutcome(missing, unserved, len(needs))
}

// permissionsOutcome reports missing permissions compactly: one line per
// resource and scope with its verbs.
func permissionsOutcome(missing []access, unserved []string, total int) Outcome {
	type group struct {
		what  string
		verbs []string
	}
	var order []string
	groups := map[string]*group{}
	var details []string
	for _, a := range missing {
		what := a.resourceName() + " " + a.where()
		if a.Path != "" {
			what = "URL " + a.Path
		}
		if a.GrantedBy != "" {
			what += " (granted by the rendered " + a.GrantedBy + ")"
		}
		g, ok := groups[what]
		if !ok {
			g = &group{what: what}
			groups[what] = g
			order = append(order, what)
		}
		g.verbs = append(g.verbs, a.Verb)
		details = append(details, fmt.Sprintf("missing: %s (for %s)", a, a.Why))
	}
	var lines []string
	for _, w := range order {
		g := groups[w]
		lines = append(lines, strings.Join(clusterSortedUnique(g.verbs), ",")+" "+g.what)
	}
	var parts []string
	rem := []string{}
	if len(missing) > 0 {
		parts = append(parts, fmt.Sprintf("the kubeconfig's user lacks %d of the %d permissions the install uses: %s",
			len(missing), total, clusterList(lines, 6)))
		rem = append(rem, "grant the kubeconfig's user the missing permissions (the details list each one; a ClusterRole with these rules bound to the user), or run onprem as a cluster administrator")
		if hasGranted(missing) {
			rem = append(rem, "for the permissions the platform's own Roles grant, either hold them too or be allowed to 'escalate' roles and clusterroles")
		}
	}
	if len(unserved) > 0 {
		parts = append(parts, "the cluster does not serve these kinds the install creates: "+strings.Join(unserved, ", "))
		rem = append(rem, "install the APIs (CRDs) that serve them, or switch off the feature that uses them in onprem.yaml (e.g. spec.ingress.gatewayAPI.enabled)")
		for _, u := range unserved {
			details = append(details, "not served: "+u)
		}
	}
	return Outcome{Result: Fail, Message: strings.Join(parts, "; "), Remediation: strings.Join(rem, "; "), Details: details}
}

func hasGranted(as []access) bool {
	for _, a := range as {
		if a.GrantedBy != "" {
			return true
		}
	}
	return false
}
