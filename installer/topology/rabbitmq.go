package topology

import (
	"context"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// RabbitMQ with spec.availability high is a cluster of nodes
// (charts/rabbitmq) whose pods carry RabbitMQClusterLabel. It has no
// primary: every node serves, and each quorum queue has a leader of its
// own on one of them. What it needs to go on is a majority: the quorum
// queues (a member on every node) accept messages while more than half of
// the nodes run, and a node cut off from the majority pauses itself.
const (
	// RabbitMQ is the name of the platform's RabbitMQ StatefulSet.
	RabbitMQ = "rabbitmq"
	// RabbitMQClusterLabel selects the nodes of the RabbitMQ cluster.
	RabbitMQClusterLabel = "onprem.dev/rabbitmq-cluster"
	// RoleNode is a node of a cluster whose members are equals.
	RoleNode = "node"
)

// RabbitMQCluster reads the platform's RabbitMQ in namespace: a cluster
// when its pods carry RabbitMQClusterLabel, else a single instance
// (Replicated false).
func RabbitMQCluster(ctx context.Context, c kubernetes.Interface, namespace string) (*Topology, error) {
	sts, pods, err := readMembers(ctx, c, namespace, RabbitMQ, RabbitMQClusterLabel, "RabbitMQ")
	if err != nil {
		return nil, err
	}
	return RabbitMQFromObjects(sts, pods), nil
}

// RabbitMQFromObjects is RabbitMQ's topology from its StatefulSet (nil when
// there is none) and the pods of its namespace (what RabbitMQCluster reads
// live, and what a support bundle holds). Its Quorum is a majority of the
// desired nodes ready.
func RabbitMQFromObjects(sts *appsv1.StatefulSet, pods []corev1.Pod) *Topology {
	t := &Topology{Engine: "rabbitmq", Leaderless: true, Desired: desiredReplicas(sts)}
	nodes := clusterPods(sts, pods, RabbitMQClusterLabel, RabbitMQ)
	if nodes == nil {
		return t
	}
	t.Replicated = true
	ready := 0
	for i := range nodes {
		m := memberOf(&nodes[i], RoleNode)
		if m.Ready {
			ready++
		}
		t.Members = append(t.Members, m)
	}
	t.Quorum = t.Desired > 0 && ready > t.Desired/2
	return t
}

// clusterPods is the pods labelled label=name, by name; nil when there
// are none and sts (nil when there is none) does not label its pods so:
// a single instance.
func clusterPods(sts *appsv1.StatefulSet, pods []corev1.Pod, label, name string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range pods {
		if p.Labels[label] == name {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		if sts == nil || sts.Spec.Template.Labels[label] == "" {
			return nil
		}
		return []corev1.Pod{}
	}
	slices.SortFunc(out, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// memberOf is pod p as a member in role: "running" when ready, else "not
// ready" or its phase.
func memberOf(p *corev1.Pod, role string) Member {
	m := Member{Name: p.Name, Node: p.Spec.NodeName, Role: role, Ready: PodReady(p), State: "running"}
	if !m.Ready {
		m.State = "not ready"
		if p.Status.Phase != corev1.PodRunning {
			m.State = strings.ToLower(string(p.Status.Phase))
		}
	}
	return m
}
