package preflight

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/topology"
)

func haNode(name, zone string, ready, cordoned bool) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	if zone != "" {
		n.Labels[ZoneLabel] = zone
	}
	n.Spec.Unschedulable = cordoned
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
	return n
}

func haClass(name, provisioner string, mode storagev1.VolumeBindingMode, isDefault bool) *storagev1.StorageClass {
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Provisioner: provisioner, VolumeBindingMode: &mode}
	if isDefault {
		sc.Annotations = map[string]string{defaultClassAnnotation: "true"}
	}
	return sc
}

// pgSet is an installed PostgreSQL StatefulSet, replicated (Patroni's) or not.
func pgSet(replicated bool) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "postgresql", Namespace: "onprem"}}
	s.Spec.Template.Labels = map[string]string{"app.kubernetes.io/name": "postgresql"}
	if replicated {
		s.Spec.Template.Labels[topology.ClusterLabel] = "postgresql"
	}
	return s
}

func mqSet(replicated bool) *appsv1.StatefulSet {
	return clusterSet("rabbitmq", "onprem.dev/rabbitmq-cluster", replicated)
}

func redisSet(replicated bool) *appsv1.StatefulSet {
	return clusterSet("redis", topology.RedisClusterLabel, replicated)
}

func mongoSet(replicated bool) *appsv1.StatefulSet {
	return clusterSet("mongodb", "onprem.dev/mongodb-cluster", replicated)
}

// clusterSet is the installed StatefulSet name, its pods labelled
// label=name when replicated.
func clusterSet(name, label string, replicated bool) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem"}}
	s.Spec.Template.Labels = map[string]string{"app.kubernetes.io/name": name}
	if replicated {
		s.Spec.Template.Labels[label] = name
	}
	return s
}

// The availability check on a fake cluster: node counts, placement, zones
// and storage, each failure with its fix.
func TestAvailabilityCheck(t *testing.T) {
	high := clusterBaseSpec + "  availability: high\n"
	network := haClass("standard", "csi.example.com", storagev1.VolumeBindingImmediate, true)
	zoned := func(n int, zones ...string) []runtime.Object {
		var out []runtime.Object
		for i := range n {
			out = append(out, haNode(fmt.Sprintf("n%d", i), zones[i%len(zones)], true, false))
		}
		return out
	}
	cases := []struct {
		name    string
		body    string
		objects []runtime.Object
		result  Result
		says    []string
	}{
		{"single needs nothing", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false)}, Pass,
			[]string{"spec.availability is single"}},
		{"high on two nodes", high, append(zoned(2, "a", "b"), network), Fail,
			[]string{"needs 3 schedulable nodes", "can run on 2", "add nodes", "spec.availability: single"}},
		{"high with a cordoned and a not-ready node", high,
			append(zoned(2, "a", "b"), haNode("c", "c", true, true), haNode("d", "c", false, false), network), Fail,
			[]string{"can run on 2", "c (cordoned)", "d (not Ready)", "uncordon"}},
		{"high with nodes outside the placement", high + "  placement:\n    nodeSelector: {pool: platform}\n",
			append(zoned(3, "a", "b", "c"), network), Fail,
			[]string{"can run on 0", "does not match spec.placement.nodeSelector pool=platform", "widen spec.placement"}},
		{"high in one zone", high, append(zoned(3, "a"), network), Warn,
			[]string{"the 3 schedulable nodes are in zone a", "losing the zone is not", ZoneLabel}},
		{"high with no zone labels", high, append(zoned(4, ""), network), Warn,
			[]string{"the 4 schedulable nodes carry no zone label"}},
		{"high over three zones", high, append(zoned(3, "a", "b", "c"), network), Pass,
			[]string{"3 schedulable nodes in 3 zones: a (1), b (1), c (1)"}},
		{"high on node-local volumes bound at once", high,
			append(zoned(3, "a", "b", "c"), haClass("local", "rancher.io/local-path", storagev1.VolumeBindingImmediate, true)), Fail,
			[]string{"StorageClass local", "rancher.io/local-path", "WaitForFirstConsumer", "spec.components.mongodb.values"}},
		{"high on node-local volumes bound with the pod", high + "  storage:\n    className: local\n",
			append(zoned(3, "a", "b", "c"), network, haClass("local", "rancher.io/local-path", storagev1.VolumeBindingWaitForFirstConsumer, false)), Pass,
			[]string{"3 zones"}},
		{"high over an installed single server", high, append(zoned(3, "a", "b", "c"), network, pgSet(false)), Fail,
			[]string{"StatefulSet onprem/postgresql) is a single server", "asks for a replicated cluster", "onprem restore --force", "docs/availability.md"}},
		{"single over an installed Patroni cluster", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), pgSet(true)}, Fail,
			[]string{"is a replicated Patroni cluster", "asks for a single server"}},
		{"high over an installed Patroni cluster", high, append(zoned(3, "a", "b", "c"), network, pgSet(true)), Pass,
			[]string{"3 zones"}},
		{"high over an installed single RabbitMQ", high, append(zoned(3, "a", "b", "c"), network, pgSet(true), mqSet(false)), Fail,
			[]string{"installed RabbitMQ (StatefulSet onprem/rabbitmq) is a single server", "asks for a replicated cluster", "onprem restore --force"}},
		{"single over an installed RabbitMQ cluster", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), mqSet(true)}, Fail,
			[]string{"is a replicated RabbitMQ cluster", "asks for a single server"}},
		{"high over an installed single Redis", high, append(zoned(3, "a", "b", "c"), network, pgSet(true), mqSet(true), redisSet(false)), Fail,
			[]string{"installed Redis (StatefulSet onprem/redis) is a single server", "asks for a replicated cluster", "onprem restore --force"}},
		{"single over an installed Redis with Sentinel", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), redisSet(true)}, Fail,
			[]string{"is a replicated Redis with Sentinel (spec.availability high)", "asks for a single server"}},
		{"high over an installed single MongoDB", high, append(zoned(3, "a", "b", "c"), network, pgSet(true), mqSet(true), redisSet(true), mongoSet(false)), Fail,
			[]string{"installed MongoDB (StatefulSet onprem/mongodb) is a single server", "asks for a replicated cluster", "onprem restore --force"}},
		{"single over an installed MongoDB replica set", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), mongoSet(true)}, Fail,
			[]string{"is a replicated MongoDB replica set (spec.availability high)", "asks for a single server"}},
		{"high over every cluster installed", high, append(zoned(3, "a", "b", "c"), network, pgSet(true), mqSet(true), redisSet(true), mongoSet(true)), Pass,
			[]string{"3 zones"}},
		{"high over both clusters installed", high, append(zoned(3, "a", "b", "c"), network, pgSet(true), mqSet(true)), Pass,
			[]string{"3 zones"}},
		{"single over an installed single server", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), pgSet(false)}, Pass,
			[]string{"spec.availability is single"}},
		{"high on a configured node-local class bound at once", high + "  storage:\n    className: local\n",
			append(zoned(3, "a", "b", "c"), network, haClass("local", "kubernetes.io/no-provisioner", storagev1.VolumeBindingImmediate, false)), Fail,
			[]string{"StorageClass local", "spec.storage.className"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := clusterLoadEnv(t, tc.body)
			env.Cluster = &kube.Cluster{Client: fake.NewClientset(tc.objects...)}
			clusterExpect(t, clusterRun(t, availabilityCheck(), env), tc.result, tc.says...)
		})
	}
}
