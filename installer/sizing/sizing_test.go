package sizing

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestProfilesExistInOrder(t *testing.T) {
	if got := strings.Join(Names(), ","); got != "small,medium,large" {
		t.Fatalf("Names() = %s", got)
	}
	if _, err := Get("xl"); err == nil || !strings.Contains(err.Error(), "small, medium, large") {
		t.Errorf("unknown profile: %v", err)
	}
}

func TestServiceValuesLayerComponentOverServices(t *testing.T) {
	p, err := Get("medium")
	if err != nil {
		t.Fatal(err)
	}
	v := p.Values("pipelines-api", ServiceChart)
	if v["replicas"] != 2 && v["replicas"] != float64(2) {
		t.Errorf("pipelines-api replicas = %v, want 2 from its own block", v["replicas"])
	}
	req := v["resources"].(map[string]any)["requests"].(map[string]any)
	if req["cpu"] != "500m" {
		t.Errorf("cpu = %v", req["cpu"])
	}
	// A service without its own block gets the services defaults.
	w := p.Values("cron-executor", ServiceChart)
	if w["replicas"] != 1 && w["replicas"] != float64(1) {
		t.Errorf("cron-executor replicas = %v", w["replicas"])
	}
	// Infrastructure does not inherit the services block.
	m := p.Values("mongodb", "mongodb")
	if _, ok := m["replicas"]; ok {
		t.Errorf("mongodb got service replicas: %v", m)
	}
	// Values are copies: changing them does not change the profile.
	req["cpu"] = "9"
	again := p.Values("pipelines-api", ServiceChart)["resources"].(map[string]any)["requests"].(map[string]any)
	if again["cpu"] != "500m" {
		t.Error("Values returned a shared map")
	}
}

// Every quantity in every profile parses, requests never exceed limits, and
// profiles grow from small to large.
func TestProfilesAreConsistent(t *testing.T) {
	total := map[string]int64{}
	for _, name := range Names() {
		p, _ := Get(name)
		comps := []string{"ingress", "mongodb", "postgresql", "redis", "rabbitmq", "db-provision", "pipelines-api", "gitops-api", "cron-executor"}
		for _, c := range comps {
			chart := c
			if strings.Contains(c, "-") && c != "db-provision" {
				chart = ServiceChart
			}
			v := p.Values(c, chart)
			res, ok := v["resources"].(map[string]any)
			if !ok {
				t.Errorf("%s/%s: no resources", name, c)
				continue
			}
			reqs, _ := res["requests"].(map[string]any)
			lims, _ := res["limits"].(map[string]any)
			for _, k := range []string{"cpu", "memory"} {
				q, err := resource.ParseQuantity(toString(reqs[k]))
				if err != nil {
					t.Errorf("%s/%s: requests.%s: %v", name, c, k, err)
					continue
				}
				if k == "memory" {
					total[name] += q.Value()
					l, err := resource.ParseQuantity(toString(lims[k]))
					if err != nil {
						t.Errorf("%s/%s: limits.memory: %v", name, c, err)
					} else if l.Cmp(q) < 0 {
						t.Errorf("%s/%s: memory limit %s below request %s", name, c, l.String(), q.String())
					}
				}
			}
		}
	}
	if !(total["small"] < total["medium"] && total["medium"] < total["large"]) {
		t.Errorf("memory requests do not grow with the profile: %v", total)
	}
}

func toString(v any) string {
	s, _ := v.(string)
	return s
}

func TestMergeIsDeep(t *testing.T) {
	dst := map[string]any{"a": map[string]any{"x": 1, "y": 2}, "b": 1}
	Merge(dst, map[string]any{"a": map[string]any{"y": 3}, "c": 4})
	a := dst["a"].(map[string]any)
	if a["x"] != 1 || a["y"] != 3 || dst["c"] != 4 || dst["b"] != 1 {
		t.Errorf("merge = %v", dst)
	}
}
