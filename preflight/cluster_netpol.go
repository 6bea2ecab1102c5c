package preflight

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const networkPolicyID = "network-policy"

// networkPlugin is a network plugin recognised by the name of the
// DaemonSet that runs it on every node, and whether it enforces
// NetworkPolicies.
type networkPlugin struct {
	daemonSet string // a substring of the DaemonSet's name
	name      string
	enforces  bool
}

// networkPlugins are the plugins the check knows. kindnet and flannel
// route pods but ignore NetworkPolicies (flannel with Calico's policy
// engine is Canal, which enforces them).
var networkPlugins = []networkPlugin{
	{"calico-node", "Calico", true},
	{"cilium", "Cilium", true},
	{"kube-router", "kube-router", true},
	{"antrea-agent", "Antrea", true},
	{"weave-net", "Weave Net", true},
	{"canal", "Canal", true},
	{"kube-network-policies", "kube-network-policies", true},
	{"kindnet", "kindnet", false},
	{"flannel", "flannel", false},
}

// networkPolicyCheck says whether the cluster's network plugin enforces
// the NetworkPolicies the platform ships (a default deny and the flows it
// allows): on a plugin that ignores them they are accepted and change
// nothing, so the platform's isolation rests on nothing.
func networkPolicyCheck() Check {
	return Check{
		ID:       networkPolicyID,
		Title:    "the cluster's network plugin enforces the platform's NetworkPolicies (its isolation rests on them)",
		Severity: Advisory,
		Run:      runNetworkPolicy,
	}
}

func runNetworkPolicy(ctx context.Context, env *Env) Outcome {
	if out, ok := requireEnv(env, Advisory, "cluster"); !ok {
		return out
	}
	l, err := env.Cluster.Client.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return cannotRun(Advisory, networkPolicyID, "list the DaemonSets of every namespace (to find the network plugin)", err)
	}
	var enforcing, ignoring []string
	for _, ds := range l.Items {
		for _, p := range networkPlugins {
			if !strings.Contains(ds.Name, p.daemonSet) {
				continue
			}
			where := fmt.Sprintf("%s (DaemonSet %s/%s)", p.name, ds.Namespace, ds.Name)
			if p.enforces {
				enforcing = append(enforcing, where)
			} else {
				ignoring = append(ignoring, where)
			}
			break
		}
	}
	sort.Strings(enforcing)
	sort.Strings(ignoring)
	switch {
	case len(enforcing) > 0:
		return Passed("NetworkPolicies are enforced by %s", strings.Join(enforcing, ", "))
	case len(ignoring) > 0:
		return Outcome{Result: Warn,
			Message: fmt.Sprintf("the cluster's network plugin is %s, which does not enforce NetworkPolicies: the platform's default deny and allowed flows "+
				"are accepted but change nothing, so any pod of the cluster can reach its databases", strings.Join(ignoring, ", ")),
			Remediation: "use a network plugin that enforces NetworkPolicies (Calico, Cilium, Antrea, kube-router, or Canal with flannel), " +
				"or accept that the platform's isolation rests on the cluster's other controls; skip this check with --skip-check " + networkPolicyID}
	}
	names := make([]string, 0, len(networkPlugins))
	for _, p := range networkPlugins {
		names = append(names, p.name)
	}
	return Passed("no DaemonSet of a known network plugin (%s) was found, so whether NetworkPolicies are enforced is not known: "+
		"the platform's isolation rests on them, make sure your plugin enforces them", strings.Join(names, ", "))
}
