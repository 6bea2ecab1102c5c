package doctor

import (
	"fmt"

	"onprem.dev/onprem/installer/topology"
)

// LagWarningBytes is the replication lag past which a replica is named: it
// would need that much WAL before it could take over, and a synchronous
// standby never trails that far.
const LagWarningBytes = 64 << 20

// replication judges a replicated database (spec.availability high) by its
// topology: no primary is an error (writes stop), a member down or no
// ready synchronous replica a warning (one more loss stops writes or loses
// them), a replica far behind a warning.
var replication = Analyzer{
	ID:          "database-replication",
	Description: "a replicated database (spec.availability high) has no primary or no majority, a member down, no synchronous (or, for Redis, no) replica ready, or a replica far behind",
	Run: func(in *Input) []Finding {
		ns := in.S.Meta.Namespace
		objs := in.S.Objects(ns)
		var out []Finding
		for i := range objs.StatefulSets {
			sts := &objs.StatefulSets[i]
			if sts.Name == topology.RabbitMQ && sts.Spec.Template.Labels[topology.RabbitMQClusterLabel] != "" {
				out = append(out, rabbitMQFindings(ns, topology.RabbitMQFromObjects(sts, objs.Pods))...)
				continue
			}
			if sts.Name == topology.Redis && sts.Spec.Template.Labels[topology.RedisClusterLabel] != "" {
				out = append(out, redisFindings(ns, topology.RedisFromObjects(sts, objs.Pods, objs.Endpoints))...)
				continue
			}
			if sts.Name != topology.PostgreSQL || sts.Spec.Template.Labels[topology.ClusterLabel] == "" {
				continue
			}
			top := topology.FromObjects(sts, objs.Pods, objs.Endpoints)
			var evidence []string
			for _, m := range top.Members {
				line := fmt.Sprintf("%s on node %s: %s", m.Name, orNone(m.Node), m.Role)
				if m.State != "" {
					line += ", " + m.State
				}
				if !m.Ready {
					line += ", not ready"
				}
				if m.Synchronous {
					line += ", synchronous"
				}
				if m.LagBytes != nil {
					line += fmt.Sprintf(", %d bytes behind", *m.LagBytes)
				}
				evidence = append(evidence, line)
			}
			obj := object("StatefulSet", ns, sts.Name)
			switch {
			case top.Primary == "":
				out = append(out, Finding{Severity: Error, Component: topology.PostgreSQL, Object: obj, Evidence: evidence,
					Title: "PostgreSQL has no primary: every write fails until Patroni elects one",
					Remediation: "a failover takes about 25 s by itself; if none of the members is a replica that runs (see the evidence), " +
						"bring back the node of the last primary or its volume; the members' logs say why they do not take the lock (onprem support-bundle)"})
				continue
			case !top.Healthy():
				out = append(out, Finding{Severity: Warning, Component: topology.PostgreSQL, Object: obj, Evidence: evidence,
					Title: fmt.Sprintf("PostgreSQL runs with a member down (primary %s): %s", top.Primary, top.Summary()),
					Remediation: "the platform serves; bring the member's node back (or drain and delete it, so that the member is scheduled elsewhere " +
						"and clones the primary): the findings about its pod say why it is down"})
			case !top.Quorum:
				out = append(out, Finding{Severity: Warning, Component: topology.PostgreSQL, Object: obj, Evidence: evidence,
					Title:       "PostgreSQL has no synchronous replica ready: losing the primary now would stop writes or lose the last ones",
					Remediation: "Patroni picks a new synchronous replica within a few seconds; if this lasts, the replicas' logs say why they do not stream"})
			}
			for _, m := range top.Members {
				if m.LagBytes != nil && *m.LagBytes > LagWarningBytes {
					out = append(out, Finding{Severity: Warning, Component: topology.PostgreSQL, Object: object("Pod", ns, m.Name), Evidence: evidence,
						Title:       fmt.Sprintf("PostgreSQL replica %s is %d MiB behind the primary", m.Name, *m.LagBytes>>20),
						Remediation: "a replica that far behind cannot take over without losing time; check its node's disk and network (node-pressure, volume-full findings)"})
				}
			}
		}
		return out
	},
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// rabbitMQFindings: a RabbitMQ cluster without a majority of its nodes
// ready is an error (its quorum queues accept no message), one with a node
// down a warning.
func rabbitMQFindings(ns string, top *topology.Topology) []Finding {
	var evidence []string
	for _, m := range top.Members {
		evidence = append(evidence, fmt.Sprintf("%s on node %s: %s", m.Name, orNone(m.Node), m.State))
	}
	obj := object("StatefulSet", ns, topology.RabbitMQ)
	switch {
	case !top.Quorum:
		return []Finding{{Severity: Error, Component: topology.RabbitMQ, Object: obj, Evidence: evidence,
			Title: "RabbitMQ has lost its majority: " + top.Summary(),
			Remediation: "the nodes left pause themselves rather than take messages the others would never see; bring back the nodes (or their " +
				"Kubernetes nodes and volumes): the cluster serves again by itself once a majority runs. The findings about their pods say why they are down"}}
	case !top.Healthy():
		return []Finding{{Severity: Warning, Component: topology.RabbitMQ, Object: obj, Evidence: evidence,
			Title: "RabbitMQ runs with a node down: " + top.Summary(),
			Remediation: "the platform serves; bring the node's Kubernetes node back, or drain and delete it so that the pod is scheduled elsewhere " +
				"(a node with a new volume rejoins the cluster and its queues by itself)"}}
	}
	return nil
}

// redisFindings: a replicated Redis with no master, or a master with no
// ready replica (it refuses writes: min-replicas-to-write), is an error;
// one with a member down a warning.
func redisFindings(ns string, top *topology.Topology) []Finding {
	var evidence []string
	for _, m := range top.Members {
		line := fmt.Sprintf("%s on node %s: %s, %s", m.Name, orNone(m.Node), m.Role, m.State)
		evidence = append(evidence, line)
	}
	obj := object("StatefulSet", ns, topology.Redis)
	switch {
	case top.Primary == "":
		return []Finding{{Severity: Error, Component: topology.Redis, Object: obj, Evidence: evidence,
			Title: "Redis has no master: every write fails until Sentinel promotes a replica",
			Remediation: "a failover takes about 10 s by itself once a majority of the members' Sentinels agree; if it does not come, bring back " +
				"the members' nodes (a majority is needed); the sentinel and keeper containers' logs say what they see (onprem support-bundle)"}}
	case !top.Quorum:
		return []Finding{{Severity: Error, Component: topology.Redis, Object: obj, Evidence: evidence,
			Title: "Redis's master " + top.Primary + " has no ready replica: it refuses writes (it takes them only while a replica follows it), and its loss could not be recovered",
			Remediation: "bring back a replica's node (or drain and delete its pod, so that it is scheduled elsewhere and copies the master); " +
				"the findings about the replicas' pods say why they are down"}}
	case !top.Healthy():
		return []Finding{{Severity: Warning, Component: topology.Redis, Object: obj, Evidence: evidence,
			Title: "Redis runs with a member down: " + top.Summary(),
			Remediation: "the platform serves; bring the member's node back, or drain and delete it so that the pod is scheduled elsewhere " +
				"(a new member copies the master by itself)"}}
	}
	return nil
}
