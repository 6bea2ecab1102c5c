package preflight

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/render"
)

func TestPodRequestsSumsContainersAndTakesLargestInit(t *testing.T) {
	c := func(cpu, mem string) corev1.Container {
		return corev1.Container{Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}}
	}
	always := corev1.ContainerRestartPolicyAlways
	sidecar := c("100m", "64Mi")
	sidecar.RestartPolicy = &always
	spec := &corev1.PodSpec{
		InitContainers: []corev1.Container{c("2", "128Mi"), sidecar},
		Containers:     []corev1.Container{c("250m", "256Mi"), c("250m", "256Mi")},
	}
	got := podRequests(spec)
	// CPU: the init container (2) beats 0.6; memory: 576Mi beats 128Mi.
	if got.MilliCPU != 2000 || got.Memory != 576<<20 {
		t.Errorf("podRequests = %+v", got)
	}
	for r, want := range map[requests]string{
		{6200, 11*(1<<30) + (1 << 29)}: "6.2 CPU and 11.5 GiB",
		{500, 1 << 29}:                 "0.5 CPU and 0.5 GiB",
		// A small shortfall is shown exactly, never as 0.
		{30, 300 << 20}:    "30m CPU and 300 MiB",
		{1250, 0}:          "1250m CPU and 0 GiB",
		{0, (1 << 20) + 1}: "0 CPU and 2 MiB",
	} {
		if s := r.String(); s != want {
			t.Errorf("%+v.String() = %q, want %q", r, s, want)
		}
	}
	for _, c := range []struct {
		need, free requests
		want       string
	}{
		{requests{520, 4 << 30}, requests{480, 22 << 30}, "40m CPU"},
		{requests{500, 4 << 30}, requests{2000, 4<<30 - 300<<20}, "300 MiB of memory"},
		{requests{2500, 3 << 30}, requests{500, 1 << 30}, "2 CPU and 2 GiB of memory"},
	} {
		if got := shortfall(c.need, c.free); got != c.want {
			t.Errorf("shortfall(%+v, %+v) = %q, want %q", c.need, c.free, got, c.want)
		}
	}
	dep := &unstructured.Unstructured{Object: map[string]any{"kind": "Deployment", "metadata": map[string]any{"name": "d"},
		"spec": map[string]any{"replicas": int64(3), "template": map[string]any{"spec": map[string]any{"containers": []any{
			map[string]any{"name": "a", "resources": map[string]any{"requests": map[string]any{"cpu": "500m", "memory": "1Gi"}}}}}}}}}
	ds := dep.DeepCopy()
	ds.SetKind("DaemonSet")
	ds.SetName("ds")
	d := platformDemand(&render.Result{Components: []*render.Component{{Objects: []*unstructured.Unstructured{dep, ds}}}}, 2)
	if d.Total.MilliCPU != 2500 || d.Total.Memory != 5<<30 || d.Pods != 5 || d.MaxReplicas != 3 || d.MaxReplicasName != "Deployment/d" {
		t.Errorf("demand = %+v", d)
	}
}

func TestNodeExclusion(t *testing.T) {
	ready := corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{"pool": "ci"}}, Status: ready,
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "dedicated", Value: "ci", Effect: corev1.TaintEffectNoSchedule}, {Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule}}}}
	if why := nodeExclusion(n, config.Placement{}); why == "" {
		t.Error("a NoSchedule taint without toleration was accepted")
	}
	tol := config.Placement{NodeSelector: map[string]string{"pool": "ci"}, Tolerations: []config.Toleration{{Key: "dedicated", Operator: "Equal", Value: "ci", Effect: "NoSchedule"}}}
	if why := nodeExclusion(n, tol); why != "" {
		t.Errorf("tolerated node excluded: %s", why)
	}
	if why := nodeExclusion(n, config.Placement{Tolerations: []config.Toleration{{Operator: "Exists"}}}); why != "" {
		t.Errorf("tolerate-all excluded: %s", why)
	}
	tol.NodeSelector["pool"] = "other"
	if why := nodeExclusion(n, tol); why == "" {
		t.Error("node selector ignored")
	}
	n.Spec.Unschedulable = true
	if why := nodeExclusion(n, config.Placement{Tolerations: []config.Toleration{{Operator: "Exists"}}}); why != "cordoned" {
		t.Errorf("cordoned node: %q", why)
	}
}

func TestCapacity(t *testing.T) {
	t.Parallel()              // its own cluster
	c := testcluster.Start(t) // one kwok node: 1000 CPU, 1 TiB
	envFor := clusterEnv(t, c)
	ctx := context.Background()

	t.Run("enough", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, capacityCheck(), envFor(clusterBaseSpec)), Pass, "free on 1 schedulable node")
	})
	t.Run("medium profile on one node warns about spreading", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, capacityCheck(), envFor(clusterBaseSpec+"  profile: medium\n")), Warn, "up to 2 replicas", "1 schedulable node")
	})

	// A small node the platform is pinned to.
	small := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "small-0", Labels: map[string]string{"pool": "small", "kubernetes.io/hostname": "small-0"},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status: corev1.NodeStatus{
			Allocatable: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi"), corev1.ResourcePods: resource.MustParse("110")},
			Capacity:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("2Gi"), corev1.ResourcePods: resource.MustParse("110")},
		},
	}
	if _, err := c.Client.CoreV1().Nodes().Create(ctx, small, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	clusterWaitReady(t, c, "small-0")
	pinned := clusterBaseSpec + "  placement:\n    nodeSelector:\n      pool: small\n"

	t.Run("short on the selected node", func(t *testing.T) {
		out := clusterRun(t, capacityCheck(), envFor(pinned))
		clusterExpect(t, out, Fail, "needs 1.7 CPU and 3.8 GiB for 21 pods, 1 CPU and 2 GiB free on 1 schedulable node", "kwok-node-0 (does not match spec.placement.nodeSelector pool=small)")
	})

	// A pod already on the node takes from what is free.
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "busy", Namespace: "default"}, Spec: corev1.PodSpec{NodeName: "small-0",
		Containers: []corev1.Container{{Name: "c", Image: "x", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1536Mi")}}}}}}
	if _, err := c.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("pods already running count", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, capacityCheck(), envFor(pinned)), Fail, "0.5 CPU and 0.5 GiB free on 1 schedulable node")
	})

	// Taint and cordon: no node left.
	n, err := c.Client.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "dedicated", Value: "gpu", Effect: corev1.TaintEffectNoSchedule})
	if _, err := c.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Run("tainted node excluded unless tolerated", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, capacityCheck(), envFor(clusterBaseSpec)), Fail, "has taint dedicated=gpu:NoSchedule not tolerated", "free on 1 schedulable node")
		tolerating := clusterBaseSpec + "  placement:\n    tolerations:\n      - key: dedicated\n        operator: Equal\n        value: gpu\n        effect: NoSchedule\n"
		clusterExpect(t, clusterRun(t, capacityCheck(), envFor(tolerating)), Pass, "free on 2 schedulable nodes")
	})
	t.Run("no schedulable node", func(t *testing.T) {
		s, err := c.Client.CoreV1().Nodes().Get(ctx, "small-0", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.Spec.Unschedulable = true
		if _, err := c.Client.CoreV1().Nodes().Update(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		clusterExpect(t, clusterRun(t, capacityCheck(), envFor(clusterBaseSpec)), Fail, "no node can run the platform's pods", "small-0 (cordoned)", "uncordon")
	})
	t.Run("forbidden to list nodes", func(t *testing.T) {
		env := clusterLoadEnv(t, clusterBaseSpec)
		env.Cluster = clusterConnect(t, serviceAccountKubeconfig(t, c, "default", "blind"))
		clusterExpect(t, clusterRun(t, capacityCheck(), env), Fail, "could not run: list nodes", "forbidden", "--skip-check capacity")
	})
}

func clusterWaitReady(t testing.TB, c *testcluster.Cluster, name string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		n, err := c.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("node %s did not turn Ready", name)
}
