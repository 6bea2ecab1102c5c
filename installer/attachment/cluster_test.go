package attachment

import (
	"testing"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
)

func TestClusterOptions(t *testing.T) {
	platform := kube.Options{Kubeconfig: "/k/platform", Context: "p"}
	if o, same := ClusterOptions(config.ClusterRef{}, platform); !same || o != platform {
		t.Errorf("empty ref: %+v %v", o, same)
	}
	if o, same := ClusterOptions(config.ClusterRef{Context: "gpu"}, platform); same || o.Kubeconfig != "/k/platform" || o.Context != "gpu" {
		t.Errorf("context only: %+v", o)
	}
	if o, _ := ClusterOptions(config.ClusterRef{Kubeconfig: "/k/gpu"}, platform); o.Kubeconfig != "/k/gpu" || o.Context != "" {
		t.Errorf("kubeconfig only: %+v", o)
	}
}
