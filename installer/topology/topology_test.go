package topology

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func member(name, node, role, status string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem",
		Labels:      map[string]string{ClusterLabel: PostgreSQL},
		Annotations: map[string]string{}}}
	if role != "" {
		p.Labels[RoleLabel] = role
	}
	if status != "" {
		p.Annotations["status"] = status
	}
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	return p
}

func haSet(replicas int32) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: PostgreSQL, Namespace: "onprem"}}
	s.Spec.Replicas = &replicas
	s.Spec.Template.Labels = map[string]string{ClusterLabel: PostgreSQL}
	return s
}

func lock(name string, annotations map[string]string) *corev1.Endpoints {
	return &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem",
		Labels: map[string]string{ClusterLabel: PostgreSQL}, Annotations: annotations}}
}

func TestPostgreSQLClusterHealthy(t *testing.T) {
	c := fake.NewClientset(
		haSet(3),
		member("postgresql-0", "n0", "replica", `{"state":"running","role":"replica","xlog_location":1000,"timeline":2}`, true),
		member("postgresql-1", "n1", "master", `{"state":"running","role":"master","xlog_location":5096,"timeline":2}`, true),
		member("postgresql-2", "n2", "replica", `{"state":"running","role":"replica","xlog_location":5096,"timeline":2}`, true),
		lock("postgresql", map[string]string{"leader": "postgresql-1", "optime": "5096"}),
		lock("postgresql-sync", map[string]string{"leader": "postgresql-1", "sync_standby": "postgresql-2"}),
	)
	top, err := PostgreSQLCluster(context.Background(), c, "onprem")
	if err != nil {
		t.Fatal(err)
	}
	if !top.Replicated || top.Desired != 3 || top.Primary != "postgresql-1" || !top.Quorum || !top.Healthy() {
		t.Fatalf("topology = %+v", top)
	}
	byName := map[string]Member{}
	for _, m := range top.Members {
		byName[m.Name] = m
	}
	if m := byName["postgresql-0"]; m.Role != RoleReplica || m.LagBytes == nil || *m.LagBytes != 4096 || m.Synchronous || m.Node != "n0" {
		t.Errorf("postgresql-0 = %+v", m)
	}
	if m := byName["postgresql-2"]; !m.Synchronous || m.LagBytes == nil || *m.LagBytes != 0 {
		t.Errorf("postgresql-2 = %+v", m)
	}
	want := "primary postgresql-1; postgresql-0 replica, lag 4.0 KiB; postgresql-2 replica (synchronous), lag 0 B"
	if got := top.Summary(); got != want {
		t.Errorf("summary:\n got %s\nwant %s", got, want)
	}
}

func TestPostgreSQLClusterDegraded(t *testing.T) {
	cases := []struct {
		name    string
		objects []runtime.Object
		primary string
		quorum  bool
		healthy bool
		says    []string
	}{
		{"the synchronous standby's node is lost", []runtime.Object{haSet(3),
			member("postgresql-0", "n0", "master", `{"state":"running"}`, true),
			member("postgresql-1", "n1", "replica", `{"state":"running"}`, false),
			member("postgresql-2", "n2", "replica", `{"state":"running"}`, true),
			lock("postgresql", map[string]string{"leader": "postgresql-0"}),
			lock("postgresql-sync", map[string]string{"sync_standby": "postgresql-1"}),
		}, "postgresql-0", false, false, []string{"no synchronous replica", "postgresql-1 replica (synchronous), not ready"}},
		{"no primary during a failover", []runtime.Object{haSet(3),
			member("postgresql-0", "n0", "", ``, false),
			member("postgresql-1", "n1", "replica", `{"state":"running"}`, true),
			member("postgresql-2", "n2", "replica", `{"state":"running"}`, true),
		}, "", false, false, []string{"no primary", "postgresql-0 unknown, not ready"}},
		{"a stale master label on a member the lock does not name", []runtime.Object{haSet(3),
			member("postgresql-0", "n0", "master", `{"state":"running"}`, false),
			member("postgresql-1", "n1", "master", `{"state":"running"}`, true),
			member("postgresql-2", "n2", "replica", `{"state":"running"}`, true),
			lock("postgresql", map[string]string{"leader": "postgresql-1"}),
			lock("postgresql-sync", map[string]string{"sync_standby": "postgresql-2"}),
		}, "postgresql-1", true, false, []string{"primary postgresql-1"}},
		// Seen with Patroni 3.0.2 when a former primary's rewind login was
		// refused: "running" as a replica, on the old timeline, its
		// position past the primary's, streaming nothing.
		{"a former primary that did not rejoin", []runtime.Object{haSet(3),
			member("postgresql-0", "n0", "replica", `{"state":"running","role":"replica","xlog_location":83886240,"timeline":1}`, true),
			member("postgresql-1", "n1", "master", `{"state":"running","role":"master","xlog_location":67339968,"timeline":2}`, true),
			member("postgresql-2", "n2", "replica", `{"state":"running","role":"replica","xlog_location":67339968,"timeline":2}`, true),
			lock("postgresql", map[string]string{"leader": "postgresql-1", "optime": "67339968"}),
			lock("postgresql-sync", map[string]string{"sync_standby": "postgresql-2"}),
		}, "postgresql-1", true, false, []string{"postgresql-0 replica, not following: on timeline 1, the primary on 2;", "postgresql-2 replica (synchronous), lag 0 B"}},
		{"the synchronous standby on an older timeline", []runtime.Object{haSet(3),
			member("postgresql-0", "n0", "replica", `{"state":"running","role":"replica","timeline":1}`, true),
			member("postgresql-1", "n1", "master", `{"state":"running","role":"master","timeline":2}`, true),
			member("postgresql-2", "n2", "replica", `{"state":"running","role":"replica","timeline":2}`, true),
			lock("postgresql", map[string]string{"leader": "postgresql-1"}),
			lock("postgresql-sync", map[string]string{"sync_standby": "postgresql-0"}),
		}, "postgresql-1", false, false, []string{"postgresql-0 replica (synchronous), not following"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			top, err := PostgreSQLCluster(context.Background(), fake.NewClientset(tc.objects...), "onprem")
			if err != nil {
				t.Fatal(err)
			}
			if top.Primary != tc.primary || top.Quorum != tc.quorum || top.Healthy() != tc.healthy {
				t.Errorf("primary %q quorum %v healthy %v, want %q %v %v: %s", top.Primary, top.Quorum, top.Healthy(), tc.primary, tc.quorum, tc.healthy, top.Summary())
			}
			for _, s := range tc.says {
				if !strings.Contains(top.Summary(), s) {
					t.Errorf("summary %q does not say %q", top.Summary(), s)
				}
			}
		})
	}
}

func TestPostgreSQLSingleInstance(t *testing.T) {
	one := int32(1)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: PostgreSQL, Namespace: "onprem"}}
	sts.Spec.Replicas = &one
	top, err := PostgreSQLCluster(context.Background(), fake.NewClientset(sts), "onprem")
	if err != nil {
		t.Fatal(err)
	}
	if top.Replicated || top.Summary() != "single instance" {
		t.Errorf("topology = %+v (%s)", top, top.Summary())
	}
}

func rabbitNode(name, node string, ready bool) *corev1.Pod {
	p := member(name, node, "", "", ready)
	p.Labels = map[string]string{RabbitMQClusterLabel: RabbitMQ}
	return p
}

func rabbitSet(replicas int32) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: RabbitMQ, Namespace: "onprem"}}
	s.Spec.Replicas = &replicas
	s.Spec.Template.Labels = map[string]string{RabbitMQClusterLabel: RabbitMQ}
	return s
}

// RabbitMQ's nodes are equals: it is healthy with every node ready, keeps
// serving with a majority, and says so when the majority is gone.
func TestRabbitMQCluster(t *testing.T) {
	cases := []struct {
		name            string
		objects         []runtime.Object
		healthy, quorum bool
		summary         string
	}{
		{"every node ready", []runtime.Object{rabbitSet(3), rabbitNode("rabbitmq-0", "n0", true), rabbitNode("rabbitmq-1", "n1", true), rabbitNode("rabbitmq-2", "n2", true)},
			true, true, "3 of 3 nodes ready"},
		{"a node lost", []runtime.Object{rabbitSet(3), rabbitNode("rabbitmq-0", "n0", false), rabbitNode("rabbitmq-1", "n1", true), rabbitNode("rabbitmq-2", "n2", true)},
			false, true, "2 of 3 nodes ready (rabbitmq-0 not ready): the majority serves; one more loss stops it"},
		{"two nodes lost, one without a pod", []runtime.Object{rabbitSet(3), rabbitNode("rabbitmq-1", "n1", false), rabbitNode("rabbitmq-2", "n2", true)},
			false, false, "1 of 3 nodes ready (rabbitmq-1 not ready, 1 without a pod): no majority, queues accept no messages until more nodes return"},
		{"one of five lost", []runtime.Object{rabbitSet(5), rabbitNode("rabbitmq-0", "n0", true), rabbitNode("rabbitmq-1", "n1", true), rabbitNode("rabbitmq-2", "n2", true), rabbitNode("rabbitmq-3", "n3", true), rabbitNode("rabbitmq-4", "n4", false)},
			false, true, "4 of 5 nodes ready (rabbitmq-4 not ready): the majority serves"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			top, err := RabbitMQCluster(context.Background(), fake.NewClientset(tc.objects...), "onprem")
			if err != nil {
				t.Fatal(err)
			}
			if !top.Replicated || top.Engine != "rabbitmq" || top.Healthy() != tc.healthy || top.Quorum != tc.quorum || top.Summary() != tc.summary {
				t.Errorf("replicated %v, healthy %v, quorum %v, summary %q; want healthy %v, quorum %v, %q",
					top.Replicated, top.Healthy(), top.Quorum, top.Summary(), tc.healthy, tc.quorum, tc.summary)
			}
			for _, m := range top.Members {
				if m.Role != RoleNode || m.Node == "" {
					t.Errorf("member %+v", m)
				}
			}
		})
	}
	// A single server is no cluster.
	single := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: RabbitMQ, Namespace: "onprem"}}
	top, err := RabbitMQCluster(context.Background(), fake.NewClientset(single), "onprem")
	if err != nil || top.Replicated || top.Summary() != "single instance" {
		t.Errorf("single: %+v, %v", top, err)
	}
}

// Redis's members: the ready member labelled master is the primary; a
// majority ready with a ready replica is what a failover needs; a lost
// master still labelled master is not the primary.
func TestRedisFromObjects(t *testing.T) {
	three := int32(3)
	sts := &appsv1.StatefulSet{}
	sts.Spec.Replicas = &three
	sts.Spec.Template.Labels = map[string]string{RedisClusterLabel: Redis}
	member := func(name, role string, ready bool) corev1.Pod {
		p := corev1.Pod{}
		p.Name = name
		p.Labels = map[string]string{RedisClusterLabel: Redis, RedisRoleLabel: role}
		p.Status.Phase = corev1.PodRunning
		st := corev1.ConditionFalse
		if ready {
			st = corev1.ConditionTrue
		}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
		return p
	}
	top := RedisFromObjects(sts, []corev1.Pod{member("redis-1", "replica", true), member("redis-0", "master", true), member("redis-2", "replica", true)}, nil)
	if !top.Replicated || top.Primary != "redis-0" || !top.Quorum || !top.Healthy() {
		t.Errorf("healthy: %+v", top)
	}
	if got := top.Summary(); got != "primary redis-0; redis-1 replica; redis-2 replica" {
		t.Errorf("summary %q", got)
	}
	// The master's node is lost before the failover: no primary.
	top = RedisFromObjects(sts, []corev1.Pod{member("redis-0", "master", false), member("redis-1", "replica", true), member("redis-2", "replica", true)}, nil)
	if top.Primary != "" || top.Quorum || top.Healthy() {
		t.Errorf("master lost: %+v", top)
	}
	// After it: redis-1 promoted, redis-0 still labelled master (its keeper is gone).
	top = RedisFromObjects(sts, []corev1.Pod{member("redis-0", "master", false), member("redis-1", "master", true), member("redis-2", "replica", true)}, nil)
	if top.Primary != "redis-1" || !top.Quorum || top.Healthy() {
		t.Errorf("failed over: %+v", top)
	}
	// Before its node is called lost, the old master still looks ready:
	// the Service's Endpoints (the keeper's) name the real one.
	ep := corev1.Endpoints{Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "10.0.0.2", TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "redis-1"}}}}}}
	ep.Name = Redis
	top = RedisFromObjects(sts, []corev1.Pod{member("redis-0", "master", true), member("redis-1", "master", true), member("redis-2", "replica", true)}, []corev1.Endpoints{ep})
	if top.Primary != "redis-1" {
		t.Errorf("two labelled master, the Service at redis-1: primary %q", top.Primary)
	}
	// Single: no cluster label.
	if top := RedisFromObjects(nil, []corev1.Pod{{}}, nil); top.Replicated {
		t.Errorf("single: %+v", top)
	}
}

// A node is lost when its Ready condition is False or Unknown; one that
// is Ready, or carries no Ready condition, is not (whatever its other
// conditions say).
func TestNodeLost(t *testing.T) {
	node := func(conds ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: corev1.NodeStatus{Conditions: conds}}
	}
	pressure := corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionTrue}
	for _, c := range []struct {
		name string
		n    *corev1.Node
		want string
	}{
		{"ready", node(pressure, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}), ""},
		{"not ready", node(corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse}), "not Ready"},
		{"unknown", node(pressure, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown}), "unreachable (Ready Unknown)"},
		{"no ready condition", node(pressure), ""},
		{"no condition", node(), ""},
	} {
		if got := NodeLost(c.n); got != c.want {
			t.Errorf("%s: NodeLost = %q, want %q", c.name, got, c.want)
		}
	}
}
