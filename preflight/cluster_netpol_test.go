package preflight

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
)

// The network plugin is recognised by its DaemonSet: none known (the
// harness's cluster), one that ignores NetworkPolicies, and the same with
// a policy engine beside it.
func TestNetworkPolicy(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	envFor := clusterEnv(t, c)
	ctx := context.Background()
	daemonSet := func(ns, name string) {
		t.Helper()
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && ns != "kube-system" {
			t.Fatal(err)
		}
		labels := map[string]string{"app": name}
		_, err := c.Client.AppsV1().DaemonSets(ns).Create(ctx, &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "cni", Image: "example.com/cni:1"}}}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	clusterExpect(t, clusterRun(t, networkPolicyCheck(), envFor(clusterBaseSpec)), Pass, "not known", "Calico")
	daemonSet("kube-system", "kindnet")
	clusterExpect(t, clusterRun(t, networkPolicyCheck(), envFor(clusterBaseSpec)), Warn,
		"kindnet (DaemonSet kube-system/kindnet), which does not enforce NetworkPolicies", "--skip-check network-policy")
	daemonSet("kube-system", "kube-network-policies")
	clusterExpect(t, clusterRun(t, networkPolicyCheck(), envFor(clusterBaseSpec)), Pass, "enforced by kube-network-policies (DaemonSet kube-system/kube-network-policies)")
	daemonSet("calico-system", "calico-node")
	clusterExpect(t, clusterRun(t, networkPolicyCheck(), envFor(clusterBaseSpec)), Pass, "Calico (DaemonSet calico-system/calico-node)")
}
