package preflight

import (
	"testing"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/kube"
)

func TestKubernetesVersionParsesProviderVersionsAndNamesTheRange(t *testing.T) {
	env := clusterLoadEnv(t, clusterBaseSpec) // 2.8.0: >= 1.32, < 1.39
	for _, tc := range []struct {
		server string
		want   Result
		say    []string
	}{
		{"v1.33.4-eks-1234", Pass, []string{"v1.33.4-eks-1234", ">= 1.32, < 1.39"}},
		{"v1.36.3+k3s1", Pass, nil},
		{"v1.34.1-gke.1200", Pass, nil},
		{"v1.31.9", Fail, []string{"v1.31.9 is not supported by platform 2.8.0", ">= 1.32, < 1.39", "onprem versions"}},
		{"v1.39.0", Fail, []string{">= 1.32, < 1.39"}},
		{"not-a-version", Fail, []string{"cannot compare"}},
		{"", Fail, []string{"did not report"}},
	} {
		t.Run(tc.server, func(t *testing.T) {
			env.Cluster = &kube.Cluster{ServerVersion: tc.server}
			clusterExpect(t, clusterRun(t, kubernetesVersionCheck(), env), tc.want, tc.say...)
		})
	}
	env.Cluster = nil
	clusterExpect(t, clusterRun(t, kubernetesVersionCheck(), env), Fail, "missing")
}

func TestKubernetesVersionOfARealServer(t *testing.T) {
	t.Parallel() // its own cluster
	c := testcluster.Start(t)
	env := clusterEnv(t, c)(clusterBaseSpec)
	clusterExpect(t, clusterRun(t, kubernetesVersionCheck(), env), Pass, "v1.36.3")
	old := *env.Release
	old.Kubernetes = ">= 1.30, < 1.36"
	env.Release = &old
	clusterExpect(t, clusterRun(t, kubernetesVersionCheck(), env), Fail, "v1.36.3", ">= 1.30, < 1.36")
}
