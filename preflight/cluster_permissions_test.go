package preflight

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
)

func TestPermissions(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	envFor := clusterEnv(t, c)
	ctx := context.Background()

	t.Run("cluster admin holds everything", func(t *testing.T) {
		clusterExpect(t, clusterRun(t, permissionsCheck(), envFor(clusterBaseSpec)), Pass, "permissions the install uses")
	})

	t.Run("a namespace-limited user is told what is missing", func(t *testing.T) {
		ns := "onprem"
		kubeconfig := serviceAccountKubeconfig(t, c, ns, "limited")
		// May do anything in its namespace but nothing cluster-wide.
		if _, err := c.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "limited-admin"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "admin"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "limited", Namespace: ns}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		env := clusterLoadEnv(t, clusterBaseSpec)
		env.Cluster = clusterConnect(t, kubeconfig)
		out := clusterRun(t, permissionsCheck(), env)
		clusterExpect(t, out, Fail,
			"create,delete,get,list,patch,update,watch clusterroles.rbac.authorization.k8s.io cluster-wide",
			"ingressclasses.networking.k8s.io cluster-wide",
			"create,delete,get,list,patch,update,watch namespaces cluster-wide",
			"missing: create ingressclasses.networking.k8s.io cluster-wide (for the rendered IngressClass objects)",
			// The platform's Role grants what admin holds; the
			// ClusterRole grants node access it does not.
			"list,watch nodes cluster-wide (granted by the rendered ClusterRole ingress-controller)",
			"escalate")
		for _, d := range out.Details {
			if d == "missing: create deployments.apps in namespace onprem (for the rendered Deployment objects)" {
				t.Errorf("reported a permission the user has: %s", d)
			}
		}
	})

	t.Run("a user who may only review itself cannot do anything", func(t *testing.T) {
		env := clusterLoadEnv(t, clusterBaseSpec)
		env.Cluster = clusterConnect(t, serviceAccountKubeconfig(t, c, "default", "nobody"))
		clusterExpect(t, clusterRun(t, permissionsCheck(), env), Fail, "lacks 136 of the 137", "missing: create deployments.apps in namespace onprem", "missing: list secrets in namespace onprem", "missing: create leases.coordination.k8s.io in namespace onprem")
	})

	t.Run("kinds the cluster does not serve", func(t *testing.T) {
		env := envFor(clusterBaseSpec + "  ingress:\n    gatewayAPI:\n      enabled: true\n      gatewayName: gw\n")
		clusterExpect(t, clusterRun(t, permissionsCheck(), env), Fail, "does not serve", "HTTPRoute (gateway.networking.k8s.io/v1)", "CRDs")
	})
}
