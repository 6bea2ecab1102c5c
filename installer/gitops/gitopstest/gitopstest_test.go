package gitopstest

import (
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/registry"
)

// The served chart can be pulled back at each version, as onprem will.
func TestServeOCI(t *testing.T) {
	repo := ServeOCI(t, "0.25.0", "0.26.0")
	client, err := registry.NewClient(registry.ClientOptPlainHTTP())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0.25.0", "0.26.0"} {
		res, err := client.Pull(strings.TrimPrefix(repo, "oci://") + "/" + ChartName + ":" + v)
		if err != nil {
			t.Fatalf("pull %s: %v", v, err)
		}
		if res.Chart.Meta.Name != ChartName || res.Chart.Meta.Version != v {
			t.Errorf("pulled %+v", res.Chart.Meta)
		}
	}
}
