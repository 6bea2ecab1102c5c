package doctor

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"onprem.dev/onprem/installer/topology"
	"onprem.dev/onprem/preflight"
)

// clusterDNS reads the cluster's DNS pods: every service finds its
// databases, queues and peers by name, so with no DNS pod ready the whole
// platform stops while each of its own pods looks well (its readiness
// reports "lookup ... i/o timeout").
var clusterDNS = Analyzer{
	ID:          "cluster-dns",
	Description: "the cluster's DNS has no ready pod, or runs short of its pods: the services find their databases by name through it",
	Run: func(in *Input) []Finding {
		pods := in.S.Cluster.DNS
		if len(pods) == 0 {
			return nil // not collected, or not a DNS onprem knows
		}
		lost := map[string]bool{}
		for i := range in.S.Cluster.Nodes {
			if n := &in.S.Cluster.Nodes[i]; topology.NodeLost(n) != "" {
				lost[n.Name] = true
			}
		}
		ready := 0
		var evidence, onLost []string
		for i := range pods {
			p := &pods[i]
			line, ok := dnsPodState(p, lost[p.Spec.NodeName])
			if ok {
				ready++
			}
			if lost[p.Spec.NodeName] {
				onLost = append(onLost, p.Name)
			}
			evidence = append(evidence, line)
		}
		if ready == len(pods) {
			return nil
		}
		where := fmt.Sprintf("pods %s in namespace %s", preflight.DNSSelector, preflight.DNSNamespace)
		if ready > 0 {
			return []Finding{{Severity: Warning,
				Title:    fmt.Sprintf("the cluster's DNS runs short: %d of its %d pods ready; losing the node of the others stops every lookup of the platform", ready, len(pods)),
				Evidence: evidence,
				Remediation: "the platform still resolves names through the ready ones. " + dnsFix(onLost) +
					"; keep the DNS pods on different nodes (docs/availability.md, \"The cluster's DNS\")"}}
		}
		return []Finding{{Severity: Error,
			Title:    "the cluster's DNS has no ready pod: every service's lookup of its databases and peers fails (" + where + ")",
			Evidence: evidence,
			Remediation: dnsFix(onLost) + "; the platform serves again as soon as one is ready. " +
				"Then keep them on different nodes, away from a single point of loss (docs/availability.md, \"The cluster's DNS\")"}}
	},
}

// dnsPodState says in a line how one DNS pod is, and whether it answers.
func dnsPodState(p *corev1.Pod, nodeLost bool) (string, bool) {
	name := fmt.Sprintf("pod %s/%s on node %s", p.Namespace, p.Name, orNone(p.Spec.NodeName))
	if nodeLost {
		return name + ": its node is lost (Ready is not True): it answers no lookup", false
	}
	var why []string
	for _, cs := range p.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil {
			why = append(why, fmt.Sprintf("container %s waiting: %s", cs.Name, w.Reason))
		}
		if cs.RestartCount > 0 {
			why = append(why, fmt.Sprintf("container %s restarted %d times", cs.Name, cs.RestartCount))
		}
	}
	if !topology.PodReady(p) {
		if p.Status.Phase != corev1.PodRunning {
			why = append([]string{"phase " + string(p.Status.Phase)}, why...)
		}
		return name + ": not ready" + joinWhy(why), false
	}
	return name + ": ready" + joinWhy(why), true
}

func joinWhy(why []string) string {
	if len(why) == 0 {
		return ""
	}
	return " (" + strings.Join(why, "; ") + ")"
}

// dnsFix says how to get DNS pods answering again.
func dnsFix(onLost []string) string {
	read := "Read their logs and events ('kubectl -n " + preflight.DNSNamespace + " logs -l " + preflight.DNSSelector +
		"', 'kubectl -n " + preflight.DNSNamespace + " describe pods -l " + preflight.DNSSelector + "'; a support bundle has them under logs/" +
		preflight.DNSNamespace + "/)"
	if len(onLost) == 0 {
		return read
	}
	return "Kubernetes replaces a pod on a lost node only once it evicts it (about 5 minutes after the loss by default): to start " +
		strings.Join(onLost, ", ") + " elsewhere now, 'kubectl -n " + preflight.DNSNamespace + " delete pod " + strings.Join(onLost, " ") +
		" --force --grace-period=0'; otherwise " + read
}
