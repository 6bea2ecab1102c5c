package doctor

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/topology"
)

func haMember(name, role string, ready bool, xlog string) corev1.Pod {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem",
		Labels:      map[string]string{topology.ClusterLabel: topology.PostgreSQL, "onprem.dev/component": "postgresql"},
		Annotations: map[string]string{"status": `{"state":"running","xlog_location":` + xlog + `}`}},
		Spec: corev1.PodSpec{NodeName: "node-" + name[len(name)-1:]}}
	if role != "" {
		p.Labels[topology.RoleLabel] = role
	}
	p.Status.Phase = corev1.PodRunning
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	return p
}

func haSnapshot(ready int32, pods []corev1.Pod, leader, sync string) *Report {
	s := base()
	three := int32(3)
	sts := appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "postgresql", Namespace: "onprem",
		Labels: map[string]string{"onprem.dev/component": "postgresql"}}}
	sts.Spec.Replicas = &three
	sts.Spec.Template.Labels = map[string]string{topology.ClusterLabel: topology.PostgreSQL}
	sts.Status.ReadyReplicas = ready
	o := s.Namespaces["onprem"]
	o.StatefulSets = []appsv1.StatefulSet{sts}
	o.Pods = pods
	lbl := map[string]string{topology.ClusterLabel: topology.PostgreSQL}
	o.Endpoints = []corev1.Endpoints{
		{ObjectMeta: metav1.ObjectMeta{Name: "postgresql", Labels: lbl, Annotations: map[string]string{"leader": leader, "optime": "200000000"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "postgresql-sync", Labels: lbl, Annotations: map[string]string{"sync_standby": sync}}},
	}
	return Analyze(s)
}

func TestReplicationFindings(t *testing.T) {
	t.Run("healthy: nothing", func(t *testing.T) {
		rep := haSnapshot(3, []corev1.Pod{
			haMember("postgresql-0", "master", true, "200000000"),
			haMember("postgresql-1", "replica", true, "200000000"),
			haMember("postgresql-2", "replica", true, "199999000"),
		}, "postgresql-0", "postgresql-1")
		if f := only(t, rep, "database-replication"); len(f) != 0 {
			t.Errorf("findings on a healthy cluster: %+v", f)
		}
		if f := only(t, rep, "database-down"); len(f) != 0 {
			t.Errorf("database-down on a healthy cluster: %+v", f)
		}
	})
	t.Run("a member down is a warning, not database-down", func(t *testing.T) {
		rep := haSnapshot(2, []corev1.Pod{
			haMember("postgresql-0", "master", false, "100"),
			haMember("postgresql-1", "master", true, "200000000"),
			haMember("postgresql-2", "replica", true, "200000000"),
		}, "postgresql-1", "postgresql-2")
		f := only(t, rep, "database-replication")
		if len(f) != 1 || f[0].Severity != Warning || !holds(f[0], "member down (primary postgresql-1)", "postgresql-0 on node node-0: unknown, running, not ready") {
			t.Errorf("findings: %+v", f)
		}
		if f := only(t, rep, "database-down"); len(f) != 0 {
			t.Errorf("database-down with two members of three serving: %+v", f)
		}
	})
	t.Run("no primary is an error", func(t *testing.T) {
		rep := haSnapshot(2, []corev1.Pod{
			haMember("postgresql-0", "", false, "100"),
			haMember("postgresql-1", "replica", true, "100"),
			haMember("postgresql-2", "replica", true, "100"),
		}, "", "")
		f := only(t, rep, "database-replication")
		if len(f) != 1 || f[0].Severity != Error || !holds(f[0], "no primary") || f[0].Remediation == "" {
			t.Errorf("findings: %+v", f)
		}
	})
	t.Run("a former primary that did not rejoin: its own finding, not a member down", func(t *testing.T) {
		onTimeline := func(p corev1.Pod, timeline int) corev1.Pod {
			p.Annotations["status"] = fmt.Sprintf(`{"state":"running","xlog_location":%s,"timeline":%d}`,
				map[bool]string{true: "300000000", false: "200000000"}[timeline == 1], timeline)
			return p
		}
		rep := haSnapshot(3, []corev1.Pod{
			onTimeline(haMember("postgresql-0", "replica", true, ""), 1),
			onTimeline(haMember("postgresql-1", "master", true, ""), 2),
			onTimeline(haMember("postgresql-2", "replica", true, ""), 2),
		}, "postgresql-1", "postgresql-2")
		f := only(t, rep, "database-replication")
		if len(f) != 1 || f[0].Severity != Warning || f[0].Object != object("Pod", "onprem", "postgresql-0") ||
			!holds(f[0], "postgresql-0 does not follow the primary postgresql-1: it is on timeline 1") ||
			!strings.Contains(f[0].Remediation, "kubectl -n onprem exec postgresql-0 -c postgresql -- patronictl -c /etc/patroni/member.yml reinit --force postgresql postgresql-0") {
			t.Errorf("findings: %+v", f)
		}
	})
	t.Run("a replica far behind", func(t *testing.T) {
		rep := haSnapshot(3, []corev1.Pod{
			haMember("postgresql-0", "master", true, "200000000"),
			haMember("postgresql-1", "replica", true, "200000000"),
			haMember("postgresql-2", "replica", true, "1000"),
		}, "postgresql-0", "postgresql-1")
		f := only(t, rep, "database-replication")
		if len(f) != 1 || f[0].Severity != Warning || !holds(f[0], "postgresql-2 is 190 MiB behind") {
			t.Errorf("findings: %+v", f)
		}
	})
}

func rabbitSnapshot(pods ...corev1.Pod) *Report {
	return clusterSnapshot(topology.RabbitMQ, topology.RabbitMQClusterLabel, pods...)
}

// clusterSnapshot: the StatefulSet name of three members whose pods carry
// label, with pods.
func clusterSnapshot(name, label string, pods ...corev1.Pod) *Report {
	s := base()
	three := int32(3)
	sts := appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem",
		Labels: map[string]string{"onprem.dev/component": name}}}
	sts.Spec.Replicas = &three
	sts.Spec.Template.Labels = map[string]string{label: name}
	for _, p := range pods {
		if p.Status.Conditions[0].Status == corev1.ConditionTrue {
			sts.Status.ReadyReplicas++
		}
	}
	o := s.Namespaces["onprem"]
	o.StatefulSets = []appsv1.StatefulSet{sts}
	o.Pods = pods
	return Analyze(s)
}

func rabbitNode(name string, ready bool) corev1.Pod {
	p := haMember(name, "", ready, "0")
	p.Labels = map[string]string{topology.RabbitMQClusterLabel: topology.RabbitMQ, "onprem.dev/component": "rabbitmq"}
	p.Annotations = nil
	return p
}

// A RabbitMQ cluster: a node down is a warning (the majority serves), the
// majority lost an error; database-down leaves it to this analyzer while a
// node is ready.
func TestRabbitMQReplicationFindings(t *testing.T) {
	rep := rabbitSnapshot(rabbitNode("rabbitmq-0", true), rabbitNode("rabbitmq-1", true), rabbitNode("rabbitmq-2", true))
	if f := only(t, rep, "database-replication"); len(f) != 0 {
		t.Errorf("findings on a healthy cluster: %+v", f)
	}
	rep = rabbitSnapshot(rabbitNode("rabbitmq-0", false), rabbitNode("rabbitmq-1", true), rabbitNode("rabbitmq-2", true))
	f := only(t, rep, "database-replication")
	if len(f) != 1 || f[0].Severity != Warning || !holds(f[0], "RabbitMQ runs with a node down: 2 of 3 nodes ready (rabbitmq-0 not ready)", "rabbitmq-0 on node node-0: not ready") {
		t.Errorf("a node down: %+v", f)
	}
	if f := only(t, rep, "database-down"); len(f) != 0 {
		t.Errorf("database-down with two nodes of three serving: %+v", f)
	}
	rep = rabbitSnapshot(rabbitNode("rabbitmq-0", false), rabbitNode("rabbitmq-1", false), rabbitNode("rabbitmq-2", true))
	f = only(t, rep, "database-replication")
	if len(f) != 1 || f[0].Severity != Error || !holds(f[0], "RabbitMQ has lost its majority: 1 of 3 nodes ready") || f[0].Remediation == "" {
		t.Errorf("the majority lost: %+v", f)
	}
}

func redisMember(name, role string, ready bool) corev1.Pod {
	p := haMember(name, "", ready, "0")
	p.Labels = map[string]string{topology.RedisClusterLabel: topology.Redis, topology.RedisRoleLabel: role, "onprem.dev/component": "redis"}
	p.Annotations = nil
	return p
}

// A replicated Redis: a replica down is a warning, no master or a master
// without a ready replica (it refuses writes) an error; database-down
// leaves it to this analyzer while a member is ready.
func TestRedisReplicationFindings(t *testing.T) {
	snap := func(pods ...corev1.Pod) *Report {
		return clusterSnapshot(topology.Redis, topology.RedisClusterLabel, pods...)
	}
	rep := snap(redisMember("redis-0", "master", true), redisMember("redis-1", "replica", true), redisMember("redis-2", "replica", true))
	if f := only(t, rep, "database-replication"); len(f) != 0 {
		t.Errorf("findings on a healthy Redis: %+v", f)
	}
	rep = snap(redisMember("redis-0", "master", true), redisMember("redis-1", "replica", false), redisMember("redis-2", "replica", true))
	f := only(t, rep, "database-replication")
	if len(f) != 1 || f[0].Severity != Warning || !holds(f[0], "Redis runs with a member down: primary redis-0; redis-1 replica, not ready", "redis-1 on node node-1: replica, not ready") {
		t.Errorf("a replica down: %+v", f)
	}
	if f := only(t, rep, "database-down"); len(f) != 0 {
		t.Errorf("database-down with two members of three serving: %+v", f)
	}
	rep = snap(redisMember("redis-0", "master", false), redisMember("redis-1", "replica", true), redisMember("redis-2", "replica", true))
	f = only(t, rep, "database-replication")
	if len(f) != 1 || f[0].Severity != Error || !holds(f[0], "Redis has no master") || f[0].Remediation == "" {
		t.Errorf("the master lost: %+v", f)
	}
	rep = snap(redisMember("redis-0", "master", true), redisMember("redis-1", "replica", false), redisMember("redis-2", "replica", false))
	f = only(t, rep, "database-replication")
	if len(f) != 1 || f[0].Severity != Error || !holds(f[0], "Redis's master redis-0 has no ready replica: it refuses writes") {
		t.Errorf("no replica left: %+v", f)
	}
}

func mongoMember(name string, ready bool) corev1.Pod {
	p := haMember(name, "", ready, "0")
	p.Labels = map[string]string{topology.MongoDBClusterLabel: topology.MongoDB, "onprem.dev/component": "mongodb"}
	p.Annotations = nil
	return p
}

// rsAnswer is a member's answer to replSetGetStatus: each member's
// stateStr, healthy unless "(not reachable/healthy)", and how many
// seconds its last operation trails 08:00.
func rsAnswer(states ...string) *topology.MongoDBAnswer {
	return rsAnswerLag(nil, states...)
}

func rsAnswerLag(lag map[int]int, states ...string) *topology.MongoDBAnswer {
	st := &topology.ReplSetStatus{OK: 1, Set: "onprem", MajorityVoteCount: 2, VotingMembersCount: len(states)}
	base := time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)
	for i, s := range states {
		m := topology.ReplSetMember{ID: i, Name: fmt.Sprintf("mongodb-%d.mongodb-headless.onprem.svc:27017", i), Health: 1, StateStr: s,
			OptimeDate: topology.EJSONDate{Time: base.Add(-time.Duration(lag[i]) * time.Second)}}
		if s == "(not reachable/healthy)" {
			m.Health, m.OptimeDate = 0, topology.EJSONDate{Time: time.Unix(0, 0).UTC()}
		}
		st.Members = append(st.Members, m)
	}
	return &topology.MongoDBAnswer{Pod: "mongodb-0", Status: st}
}

// MongoDB's replica set as a member answered replSetGetStatus: a member
// down or a secondary far behind is a warning, no primary or no majority
// an error, no answer a warning; a bundle without an answer is not
// judged (database-down then judges the StatefulSet as before).
func TestMongoDBReplicationFindings(t *testing.T) {
	snap := func(a *topology.MongoDBAnswer, pods ...corev1.Pod) *Report {
		s := base()
		s.MongoDB = a
		three := int32(3)
		sts := appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "mongodb", Namespace: "onprem",
			Labels: map[string]string{"onprem.dev/component": "mongodb"}}}
		sts.Spec.Replicas = &three
		sts.Spec.Template.Labels = map[string]string{topology.MongoDBClusterLabel: topology.MongoDB}
		for _, p := range pods {
			if p.Status.Conditions[0].Status == corev1.ConditionTrue {
				sts.Status.ReadyReplicas++
			}
		}
		o := s.Namespaces["onprem"]
		o.StatefulSets = []appsv1.StatefulSet{sts}
		o.Pods = pods
		return Analyze(s)
	}
	all := []corev1.Pod{mongoMember("mongodb-0", true), mongoMember("mongodb-1", true), mongoMember("mongodb-2", true)}
	if f := only(t, snap(rsAnswer("PRIMARY", "SECONDARY", "SECONDARY"), all...), "database-replication"); len(f) != 0 {
		t.Errorf("findings on a healthy replica set: %+v", f)
	}

	downPods := []corev1.Pod{mongoMember("mongodb-0", true), mongoMember("mongodb-1", true), mongoMember("mongodb-2", false)}
	rep := snap(rsAnswer("PRIMARY", "SECONDARY", "(not reachable/healthy)"), downPods...)
	f := only(t, rep, "database-replication")
	if len(f) != 1 || f[0].Severity != Warning || !holds(f[0], "MongoDB runs with a member down: primary mongodb-0", "mongodb-2 on node node-2: unknown, (not reachable/healthy), not ready") {
		t.Errorf("a member down: %+v", f)
	}
	if f := only(t, rep, "database-down"); len(f) != 0 {
		t.Errorf("database-down with two members of three serving: %+v", f)
	}

	f = only(t, snap(rsAnswer("SECONDARY", "SECONDARY", "SECONDARY"), all...), "database-replication")
	if len(f) != 1 || f[0].Severity != Error || !holds(f[0], "MongoDB has no primary") || f[0].Remediation == "" {
		t.Errorf("no primary: %+v", f)
	}

	f = only(t, snap(rsAnswer("(not reachable/healthy)", "SECONDARY", "(not reachable/healthy)"), mongoMember("mongodb-0", false), mongoMember("mongodb-1", true), mongoMember("mongodb-2", false)), "database-replication")
	if len(f) != 1 || f[0].Severity != Error || !holds(f[0], "MongoDB's replica set has lost its majority", "no majority of the members healthy") {
		t.Errorf("no majority: %+v", f)
	}

	f = only(t, snap(rsAnswerLag(map[int]int{2: 95}, "PRIMARY", "SECONDARY", "SECONDARY"), all...), "database-replication")
	if len(f) != 1 || f[0].Severity != Warning || f[0].Object != "Pod/onprem/mongodb-2" || !holds(f[0], "MongoDB secondary mongodb-2 is 95 s behind the primary", "mongodb-2 on node node-2: replica, SECONDARY, 95.0 s behind") {
		t.Errorf("a lagging secondary: %+v", f)
	}

	f = only(t, snap(&topology.MongoDBAnswer{Errors: []string{"mongodb-0: no answer to replSetGetStatus within 10s"}}, all...), "database-replication")
	if len(f) != 1 || f[0].Severity != Warning || !holds(f[0], "MongoDB's members did not say their roles", "mongodb-0: no answer to replSetGetStatus within 10s") {
		t.Errorf("no answer: %+v", f)
	}

	rep = snap(nil, downPods...)
	if f := only(t, rep, "database-replication"); len(f) != 0 {
		t.Errorf("judged without an answer: %+v", f)
	}
	if f := only(t, rep, "database-down"); len(f) != 1 {
		t.Errorf("database-down without an answer: %+v", f)
	}
}
