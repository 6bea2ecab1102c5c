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

// cordonTainted gives n the taint the node controller puts on a cordoned
// node.
func cordonTainted(n *corev1.Node) *corev1.Node {
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule})
	return n
}

// poolNode is a ready node of pool "platform" (spec.placement), cordoned
// or not.
func poolNode(name string, cordoned bool) *corev1.Node {
	n := haNode(name, name, true, cordoned)
	n.Labels["pool"] = "platform"
	return n
}

// dnsPod is a pod of the cluster's DNS on node, ready or not.
func dnsPod(name, node string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: DNSNamespace, Labels: map[string]string{"k8s-app": "kube-dns"}}}
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	return p
}

// controlPlaneNode is a ready node that the platform's pods do not
// tolerate.
func controlPlaneNode(name string) *corev1.Node {
	n := haNode(name, "a", true, false)
	n.Spec.Taints = []corev1.Taint{{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}}
	return n
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
		// moves: the operation moves databases (install).
		moves bool
	}{
		{"single needs nothing", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false)}, Pass,
			[]string{"spec.availability is single"}, false},
		{"high on two nodes", high, append(zoned(2, "a", "b"), network), Fail,
			[]string{"needs 3 schedulable nodes", "can run on 2", "add nodes", "spec.availability: single"}, false},
		{"high with a cordoned and a not-ready node", high,
			append(zoned(2, "a", "b"), haNode("c", "c", true, true), haNode("d", "c", false, false), network), Fail,
			[]string{"can run on 2", "c (cordoned)", "d (not Ready)", "uncordon"}, false},
		// A drain during an upgrade or a re-run of install: the platform
		// runs replicated, and what it restarts on the cordoned node waits.
		{"high installed, one node of three cordoned", high,
			append(zoned(2, "a", "b"), cordonTainted(haNode("c", "c", true, true)), network, pgSet(true), mqSet(true)), Warn,
			[]string{"runs replicated on 3 nodes, of which c is cordoned", "waits until its node is uncordoned", "kubectl uncordon NODE"}, false},
		{"high installed, a cordoned node and a not-ready one", high,
			append(zoned(2, "a", "b"), haNode("c", "c", true, true), haNode("d", "c", false, true), network, pgSet(true)), Warn,
			[]string{"runs replicated on 3 nodes, of which c is cordoned"}, false},
		{"high installed on two nodes and a cordoned one outside the placement", high + "  placement:\n    nodeSelector: {pool: platform}\n",
			[]runtime.Object{poolNode("a", false), poolNode("b", false), haNode("c", "c", true, true), network, pgSet(true)}, Fail,
			[]string{"can run on 2", "c (cordoned)"}, false},
		{"high installed, two of three cordoned", high,
			append(zoned(1, "a"), haNode("c", "c", true, true), haNode("d", "d", true, true), network, pgSet(true)), Warn,
			[]string{"of which c, d are cordoned"}, false},
		{"high with nodes outside the placement", high + "  placement:\n    nodeSelector: {pool: platform}\n",
			append(zoned(3, "a", "b", "c"), network), Fail,
			[]string{"can run on 0", "does not match spec.placement.nodeSelector pool=platform", "widen spec.placement"}, false},
		{"high in one zone", high, append(zoned(3, "a"), network), Warn,
			[]string{"the 3 schedulable nodes are in zone a", "losing the zone is not", ZoneLabel}, false},
		{"high with no zone labels", high, append(zoned(4, ""), network), Warn,
			[]string{"the 4 schedulable nodes carry no zone label"}, false},
		{"high over three zones", high, append(zoned(3, "a", "b", "c"), network), Pass,
			[]string{"3 schedulable nodes in 3 zones: a (1), b (1), c (1)"}, false},
		{"high on node-local volumes bound at once", high,
			append(zoned(3, "a", "b", "c"), haClass("local", "rancher.io/local-path", storagev1.VolumeBindingImmediate, true)), Fail,
			[]string{"StorageClass local", "rancher.io/local-path", "WaitForFirstConsumer", "spec.components.mongodb.values"}, false},
		{"high on node-local volumes bound with the pod", high + "  storage:\n    className: local\n",
			append(zoned(3, "a", "b", "c"), network, haClass("local", "rancher.io/local-path", storagev1.VolumeBindingWaitForFirstConsumer, false)), Pass,
			[]string{"3 zones"}, false},
		{"high over an installed single server", high, append(zoned(3, "a", "b", "c"), network, pgSet(false)), Fail,
			[]string{"namespace onprem has PostgreSQL from a single server to a replicated Patroni cluster", "only onprem install moves", "docs/availability.md"}, false},
		{"single over an installed Patroni cluster", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), pgSet(true)}, Fail,
			[]string{"PostgreSQL from a replicated Patroni cluster to a single server", "spec.availability single would change it"}, false},
		{"high over an installed Patroni cluster", high, append(zoned(3, "a", "b", "c"), network, pgSet(true)), Pass,
			[]string{"3 zones"}, false},
		{"high over an installed single RabbitMQ", high, append(zoned(3, "a", "b", "c"), network, pgSet(true), mqSet(false)), Fail,
			[]string{"RabbitMQ from a single server to a replicated RabbitMQ cluster", "onprem install"}, false},
		{"single over an installed RabbitMQ cluster", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), mqSet(true)}, Fail,
			[]string{"RabbitMQ from a replicated RabbitMQ cluster to a single server"}, false},
		{"high over an installed single Redis", high, append(zoned(3, "a", "b", "c"), network, pgSet(true), mqSet(true), redisSet(false)), Fail,
			[]string{"Redis from a single server to a replicated Redis with Sentinel", "onprem install"}, false},
		{"single over an installed Redis with Sentinel", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), redisSet(true)}, Fail,
			[]string{"Redis from a replicated Redis with Sentinel to a single server"}, false},
		{"high over an installed single MongoDB", high, append(zoned(3, "a", "b", "c"), network, pgSet(true), mqSet(true), redisSet(true), mongoSet(false)), Fail,
			[]string{"MongoDB from a single server to a replicated MongoDB replica set", "onprem install"}, false},
		{"single over an installed MongoDB replica set", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), mongoSet(true)}, Fail,
			[]string{"MongoDB from a replicated MongoDB replica set to a single server"}, false},
		{"high over every cluster installed", high, append(zoned(3, "a", "b", "c"), network, pgSet(true), mqSet(true), redisSet(true), mongoSet(true)), Pass,
			[]string{"3 zones"}, false},
		{"high over both clusters installed", high, append(zoned(3, "a", "b", "c"), network, pgSet(true), mqSet(true)), Pass,
			[]string{"3 zones"}, false},
		{"single over an installed single server", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), pgSet(false)}, Pass,
			[]string{"spec.availability is single"}, false},
		{"install moving PostgreSQL and MongoDB to high", high, append(zoned(3, "a", "b", "c"), network, pgSet(false), mqSet(true), redisSet(true), mongoSet(false)), Warn,
			[]string{"install will move PostgreSQL from a single server to a replicated Patroni cluster; MongoDB from a single server to a replicated MongoDB replica set: the services stop"}, true},
		{"install moving Redis back to single", clusterBaseSpec, []runtime.Object{haNode("n0", "", true, false), redisSet(true)}, Warn,
			[]string{"install will move Redis from a replicated Redis with Sentinel to a single server", "services stop", "no acknowledged write lost", "maintenance window"}, true},
		{"install moving to high on two nodes", high, append(zoned(2, "a", "b"), network, pgSet(false)), Fail,
			[]string{"needs 3 schedulable nodes", "can run on 2"}, true},
		{"install moving to high in one zone", high, append(zoned(3, "a"), network, pgSet(false)), Warn,
			[]string{"install will move PostgreSQL from a single server", "; the 3 schedulable nodes are in zone a", "finishes; for zone failures"}, true},
		// The cluster's DNS: all on one of the platform's nodes is a
		// warning with its fix; spread, or on a node the platform does
		// not use, says nothing.
		{"high with the cluster's DNS on one platform node", high,
			append(zoned(3, "a", "b", "c"), network, dnsPod("coredns-1", "n0", true), dnsPod("coredns-2", "n0", true)), Warn,
			[]string{"the cluster's DNS (k8s-app=kube-dns in kube-system) runs on node n0 alone (2 ready pod(s))", "stops every name lookup", "required pod anti-affinity on kubernetes.io/hostname", "The cluster's DNS"}, false},
		{"high with one ready DNS pod of two", high,
			append(zoned(3, "a", "b", "c"), network, dnsPod("coredns-1", "n1", true), dnsPod("coredns-2", "n2", false)), Warn,
			[]string{"runs on node n1 alone (1 ready pod(s))"}, false},
		{"high with the cluster's DNS spread", high,
			append(zoned(3, "a", "b", "c"), network, dnsPod("coredns-1", "n0", true), dnsPod("coredns-2", "n1", true)), Pass,
			[]string{"3 schedulable nodes in 3 zones"}, false},
		{"high with the cluster's DNS on the control plane", high,
			append(zoned(3, "a", "b", "c"), network, controlPlaneNode("cp"), dnsPod("coredns-1", "cp", true), dnsPod("coredns-2", "cp", true)), Pass,
			[]string{"3 schedulable nodes in 3 zones"}, false},
		{"high in one zone with the cluster's DNS on one node", high,
			append(zoned(3, "a"), network, dnsPod("coredns-1", "n2", true)), Warn,
			[]string{"nodes are in zone a", "; the cluster's DNS (k8s-app=kube-dns in kube-system) runs on node n2 alone", "otherwise nothing to do; spread the cluster's DNS"}, false},
		{"high on a configured node-local class bound at once", high + "  storage:\n    className: local\n",
			append(zoned(3, "a", "b", "c"), network, haClass("local", "kubernetes.io/no-provisioner", storagev1.VolumeBindingImmediate, false)), Fail,
			[]string{"StorageClass local", "spec.storage.className"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := clusterLoadEnv(t, tc.body)
			env.Cluster = &kube.Cluster{Client: fake.NewClientset(tc.objects...)}
			env.MovesAvailability = tc.moves
			clusterExpect(t, clusterRun(t, availabilityCheck(), env), tc.result, tc.says...)
		})
	}
}
