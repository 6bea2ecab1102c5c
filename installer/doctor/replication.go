package doctor

import (
	"fmt"

	"onprem.dev/onprem/installer/topology"
)

// LagWarningBytes is the replication lag past which a replica is named: it
// would need that much WAL before it could take over, and a synchronous
// standby never trails that far.
const LagWarningBytes = 64 << 20

// LagWarningSeconds is how far, in time, a MongoDB secondary may trail the
// primary before it is named: an election favours the most recent
// member, but one that far behind holds a minute of writes less, and a
// majority write waits for enough members to have it.
const LagWarningSeconds = 60

// replication judges a replicated database (spec.availability high) by its
// topology: no primary is an error (writes stop), a member down or no
// ready synchronous replica a warning (one more loss stops writes or loses
// them), a replica far behind a warning.
var replication = Analyzer{
	ID:          "database-replication",
	Description: "a replicated database (spec.availability high) has no primary or no majority, a member down, no synchronous (or, for Redis, no) replica ready, or a replica far behind (MongoDB: as a member answers replSetGetStatus)",
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
			if sts.Name == topology.MongoDB && sts.Spec.Template.Labels[topology.MongoDBClusterLabel] != "" {
				out = append(out, mongoDBFindings(ns, topology.MongoDBFromObjects(sts, objs.Pods, in.S.MongoDB), in.S.MongoDB != nil)...)
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
			evidence := memberLines(top)
			obj := object("StatefulSet", ns, sts.Name)
			switch {
			case top.Primary == "":
				out = append(out, Finding{Severity: Error, Component: topology.PostgreSQL, Object: obj, Evidence: evidence,
					Title: "PostgreSQL has no primary: every write fails until Patroni elects one",
					Remediation: "a failover takes about 25 s by itself; if none of the members is a replica that runs (see the evidence), " +
						"bring back the node of the last primary or its volume; the members' logs say why they do not take the lock (onprem support-bundle)"})
				continue
			case !top.Healthy() && !onlyBehind(top):
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
				if m.BehindTimeline && top.Primary != "" {
					out = append(out, Finding{Severity: Warning, Component: topology.PostgreSQL, Object: object("Pod", ns, m.Name), Evidence: evidence,
						Title: fmt.Sprintf("PostgreSQL replica %s does not follow the primary %s: it is on timeline %d, the primary on a later one, so it receives none of its writes",
							m.Name, top.Primary, m.Timeline),
						Remediation: "a former primary that comes back is rewound by Patroni within a minute; if this lasts, its log says why " +
							"('kubectl -n " + ns + " logs " + m.Name + " -c " + topology.PostgreSQL + "', or onprem support-bundle). " +
							"'password authentication failed' there is a member whose rewind login the primary refuses (an onprem older than the rewind role, " +
							"after an admin rotation, docs/rotation.md): 'onprem upgrade apply' to this version restarts every member with the right login. " +
							"Otherwise rebuild it from the primary (its data is replaced by a copy of the primary's): " +
							"'kubectl -n " + ns + " exec " + m.Name + " -c " + topology.PostgreSQL + " -- patronictl -c /etc/patroni/member.yml reinit --force " +
							topology.PostgreSQL + " " + m.Name + "'"})
				}
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

// onlyBehind says whether every PostgreSQL member that does not count as
// running is a replica behind the primary's timeline, which a finding of
// its own names (with its own fix: its node is not the problem).
func onlyBehind(top *topology.Topology) bool {
	seen := false
	for _, m := range top.Members {
		switch {
		case m.BehindTimeline:
			seen = true
		case !m.Ready || m.Role == topology.RoleUnknown:
			return false
		}
	}
	return seen && len(top.Members) >= top.Desired
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

// mongoDBFindings judges MongoDB's replica set as a member answered
// replSetGetStatus (asked: false when the snapshot holds no answer, a
// bundle of an older onprem: nothing is judged). No majority of healthy
// members, or no primary, is an error; a member down, a set no member
// answered, or a secondary more than LagWarningSeconds behind a warning.
func mongoDBFindings(ns string, top *topology.Topology, asked bool) []Finding {
	if !asked {
		return nil
	}
	evidence := memberLines(top)
	obj := object("StatefulSet", ns, topology.MongoDB)
	var out []Finding
	switch {
	case top.Unanswered != "":
		return []Finding{{Severity: Warning, Component: topology.MongoDB, Object: obj, Evidence: append(evidence, top.Unanswered),
			Title: "MongoDB's members did not say their roles: " + top.Unanswered,
			Remediation: "a member that runs answers replSetGetStatus to the admin of the Secret onprem-mongodb-admin: the members' logs, " +
				"and the findings about their pods, say why they do not (not yet in the set: the Job mongodb-replica-set's log; a refused login: " +
				"'onprem rotate credentials --admin' left the Secret and the users apart)"}}
	case !top.Quorum:
		return []Finding{{Severity: Error, Component: topology.MongoDB, Object: obj, Evidence: evidence,
			Title: "MongoDB's replica set has lost its majority: " + top.Summary(),
			Remediation: "without a majority of healthy members no primary is elected and every write fails; bring back the members' nodes " +
				"(or their volumes): the set elects a primary by itself once a majority answers. The findings about their pods say why they are down; " +
				"never force a reconfiguration of the members left, which may lose the writes only the lost members hold"}}
	case top.Primary == "":
		return []Finding{{Severity: Error, Component: topology.MongoDB, Object: obj, Evidence: evidence,
			Title: "MongoDB has no primary: every write fails until the members elect one",
			Remediation: "an election takes about 10 s by itself while a majority is healthy; if it lasts, the members' logs say why none " +
				"is elected (a member in RECOVERING or STARTUP2 is still catching up; onprem support-bundle holds the logs)"}}
	case !top.Healthy():
		out = append(out, Finding{Severity: Warning, Component: topology.MongoDB, Object: obj, Evidence: evidence,
			Title: "MongoDB runs with a member down: " + top.Summary(),
			Remediation: "the platform serves; bring the member's node back, or drain and delete it so that the pod is scheduled elsewhere " +
				"(a member with a new volume copies the data from the set by itself): the findings about its pod say why it is down"})
	}
	for _, m := range top.Members {
		if m.LagSeconds != nil && *m.LagSeconds > LagWarningSeconds {
			out = append(out, Finding{Severity: Warning, Component: topology.MongoDB, Object: object("Pod", ns, m.Name), Evidence: evidence,
				Title:       fmt.Sprintf("MongoDB secondary %s is %.0f s behind the primary", m.Name, *m.LagSeconds),
				Remediation: "a secondary that far behind slows majority writes and holds less if elected; check its node's disk and network (node-pressure, volume-full findings) and its log"})
		}
	}
	return out
}

// memberLines is each member of a replicated database as evidence: its
// node, role, state, readiness, whether it is synchronous and how far
// behind it is (in bytes or seconds, as its engine says).
func memberLines(top *topology.Topology) []string {
	var out []string
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
		if m.LagSeconds != nil {
			line += fmt.Sprintf(", %.1f s behind", *m.LagSeconds)
		}
		out = append(out, line)
	}
	return out
}
