package charts

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"onprem.dev/onprem/e2e/testservers"
)

// With availability high, a PostgreSQL member that stops (a drain, a
// roll) first hands the primary's role over: its preStop runs
// switchover.py, which asks its own Patroni for a switchover when it is
// the primary, and does nothing as a replica or when Patroni does not
// answer. Run with Python against a stand-in of Patroni's REST API.
func TestPostgreSQLPrimarySwitchesOverBeforeItStops(t *testing.T) {
	const ha = "global: {availability: high}\nimages: {postgresqlHA: registry.example.com/postgresql-ha:1}\nha: {replicationSecret: onprem-postgresql-replication}"
	r := infraMustRender(t, "postgresql", valuesOf(t, ha))
	c := infraContainer(t, r, "postgresql")
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil ||
		!slices.Equal(c.Lifecycle.PreStop.Exec.Command, []string{"python3", "/etc/patroni/switchover.py"}) {
		t.Fatalf("postgresql: preStop %+v, want python3 /etc/patroni/switchover.py", c.Lifecycle)
	}
	var script string
	for _, cm := range r.configMaps {
		if s, ok := cm.Data["switchover.py"]; ok {
			script = s
		}
	}
	if script == "" {
		t.Fatal("no ConfigMap holds switchover.py")
	}
	f := filepath.Join(t.TempDir(), "switchover.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	python := testservers.EnsurePackage(t, "python3", "python3")

	for _, tc := range []struct {
		role       string
		switchover bool
	}{{"master", true}, {"primary", true}, {"replica", false}} {
		t.Run(tc.role, func(t *testing.T) {
			var mu sync.Mutex
			var asked []string
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				asked = append(asked, r.Method+" "+r.URL.Path+" "+strings.TrimSpace(string(body)))
				mu.Unlock()
				switch r.URL.Path {
				case "/patroni":
					_ = json.NewEncoder(w).Encode(map[string]string{"role": tc.role, "state": "running"})
				case "/switchover":
					_, _ = io.WriteString(w, `Successfully switched over to "postgresql-2"`)
				default:
					http.NotFound(w, r)
				}
			}))
			defer api.Close()
			cmd := exec.Command(python, f)
			cmd.Env = append(os.Environ(), "PATRONI_API="+api.URL, "PATRONI_NAME=postgresql-1")
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("switchover.py: %v\n%s", err, out)
			}
			mu.Lock()
			defer mu.Unlock()
			want := []string{"GET /patroni "}
			if tc.switchover {
				want = append(want, `POST /switchover {"leader": "postgresql-1"}`)
			}
			if !slices.Equal(asked, want) {
				t.Errorf("asked Patroni %q, want %q (output %s)", asked, want, out)
			}
		})
	}
	// Patroni not answering: the member stops anyway, saying why.
	cmd := exec.Command(python, f)
	cmd.Env = append(os.Environ(), "PATRONI_API=http://127.0.0.1:1", "PATRONI_NAME=postgresql-1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "no switchover before stopping") {
		t.Errorf("with Patroni down: %v\n%s", err, out)
	}
}
