// Package topology reads how a replicated database of the platform stands,
// from what its members publish in the cluster: which member is the
// primary, which replicas follow it and how far behind, and whether enough
// members run for it to fail over. Status, doctor, support bundles and the
// engines' backups and restores all ask it, so that every operation acts on
// the primary and every report names each member's role the same way.
//
// PostgreSQL with spec.availability high is a Patroni cluster
// (charts/postgresql): each member's pod carries its role as the label
// onprem.dev/postgresql-role and its state as Patroni's annotation
// "status"; the leader lock is the Endpoints of the Service postgresql,
// whose annotations hold the leader's name and WAL position, and
// postgresql-sync's name the synchronous standby.
//
// RabbitMQ with spec.availability high is a cluster of equals (rabbitmq.go):
// what it needs is a majority of its nodes.
//
// MongoDB with spec.availability high is a replica set (mongodb.go): its
// members' roles and lag are what one of them answers to replSetGetStatus,
// run in its pod.
package topology

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Labels and names the postgresql chart gives its Patroni cluster.
const (
	// ClusterLabel selects the members of a Patroni cluster (its scope).
	ClusterLabel = "onprem.dev/patroni-cluster"
	// RoleLabel is where Patroni writes a member's role.
	RoleLabel = "onprem.dev/postgresql-role"
	// PostgreSQL is the scope of the platform's PostgreSQL cluster: the
	// name of its Service, StatefulSet and leader Endpoints.
	PostgreSQL = "postgresql"
)

// Roles of a member.
const (
	RolePrimary = "primary"
	RoleReplica = "replica"
	// RoleUnknown: the member publishes no role (starting, stopped, or its
	// pod is on a node that is gone).
	RoleUnknown = "unknown"
)

// Member is one instance of a replicated database.
type Member struct {
	Name string `json:"name"`
	Node string `json:"node,omitempty"`
	Role string `json:"role"`
	// State is the engine's own word for it (Patroni: running, starting,
	// stopped, creating replica, ...).
	State string `json:"state,omitempty"`
	// Ready is the pod's readiness as the kubelet last reported it.
	Ready bool `json:"ready"`
	// Synchronous: a commit waits for this replica.
	Synchronous bool `json:"synchronous,omitempty"`
	// LagBytes is how far a replica's received WAL trails the primary's
	// (nil when either is unknown).
	LagBytes *int64 `json:"lagBytes,omitempty"`
	// LagSeconds is how far a replica's last applied operation trails
	// the primary's in time (MongoDB's optimes; nil when either is
	// unknown).
	LagSeconds *float64 `json:"lagSeconds,omitempty"`
	Timeline   int      `json:"timeline,omitempty"`
	// BehindTimeline: a PostgreSQL replica on an older timeline than its
	// primary's. Its server runs, and Patroni calls it a running replica,
	// but it cannot stream from a primary whose history forked from its
	// own until it is rewound: a former primary that has not rejoined.
	// (Right after a failover every replica is behind for a few seconds.)
	BehindTimeline bool `json:"behindTimeline,omitempty"`
}

// Topology is one replicated database.
type Topology struct {
	Engine string `json:"engine"`
	// Replicated is false for a single instance (no failover).
	Replicated bool `json:"replicated"`
	// Desired is how many members the StatefulSet asks for.
	Desired int      `json:"desired"`
	Members []Member `json:"members"`
	// Primary names the member that takes writes ("" when none does).
	Primary string `json:"primary,omitempty"`
	// Leaderless: the members are equals (RabbitMQ's nodes), none is a
	// primary; Quorum is then a majority of them ready.
	Leaderless bool `json:"leaderless,omitempty"`
	// Quorum: the database can lose its primary now and fail over with no
	// acknowledged write lost: a primary is elected and a synchronous
	// replica that has every commit is ready to take its place. (Patroni's
	// leader lock lives in the Kubernetes API, so two primaries never
	// coexist; what a second loss costs is the writes, or the service.)
	Quorum bool `json:"quorum"`
	// Unanswered says why the members' roles are unknown when they are
	// asked of the database rather than read from the cluster (MongoDB:
	// no member answered replSetGetStatus); "" when they are known.
	Unanswered string `json:"unanswered,omitempty"`
}

// Healthy reports whether every desired member runs, with a primary
// unless the members are equals.
func (t *Topology) Healthy() bool {
	if t.Primary == "" && !t.Leaderless {
		return false
	}
	running := 0
	for _, m := range t.Members {
		if m.Ready && m.Role != RoleUnknown && !m.BehindTimeline {
			running++
		}
	}
	return running >= t.Desired
}

// Summary is one line for people: "primary postgresql-1, 2 replicas
// (postgresql-0 sync, lag 0 B; postgresql-2, lag 16 KiB)".
func (t *Topology) Summary() string {
	if !t.Replicated {
		return "single instance"
	}
	if t.Leaderless {
		return t.leaderlessSummary()
	}
	var parts []string
	for _, m := range t.Members {
		if m.Name == t.Primary {
			continue
		}
		s := m.Name + " " + m.Role
		if m.Synchronous {
			s += " (synchronous)"
		}
		if m.LagBytes != nil {
			s += fmt.Sprintf(", lag %s", bytesText(*m.LagBytes))
		}
		if m.LagSeconds != nil {
			s += fmt.Sprintf(", lag %s", secondsText(*m.LagSeconds))
		}
		if m.BehindTimeline {
			s += fmt.Sprintf(", not following: on timeline %d, the primary on %d", m.Timeline, t.primaryTimeline())
		}
		if t.Engine == "mongodb" && m.Role == RoleUnknown && m.State != "" {
			s += " (" + strings.Trim(m.State, "()") + ")"
		}
		if !m.Ready {
			s += ", not ready"
		}
		parts = append(parts, s)
	}
	head := "no primary"
	if t.Primary != "" {
		head = "primary " + t.Primary
	}
	switch {
	case t.Unanswered != "":
		head = "roles unknown: " + t.Unanswered
	case !t.Quorum && t.Engine == "mongodb":
		head += ", no majority of the members healthy: no primary can be elected, and majority writes wait"
	case !t.Quorum && t.Engine == "redis" && t.Primary != "":
		head += ", no ready replica: it refuses writes until one follows it"
	case !t.Quorum && t.Engine != "redis":
		head += ", no synchronous replica: losing the primary now stops writes or loses them"
	}
	if len(parts) == 0 {
		return head
	}
	return head + "; " + strings.Join(parts, "; ")
}

// leaderlessSummary: "3 of 3 nodes ready", "2 of 3 nodes ready
// (rabbitmq-0 not ready): the majority serves", "1 of 3 nodes ready: no
// majority, ...".
func (t *Topology) leaderlessSummary() string {
	ready := 0
	var down []string
	for _, m := range t.Members {
		if m.Ready {
			ready++
		} else {
			down = append(down, m.Name+" "+m.State)
		}
	}
	s := fmt.Sprintf("%d of %d nodes ready", ready, t.Desired)
	if missing := t.Desired - len(t.Members); missing > 0 {
		down = append(down, fmt.Sprintf("%d without a pod", missing))
	}
	if len(down) > 0 {
		s += " (" + strings.Join(down, ", ") + ")"
	}
	switch {
	case !t.Quorum:
		s += ": no majority, queues accept no messages until more nodes return"
	case ready-1 <= t.Desired/2:
		s += ": the majority serves; one more loss stops it"
	case ready < t.Desired:
		s += ": the majority serves"
	}
	return s
}

// secondsText is a lag in time: "0 s", "1.5 s", "2m5s".
func secondsText(s float64) string {
	if s < 60 {
		return strconv.FormatFloat(math.Round(s*10)/10, 'f', -1, 64) + " s"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Second).String()
}

func bytesText(n int64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}

// patroniStatus is the part of Patroni's pod annotation "status" read here.
type patroniStatus struct {
	State    string `json:"state"`
	Role     string `json:"role"`
	XLog     *int64 `json:"xlog_location"`
	Timeline int    `json:"timeline"`
}

// PostgreSQLCluster reads the platform's PostgreSQL in namespace: a Patroni
// cluster when its pods carry the cluster label, else a single instance
// (Replicated false).
func PostgreSQLCluster(ctx context.Context, c kubernetes.Interface, namespace string) (*Topology, error) {
	sts, pods, err := readMembers(ctx, c, namespace, PostgreSQL, ClusterLabel, "PostgreSQL")
	if err != nil {
		return nil, err
	}
	eps, err := c.CoreV1().Endpoints(namespace).List(ctx, metav1.ListOptions{LabelSelector: ClusterLabel + "=" + PostgreSQL})
	if err != nil {
		return nil, fmt.Errorf("reading PostgreSQL's leader lock (Endpoints labelled %s=%s): %w", ClusterLabel, PostgreSQL, err)
	}
	return FromObjects(sts, pods, eps.Items), nil
}

// readMembers reads StatefulSet name of namespace (nil when there is none)
// and the pods labelled label=name: a replicated database's members.
func readMembers(ctx context.Context, c kubernetes.Interface, namespace, name, label, product string) (*appsv1.StatefulSet, []corev1.Pod, error) {
	pods, err := c.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: label + "=" + name})
	if err != nil {
		return nil, nil, fmt.Errorf("reading %s's members: %w", product, err)
	}
	sts, err := c.AppsV1().StatefulSets(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		sts = nil
	case err != nil:
		return nil, nil, fmt.Errorf("reading %s's StatefulSet: %w", product, err)
	}
	return sts, pods.Items, nil
}

// desiredReplicas is how many replicas StatefulSet sts asks for: 0 when
// there is no StatefulSet (nil) or it sets no replicas.
func desiredReplicas(sts *appsv1.StatefulSet) int {
	if sts == nil || sts.Spec.Replicas == nil {
		return 0
	}
	return int(*sts.Spec.Replicas)
}

// FromObjects is PostgreSQL's topology from its StatefulSet (nil when
// there is none), the pods and the Endpoints of namespace that carry
// ClusterLabel (what PostgreSQLCluster reads live, and what a support
// bundle holds).
func FromObjects(sts *appsv1.StatefulSet, pods []corev1.Pod, endpoints []corev1.Endpoints) *Topology {
	t := &Topology{Engine: "postgresql", Desired: desiredReplicas(sts)}
	var members []corev1.Pod
	for _, p := range pods {
		if p.Labels[ClusterLabel] == PostgreSQL {
			members = append(members, p)
		}
	}
	if len(members) == 0 && (sts == nil || sts.Spec.Template.Labels[ClusterLabel] == "") {
		return t
	}
	t.Replicated = true

	// The leader lock: Endpoints postgresql (annotations leader, optime);
	// the synchronous standbys: postgresql-sync (sync_standby, a comma-
	// separated list).
	var leader string
	var leaderXLog *int64
	var sync []string
	for _, ep := range endpoints {
		switch ep.Name {
		case PostgreSQL:
			leader = ep.Annotations["leader"]
			var n int64
			if _, err := fmt.Sscan(ep.Annotations["optime"], &n); err == nil {
				leaderXLog = &n
			}
		case PostgreSQL + "-sync":
			for _, n := range strings.Split(ep.Annotations["sync_standby"], ",") {
				if n = strings.TrimSpace(n); n != "" {
					sync = append(sync, n)
				}
			}
		}
	}
	slices.SortFunc(members, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	statuses := make([]patroniStatus, len(members))
	for i, p := range members {
		if s := p.Annotations["status"]; s != "" {
			_ = json.Unmarshal([]byte(s), &statuses[i]) // a member that wrote no readable status has an unknown state
		}
		if p.Name == leader && statuses[i].XLog != nil && (leaderXLog == nil || *statuses[i].XLog > *leaderXLog) {
			leaderXLog = statuses[i].XLog
		}
	}
	var leaderTimeline int
	for i, p := range members {
		if p.Name == leader {
			leaderTimeline = statuses[i].Timeline
		}
	}
	for i := range members {
		p, st := &members[i], statuses[i]
		m := Member{Name: p.Name, Node: p.Spec.NodeName, Role: RoleUnknown, Ready: PodReady(p), State: st.State, Timeline: st.Timeline}
		switch p.Labels[RoleLabel] {
		case "master", "primary":
			m.Role = RolePrimary
		case "replica", "sync_standby":
			m.Role = RoleReplica
		}
		switch {
		case m.Role == RolePrimary && leader != "" && p.Name != leader:
			// The label of a primary that lost the lock and could not say
			// so (its node is gone): not what it claims.
			m.Role = RoleUnknown
		case m.Role == RolePrimary:
			t.Primary = p.Name
		}
		m.Synchronous = slices.Contains(sync, p.Name)
		m.BehindTimeline = m.Role == RoleReplica && st.Timeline > 0 && leaderTimeline > st.Timeline
		if m.Role == RoleReplica && !m.BehindTimeline && leaderXLog != nil && st.XLog != nil {
			// (On an older timeline its position says nothing of what
			// it has of the primary's: it may even be past it.)
			m.LagBytes = ptr(max(0, *leaderXLog-*st.XLog))
		}
		t.Members = append(t.Members, m)
	}
	for _, m := range t.Members {
		if m.Synchronous && m.Role == RoleReplica && m.Ready && !m.BehindTimeline {
			t.Quorum = t.Primary != ""
		}
	}
	return t
}

// primaryTimeline is the primary's timeline (0 when unknown).
func (t *Topology) primaryTimeline() int {
	for _, m := range t.Members {
		if m.Name == t.Primary {
			return m.Timeline
		}
	}
	return 0
}

func ptr[T any](v T) *T { return &v }

// PodReady says whether p runs, is not being deleted, and is ready.
func PodReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// NodeLost says how node n is lost: "not Ready" (its Ready condition
// False), "unreachable (Ready Unknown)" (the node controller heard nothing
// from its kubelet), or "" when it is Ready or carries no Ready condition
// at all (nothing known against it).
func NodeLost(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		switch c.Status {
		case corev1.ConditionTrue:
			return ""
		case corev1.ConditionUnknown:
			return "unreachable (Ready Unknown)"
		}
		return "not Ready"
	}
	return ""
}

// IsPrimary says whether pod is the member that serves writes of a
// replicated PostgreSQL (Patroni's role label: master or primary) or Redis
// (its keeper's role label: master), as its labels say. A pod of neither,
// or whose role is not published, is not.
func IsPrimary(p *corev1.Pod) bool {
	switch {
	case p.Labels[ClusterLabel] != "":
		r := p.Labels[RoleLabel]
		return r == "master" || r == "primary"
	case p.Labels[RedisClusterLabel] != "":
		return p.Labels[RedisRoleLabel] == "master"
	}
	return false
}
