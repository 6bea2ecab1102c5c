//go:build linux

package images

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// The high-availability images run the postgresql and redis charts' pods
// of spec.availability high. Their peers (Patroni's Kubernetes DCS, the
// other Redis members and Sentinels) are not here: the integration ring
// runs Patroni and Sentinel clusters for real (installer/topology); these
// tests prove that the images hold what the charts' HA pods run, as the
// charts' users, with the charts' configuration.

func TestPostgreSQLHAImageRunsTheChartsPatroni(t *testing.T) {
	img := build(t, "postgresql-ha")
	checkUser(t, img, "999:999")
	// The kubelet stops a container with its image's stop signal: Patroni
	// stops on SIGTERM, not on the postgres image's SIGINT (a member then
	// waits out its 60 s grace period for the kill).
	if cf, err := img.Image.ConfigFile(); err != nil {
		t.Fatal(err)
	} else if cf.Config.StopSignal != "SIGTERM" {
		t.Errorf("postgresql-ha stops with %q, want SIGTERM: Patroni ignores SIGINT", cf.Config.StopSignal)
	}
	root := unpack(t, img)
	cfg := podConfig{
		chart: "postgresql", container: "postgresql", name: "postgresql-0", root: root,
		values: map[string]any{"global": map[string]any{"availability": "high"}, "images": map[string]any{"postgresqlHA": img.Ref}},
		secrets: map[string]map[string]string{
			"onprem-postgresql-admin":       {"username": "onprem_admin", "password": secret()},
			"onprem-postgresql-replication": {"username": "replicator", "password": secret()},
			"onprem-postgresql-rewind":      {"username": "rewind", "password": secret()},
		},
	}
	// The chart's pod runs `patroni /etc/patroni/<config>.yml`: Patroni is
	// on the image's PATH...
	cfg.args = []string{"patroni", "--version"}
	out, err := runPod(t, img, cfg).waitExit(time.Minute)
	if err != nil || !strings.HasPrefix(strings.TrimSpace(out), "patroni ") {
		t.Fatalf("patroni --version: %v\n%s", err, out)
	}
	// ...with PostgreSQL's own programs on that PATH (Patroni calls them
	// by name: the chart sets no bin_dir)...
	cfg.args = []string{"sh", "-c", "for p in postgres pg_ctl initdb pg_controldata pg_rewind pg_basebackup pg_isready psql; do command -v $p; done"}
	out, err = runPod(t, img, cfg).waitExit(time.Minute)
	if err != nil || strings.Count(out, "/usr/lib/postgresql/"+PostgresMajor+"/bin/") != 8 {
		t.Errorf("PostgreSQL's programs on the HA pod's PATH: %v\n%s", err, out)
	}
	// ...and the first member's bootstrap (the chart's initdb options:
	// UTF8, the C.UTF-8 locale, data checksums) works in the image, as the
	// chart's user, in the chart's PGDATA on the data volume. (Patroni
	// 3.0.2's own --validate-config is stricter than Patroni itself: it
	// asks for bootstrap.pg_hba, which the running Patroni does not need;
	// the integration ring runs that Patroni.)
	cfg.args = []string{"sh", "-c", `initdb --pgdata="$PGDATA" --encoding=UTF8 --locale=C.UTF-8 --data-checksums >/dev/null && pg_controldata "$PGDATA"`}
	out, err = runPod(t, img, cfg).waitExit(2 * time.Minute)
	if err != nil || !strings.Contains(out, "Data page checksum version:           1") {
		t.Errorf("initdb with the chart's bootstrap options: %v\n%s", err, out)
	}
}

func TestRedisHAImageRunsTheChartsMemberAndSentinel(t *testing.T) {
	img := build(t, "redis-ha")
	checkUser(t, img, "999:999")
	root := unpack(t, img)
	password := secret()
	values := map[string]any{"global": map[string]any{"availability": "high"}, "images": map[string]any{"redisHA": img.Ref}}
	secrets := map[string]map[string]string{"onprem-redis": {"password": password}}

	// Member 0 with no Sentinel to ask starts as the master (the chart's
	// script), answers with the chart's password, and refuses a write
	// while no replica follows it (min-replicas-to-write 1): no write is
	// acknowledged that a failover could lose.
	server := runPod(t, img, podConfig{chart: "redis", container: "redis", name: "redis-0", root: root, values: values, secrets: secrets})
	server.waitProbes(2 * time.Minute)
	c, r := redisDial(t, server, 6379)
	redisExpect(t, c, r, []redisStep{
		{[]string{"AUTH", password}, "+OK"},
		{[]string{"PING"}, "+PONG"},
		{[]string{"SET", "build:42", "log line"}, "-NOREPLICAS"},
	})
	if info, err := redisCall(c, r, "INFO", "replication"); err != nil || !strings.Contains(info, "role:master") || !strings.Contains(info, "connected_slaves:0") {
		t.Errorf("INFO replication: %v\n%s", err, info)
	}
	if !strings.Contains(server.output(), "starting as the master") {
		t.Errorf("the chart's script did not start member 0 as the master:\n%s", tail(server.output(), 20))
	}

	// Member 0's Sentinel (another pod here, as the chart's containers
	// are their own sandboxes) watches the master the script chose.
	sentinel := runPod(t, img, podConfig{chart: "redis", container: "sentinel", name: "redis-0", root: root, values: values, secrets: secrets})
	sentinel.waitProbes(2 * time.Minute)
	sc, sr := redisDial(t, sentinel, 26379)
	if got, err := redisCall(sc, sr, "SENTINEL", "get-master-addr-by-name", "redis"); err != nil || got != "6379" {
		t.Errorf("SENTINEL get-master-addr-by-name redis: %q, %v\n%s", got, err, tail(sentinel.output(), 20))
	}
	if !strings.Contains(sentinel.output(), "watching master redis-0.redis-headless.onprem (quorum 2 of 3)") {
		t.Errorf("the Sentinel does not watch member 0:\n%s", tail(sentinel.output(), 20))
	}

	// The keeper points the Service at the master through the API server
	// with curl; the Sentinel is redis-server --sentinel.
	out, err := runPod(t, img, podConfig{chart: "redis", container: "keeper", name: "redis-0", root: root, values: values, secrets: secrets,
		args: []string{"sh", "-c", "for p in curl redis-server redis-cli timeout getent; do command -v $p; done && redis-server --version"}}).waitExit(time.Minute)
	if err != nil || strings.Count(out, "/usr/bin/") != 5 || !strings.Contains(out, "Redis server v=") {
		t.Errorf("the HA pod's programs: %v\n%s", err, out)
	}
}

// TestSingleNamesLeaveOutTheHAImages: what the kind e2e and the demo
// build.
func TestSingleNamesLeaveOutTheHAImages(t *testing.T) {
	single := SingleNames()
	for _, n := range HighAvailability {
		if slices.Contains(single, n) || !slices.Contains(Names(), n) {
			t.Errorf("%s: in SingleNames %v, in Names %v", n, single, Names())
		}
	}
	if len(single) != len(Names())-len(HighAvailability) {
		t.Errorf("SingleNames() = %v, Names() = %v", single, Names())
	}
}
