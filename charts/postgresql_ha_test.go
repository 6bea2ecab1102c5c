package charts

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"onprem.dev/onprem/e2e/testservers"
)

// With availability high, a PostgreSQL member that stops (a drain, a
// roll) first hands the primary's role over: its preStop runs
// switchover.py, which asks its own Patroni for a switchover when it is
// the primary, and does nothing more as a replica or when Patroni does
// not answer; in every case it then sends Patroni SIGTERM, which Patroni
// obeys, so that the member stops at once whatever stop signal its image
// declares. Run with Python against a stand-in of Patroni's REST API and
// a stand-in of its process.
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
			patroni := startPatroniStandIn(t)
			cmd := exec.Command(python, f)
			cmd.Env = append(os.Environ(), "PATRONI_API="+api.URL, "PATRONI_NAME=postgresql-1", patroni.env)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("switchover.py: %v\n%s", err, out)
			}
			patroni.wantTerminated(t)
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
	// Patroni's API not answering: the member stops anyway, saying why.
	patroni := startPatroniStandIn(t)
	cmd := exec.Command(python, f)
	cmd.Env = append(os.Environ(), "PATRONI_API=http://127.0.0.1:1", "PATRONI_NAME=postgresql-1", patroni.env)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "no switchover before stopping") {
		t.Errorf("with Patroni down: %v\n%s", err, out)
	}
	patroni.wantTerminated(t)
}

// patroniStandIn is a process standing for Patroni, PID 1 of a member's
// container: a shell that exits 143 on SIGTERM and ignores SIGINT, as
// Patroni does. env points switchover.py at it (PATRONI_PID).
type patroniStandIn struct {
	cmd  *exec.Cmd
	env  string
	done chan error
}

func startPatroniStandIn(t *testing.T) *patroniStandIn {
	t.Helper()
	cmd := exec.Command("sh", "-c", `trap '' INT; trap 'exit 143' TERM; while :; do sleep 0.1; done`)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &patroniStandIn{cmd: cmd, env: "PATRONI_PID=" + strconv.Itoa(cmd.Process.Pid), done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return p
}

// wantTerminated checks that the stand-in was told to stop with SIGTERM
// (and did, within seconds).
func (p *patroniStandIn) wantTerminated(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 143 {
			t.Errorf("Patroni's stand-in ended with %v, want exit 143 (its SIGTERM trap)", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("switchover.py did not send Patroni SIGTERM: it would stop only when the kubelet's stop signal or the kill came")
	}
}

// The replicated PostgreSQL and Redis are rolled by onprem, replicas
// first and the primary last (installer/roll): their StatefulSets'
// update strategy is OnDelete. The single servers, and RabbitMQ, whose
// nodes are equals, roll themselves.
func TestReplicatedPrimariesRollLast(t *testing.T) {
	for _, tc := range []struct {
		chart, values string
		want          appsv1.StatefulSetUpdateStrategyType
	}{
		{"postgresql", "global: {availability: high}\nimages: {postgresqlHA: registry.example.com/postgresql-ha:1}\nha: {replicationSecret: onprem-postgresql-replication}", appsv1.OnDeleteStatefulSetStrategyType},
		{"redis", "global: {availability: high}\nimages: {redisHA: registry.example.com/redis-ha:1}", appsv1.OnDeleteStatefulSetStrategyType},
		{"postgresql", "", appsv1.RollingUpdateStatefulSetStrategyType},
		{"redis", "", appsv1.RollingUpdateStatefulSetStrategyType},
		{"rabbitmq", "global: {availability: high}", appsv1.RollingUpdateStatefulSetStrategyType},
	} {
		sts := infraStatefulSet(t, infraMustRender(t, tc.chart, valuesOf(t, tc.values)))
		if got := sts.Spec.UpdateStrategy.Type; got != tc.want {
			t.Errorf("%s with %q: update strategy %s, want %s", tc.chart, tc.values, got, tc.want)
		}
	}
}
