package topology

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Redis with spec.availability high is a master and its replicas
// (charts/redis) whose pods carry RedisClusterLabel; each member's keeper
// writes its role as RedisRoleLabel. Sentinel replaces a lost master once
// a majority of the members' Sentinels agree, so what Redis needs to
// survive the loss of its master is a ready replica and a majority of the
// members.
const (
	// Redis is the name of the platform's Redis StatefulSet.
	Redis = "redis"
	// RedisClusterLabel selects the members of the replicated Redis.
	RedisClusterLabel = "onprem.dev/redis-cluster"
	// RedisRoleLabel is where a member's keeper writes its role: master
	// or replica.
	RedisRoleLabel = "onprem.dev/redis-role"
)

// RedisCluster reads the platform's Redis in namespace: replicated when its
// pods carry RedisClusterLabel, else a single instance (Replicated false).
func RedisCluster(ctx context.Context, c kubernetes.Interface, namespace string) (*Topology, error) {
	sts, pods, err := readMembers(ctx, c, namespace, Redis, RedisClusterLabel, "Redis")
	if err != nil {
		return nil, err
	}
	eps, err := c.CoreV1().Endpoints(namespace).List(ctx, metav1.ListOptions{LabelSelector: RedisClusterLabel + "=" + Redis})
	if err != nil {
		return nil, fmt.Errorf("reading the Endpoints of the Service redis (labelled %s=%s): %w", RedisClusterLabel, Redis, err)
	}
	return RedisFromObjects(sts, pods, eps.Items), nil
}

// RedisFromObjects is Redis's topology from its StatefulSet (nil when there
// is none), the pods of its namespace and the Endpoints labelled
// RedisClusterLabel (the Service redis's, which the master's keeper
// writes). The primary is the ready member labelled master, the one the
// Service reaches when several are (a lost master keeps its label: its
// keeper is gone with it); Quorum holds when it has a ready replica and a majority
// of the desired members is ready (the Sentinels that elect a new master).
func RedisFromObjects(sts *appsv1.StatefulSet, pods []corev1.Pod, endpoints []corev1.Endpoints) *Topology {
	t := &Topology{Engine: "redis", Desired: desiredReplicas(sts)}
	members := clusterPods(sts, pods, RedisClusterLabel, Redis)
	if members == nil {
		return t
	}
	t.Replicated = true
	served := ""
	for _, ep := range endpoints {
		if ep.Name != Redis {
			continue
		}
		for _, sub := range ep.Subsets {
			for _, a := range sub.Addresses {
				if a.TargetRef != nil {
					served = a.TargetRef.Name
				}
			}
		}
	}
	ready, readyReplicas := 0, 0
	for i := range members {
		p := &members[i]
		role := RoleUnknown
		switch p.Labels[RedisRoleLabel] {
		case "master":
			role = RolePrimary
		case "replica":
			role = RoleReplica
		}
		m := memberOf(p, role)
		if m.Ready {
			ready++
			switch {
			case m.Role == RolePrimary && (t.Primary == "" || m.Name == served):
				t.Primary = m.Name
			case m.Role == RoleReplica:
				readyReplicas++
			}
		}
		t.Members = append(t.Members, m)
	}
	t.Quorum = t.Primary != "" && readyReplicas > 0 && t.Desired > 0 && ready > t.Desired/2
	return t
}
