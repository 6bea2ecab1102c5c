package managedcluster

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	rbacv1ac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/discovery"
)

// writeVerbs are granted on the kinds a GitOps deployment applies.
var writeVerbs = []string{"get", "create", "update", "patch", "delete"}

// writable are the kinds the ServiceAccount may write, by API group. See
// the package documentation.
var writable = []struct {
	group     string
	resources []string
}{
	{"", []string{"configmaps", "namespaces", "persistentvolumeclaims", "pods", "secrets", "serviceaccounts", "services"}},
	{"apps", []string{"daemonsets", "deployments", "replicasets", "statefulsets"}},
	{"autoscaling", []string{"horizontalpodautoscalers"}},
	{"batch", []string{"cronjobs", "jobs"}},
	{"networking.k8s.io", []string{"ingresses", "networkpolicies"}},
	{"policy", []string{"poddisruptionbudgets"}},
	{"rbac.authorization.k8s.io", []string{"rolebindings", "roles"}},
}

// readableSubresources may be read with get besides the top-level
// resources: Argo CD shows pod logs.
var readableSubresources = map[string][]string{"": {"pods/log"}}

// gettable returns, by API group, the top-level resources the cluster
// serves that support get, read from its discovery. Groups whose discovery
// failed (an aggregated API that is down) are left out: their kinds stay
// listable through the wildcard rule.
func gettable(ctx context.Context, dc discovery.DiscoveryInterface) (map[string][]string, error) {
	_, lists, err := discovery.ToDiscoveryInterfaceWithContext(dc).ServerGroupsAndResourcesWithContext(ctx)
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, err
	}
	seen := map[string]map[string]bool{}
	for _, l := range lists {
		if l == nil {
			continue
		}
		gv, perr := schema.ParseGroupVersion(l.GroupVersion)
		if perr != nil {
			continue
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "get") {
				continue
			}
			if seen[gv.Group] == nil {
				seen[gv.Group] = map[string]bool{}
			}
			seen[gv.Group][r.Name] = true
		}
	}
	out := make(map[string][]string, len(seen))
	for g, rs := range seen {
		for r := range rs {
			out[g] = append(out[g], r)
		}
		sort.Strings(out[g])
	}
	return out, nil
}

// policyRules is the ClusterRole: list and watch everything, get the
// top-level resources of get (and pods/log), write what a deployment
// applies. The rules are sorted so that a second Add on an unchanged
// cluster applies the same role.
func policyRules(get map[string][]string) []*rbacv1ac.PolicyRuleApplyConfiguration {
	rules := []*rbacv1ac.PolicyRuleApplyConfiguration{
		rbacv1ac.PolicyRule().WithAPIGroups("*").WithResources("*").WithVerbs("list", "watch"),
	}
	groups := make([]string, 0, len(get)+len(readableSubresources))
	for g := range get {
		groups = append(groups, g)
	}
	for g := range readableSubresources {
		if _, ok := get[g]; !ok {
			groups = append(groups, g)
		}
	}
	sort.Strings(groups)
	for _, g := range groups {
		var rs []string
		for _, r := range get[g] {
			if !strings.ContainsAny(r, "/*") {
				rs = append(rs, r)
			}
		}
		rs = append(rs, readableSubresources[g]...)
		sort.Strings(rs)
		rs = slices.Compact(rs)
		if len(rs) > 0 {
			rules = append(rules, rbacv1ac.PolicyRule().WithAPIGroups(g).WithResources(rs...).WithVerbs("get"))
		}
	}
	for _, w := range writable {
		rules = append(rules, rbacv1ac.PolicyRule().WithAPIGroups(w.group).WithResources(w.resources...).WithVerbs(writeVerbs...))
	}
	return rules
}

// discoverGettable wraps gettable's error for Add.
func discoverGettable(ctx context.Context, dc discovery.DiscoveryInterface, name, server string) (map[string][]string, error) {
	get, err := gettable(ctx, dc)
	if err != nil {
		return nil, fmt.Errorf("managed cluster %s: reading the API resources of the cluster at %s for its ClusterRole: %w; check that the cluster's API server and its aggregated APIs answer (kubectl api-resources)", name, server, err)
	}
	return get, nil
}
