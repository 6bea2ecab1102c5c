package charts

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/e2e/testservers"
)

// TestRedisHighAvailability: with global.availability high the redis
// chart runs three members, one per node, each a server, a Sentinel and a
// keeper; the Service redis has no selector (the keeper points it at the
// master); without it, one standalone server exactly as before.
func TestRedisHighAvailability(t *testing.T) {
	const ha = "global: {availability: high}\nimages: {redisHA: registry.example.com/redis-ha:1}"
	r := infraMustRender(t, "redis", valuesOf(t, ha))
	sts := infraStatefulSet(t, r)
	if *sts.Spec.Replicas != 3 || sts.Spec.Template.Labels["onprem.dev/redis-cluster"] != "redis" || sts.Spec.Template.Labels["onprem.dev/kube-api"] != "true" {
		t.Errorf("replicas %d, labels %v: want 3 members labelled as the cluster and reaching the API", *sts.Spec.Replicas, sts.Spec.Template.Labels)
	}
	infraCheckMembers(t, sts)
	pod := sts.Spec.Template.Spec
	var names []string
	for _, c := range pod.Containers {
		names = append(names, c.Name)
		if c.Image != "registry.example.com/redis-ha:1" || len(c.Command) != 3 || c.Command[1] != "/etc/redis-ha/redis-ha.sh" {
			t.Errorf("container %s: image %s, command %v", c.Name, c.Image, c.Command)
		}
	}
	if !slices.Equal(names, []string{"redis", "sentinel", "keeper"}) {
		t.Errorf("containers %v", names)
	}
	if c := infraContainer(t, r, "redis"); c.Lifecycle == nil || c.Lifecycle.PreStop == nil || !slices.Contains(c.Lifecycle.PreStop.Exec.Command, "handover") {
		t.Errorf("redis: no preStop handover: %+v", c.Lifecycle)
	}
	if pod.ServiceAccountName != "redis" || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("service account %q", pod.ServiceAccountName)
	}
	for _, s := range r.services {
		if s.Name == "redis" && len(s.Spec.Selector) != 0 {
			t.Errorf("Service redis selects %v: the keeper writes its Endpoints (a selector would send writes to replicas)", s.Spec.Selector)
		}
	}
	if len(r.roles) != 1 {
		t.Fatalf("%d Roles", len(r.roles))
	}
	for _, rule := range r.roles[0].Rules {
		if slices.Contains(rule.Verbs, "list") || slices.Contains(rule.Verbs, "delete") || slices.Contains(rule.Resources, "secrets") {
			t.Errorf("Role rule %+v grants more than the keeper needs", rule)
		}
		if rule.Resources[0] == "pods" && !slices.Equal(rule.ResourceNames, []string{"redis-0", "redis-1", "redis-2"}) {
			t.Errorf("pods rule %+v: want the members only", rule)
		}
	}
	if len(r.pdbs) != 1 || len(r.networkPolicies) != 1 || len(r.configMaps) != 1 {
		t.Errorf("%d budgets, %d policies, %d ConfigMaps", len(r.pdbs), len(r.networkPolicies), len(r.configMaps))
	}
	script := r.configMaps[0].Data["redis-ha.sh"]
	for _, want := range []string{"members=3", "quorum=$((members / 2 + 1))", "sentinel down-after-milliseconds $name 5000", "--min-replicas-to-write 1"} {
		if !strings.Contains(script, want) {
			t.Errorf("script lacks %q", want)
		}
	}
	// The script is valid sh (dash, as the image's /bin/sh).
	f := filepath.Join(t.TempDir(), "redis-ha.sh")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-n", f).CombinedOutput(); err != nil {
		t.Errorf("sh -n: %v: %s", err, out)
	}
	// The password never reaches the rendered objects.
	if strings.Contains(r.raw, "requirepass \"$REDIS_PASSWORD\"") == false {
		t.Errorf("the server's password does not come from the environment")
	}

	// Fewer than three cannot keep a majority of Sentinels; 0 stops.
	if _, err := infraRender(t, "redis", valuesOf(t, ha+"\nha: {replicas: 2}")); err == nil || !strings.Contains(err.Error(), "ha.replicas is 2") {
		t.Errorf("ha.replicas 2: %v, want a refusal naming ha.replicas", err)
	}
	if _, err := infraRender(t, "redis", valuesOf(t, "global: {availability: high}")); err == nil || !strings.Contains(err.Error(), "images.redisHA is required") {
		t.Errorf("no redisHA image: %v", err)
	}

	// Single: one server, none of the replication's parts.
	s := infraMustRender(t, "redis", nil)
	one := infraStatefulSet(t, s)
	if *one.Spec.Replicas != 1 || len(one.Spec.Template.Spec.Containers) != 1 || len(s.roles)+len(s.pdbs)+len(s.networkPolicies)+len(s.configMaps) != 0 {
		t.Errorf("single: %d replicas, %d containers, %d roles, %d budgets, %d policies", *one.Spec.Replicas, len(one.Spec.Template.Spec.Containers), len(s.roles), len(s.pdbs), len(s.networkPolicies))
	}
}

// TestRedisKeeperStopsOnSIGTERM runs the keeper, the shell loop of a
// member's third container, as its container's first process (PID 1 of a
// PID namespace of its own, where a signal without a handler is ignored)
// and stops it as the kubelet does: it must end on SIGTERM, not wait out
// the pod's grace period for the kill (a drain took 64 s a member).
func TestRedisKeeperStopsOnSIGTERM(t *testing.T) {
	r := infraMustRender(t, "redis", valuesOf(t, "global: {availability: high}\nimages: {redisHA: registry.example.com/redis-ha:1}"))
	scripts := testservers.WriteFiles(t, map[string][]byte{"redis-ha.sh": []byte(r.configMaps[0].Data["redis-ha.sh"])}, 0o644)
	auth := testservers.WriteFiles(t, map[string][]byte{"password": []byte("keeper-test")}, 0o644)
	keeper := infraContainer(t, r, "keeper")
	pod := testservers.StartPod(t, testservers.PodSpec{
		Name:    "redis-0",
		Command: append(slices.Clone(keeper.Command), keeper.Args...),
		Env: map[string]string{
			"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "NAMESPACE": "onprem", "POD_NAME": "redis-0", "POD_IP": "127.0.0.1",
			"REDIS_PASSWORD": "keeper-test", "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1",
		},
		Mounts: map[string]string{"/etc/redis-ha": scripts, "/etc/redis-auth": auth, "/data": t.TempDir()},
	})
	// Some rounds of its loop first.
	time.Sleep(2500 * time.Millisecond)
	if pod.Exited() {
		t.Fatalf("the keeper ended by itself:\n%s", pod.LogTail(20))
	}
	stopped, took := pod.Stop(10 * time.Second)
	if !stopped {
		t.Fatalf("the keeper, its container's first process, did not end 10 s after SIGTERM: a stopping member waits for the kill\n%s", pod.LogTail(20))
	}
	t.Logf("the keeper ended %.1f s after SIGTERM", took.Seconds())
}

// TestRedisKeeperRoundStartsFewProcesses runs the keeper's loop against
// stand-ins for every program it may start (redis-cli, curl, sleep, and
// any other it could call), which record each call: a round starts sleep
// and two redis-cli (Sentinel's master, the server's role) and nothing
// else; the master reads the Service's Endpoints from the API server
// until they name it, then every tenth round; a replica never does. Each
// process is a fork and an exec on the member's node, every second, on
// each of the three members (it was 11 to 14 a round).
func TestRedisKeeperRoundStartsFewProcesses(t *testing.T) {
	r := infraMustRender(t, "redis", valuesOf(t, "global: {availability: high}\nimages: {redisHA: registry.example.com/redis-ha:1}"))
	keeper := infraContainer(t, r, "keeper")
	state := testservers.WriteFiles(t, map[string][]byte{"calls": nil, "role": []byte("master"), "ep-ip": nil}, 0o666)
	// Written by the keeper's user too.
	for _, f := range []string{"", "calls", "role", "ep-ip"} {
		if err := os.Chmod(filepath.Join(state, f), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	// The stand-ins: each records its name (curl: what it was asked),
	// answers as the real one would, or runs the real program.
	record := "#!/bin/sh\necho %s >> " + state + "/calls\n"
	real := func(name, path string) string { return fmt.Sprintf(record, name) + "exec " + path + " \"$@\"\n" }
	bin := testservers.WriteFiles(t, map[string][]byte{
		// Short rounds: the test counts rounds, not seconds.
		"sleep": []byte(fmt.Sprintf(record, "sleep") + "exec /bin/sleep 0.05\n"),
		"redis-cli": []byte(fmt.Sprintf(record, "redis-cli") + `case "$*" in
  *get-master-addr-by-name*) printf 'redis-0.redis-headless.onprem\n6379\n' ;;
  *" role") printf '%s\n0\n' "$(/bin/cat ` + state + `/role)" ;;
  *"info replication") printf 'role:master\r\nconnected_slaves:1\r\n' ;;
  *) /bin/cat > /dev/null; echo OK ;;
esac
`),
		"curl": []byte(`#!/bin/sh
case "$*" in
  *PATCH*/pods/*) echo curl-label >> ` + state + `/calls; printf 200 ;;
  *PATCH*/endpoints/*|*POST*/endpoints*) echo curl-point >> ` + state + `/calls; printf '%s' "$POD_IP" > ` + state + `/ep-ip; printf 200 ;;
  */endpoints/*) echo curl-get >> ` + state + `/calls; printf '{"subsets":[{"addresses":[{"ip":"%s"}]}]}' "$(/bin/cat ` + state + `/ep-ip)" ;;
  *) echo "curl-other $*" >> ` + state + `/calls; printf 500 ;;
esac
`),
		"sed": []byte(real("sed", "/bin/sed")), "cat": []byte(real("cat", "/bin/cat")), "head": []byte(real("head", "/usr/bin/head")),
		"touch": []byte(real("touch", "/usr/bin/touch")), "find": []byte(real("find", "/usr/bin/find")), "timeout": []byte(real("timeout", "/usr/bin/timeout")),
		"getent": []byte(real("getent", "/usr/bin/getent")), "printf": []byte(real("printf", "/usr/bin/printf")), "date": []byte(real("date", "/bin/date")),
		// The pod's own setup (before the keeper starts).
		"sh": []byte("#!/bin/sh\nexec /bin/sh \"$@\"\n"), "mkdir": []byte(real("mkdir", "/bin/mkdir")),
		"mount": []byte(real("mount", "/bin/mount")), "setpriv": []byte(real("setpriv", "/usr/bin/setpriv")),
	}, 0o755)
	scripts := testservers.WriteFiles(t, map[string][]byte{"redis-ha.sh": []byte(r.configMaps[0].Data["redis-ha.sh"])}, 0o644)
	auth := testservers.WriteFiles(t, map[string][]byte{"password": []byte("keeper-test")}, 0o644)
	sa := testservers.WriteFiles(t, map[string][]byte{"token": []byte("a-token"), "ca.crt": []byte("a-ca")}, 0o644)
	data := t.TempDir()
	pod := testservers.StartPod(t, testservers.PodSpec{
		Name:    "redis-0",
		Command: append(slices.Clone(keeper.Command), keeper.Args...),
		Env: map[string]string{
			"PATH": bin, "NAMESPACE": "onprem", "POD_NAME": "redis-0", "POD_IP": "10.1.2.3",
			"REDIS_PASSWORD": "keeper-test", "KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "1",
		},
		Mounts: map[string]string{"/etc/redis-ha": scripts, "/etc/redis-auth": auth, "/data": data, "/var/run/secrets/kubernetes.io/serviceaccount": sa},
	})
	// calls counts each stand-in's calls since the keeper's first round
	// (the pod's setup calls mkdir, mount and setpriv before it).
	calls := func() map[string]int {
		b, err := os.ReadFile(filepath.Join(state, "calls"))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		n := map[string]int{}
		if i := slices.Index(lines, "sleep"); i >= 0 {
			for _, l := range lines[i:] {
				n[l]++
			}
		}
		return n
	}
	waitRounds := func(rounds int) map[string]int {
		deadline := time.Now().Add(30 * time.Second)
		for {
			n := calls()
			if n["sleep"] >= rounds {
				return n
			}
			if pod.Exited() || time.Now().After(deadline) {
				t.Fatalf("the keeper made %d rounds, want %d:\n%s", n["sleep"], rounds, pod.LogTail(20))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// The master: labelled once, the Service pointed at it once, then
	// the Endpoints read every tenth round.
	m := waitRounds(40)
	rounds := m["sleep"]
	for name, n := range m {
		switch name {
		case "sleep", "redis-cli", "curl-label", "curl-point", "curl-get", "sed":
		default:
			t.Errorf("the keeper started %s %d times in %d rounds", name, n, rounds)
		}
	}
	// Two redis-cli a round, two to apply the password at the start and
	// one for the master's replicas before it takes the Service (a round
	// may be under way when the counts are read).
	if n := m["redis-cli"]; n > 2*rounds+5 || n < 2*(rounds-1) {
		t.Errorf("redis-cli ran %d times in %d rounds, want two a round", n, rounds)
	}
	if m["curl-label"] != 1 || m["curl-point"] != 1 || m["sed"] != 1 {
		t.Errorf("labelled %d times, pointed the Service %d times (sed %d) in %d rounds, want once each", m["curl-label"], m["curl-point"], m["sed"], rounds)
	}
	if n := m["curl-get"]; n < 2 || n > rounds/10+3 {
		t.Errorf("the master read the Endpoints %d times in %d rounds, want once, then every tenth round", n, rounds)
	}
	if b, err := os.ReadFile(filepath.Join(data, "onprem-master")); err != nil || strings.TrimSpace(string(b)) != "redis-0.redis-headless.onprem" {
		t.Errorf("the master noted on the volume: %q, %v", b, err)
	}
	if fi, err := os.Stat(filepath.Join(data, ".keeper-alive")); err != nil || time.Since(fi.ModTime()) > 5*time.Second {
		t.Errorf("the probes' sign of life: %v, %v", fi, err)
	}

	// A replica: labelled again, and the API server asked nothing more.
	if err := os.WriteFile(filepath.Join(state, "role"), []byte("slave"), 0o666); err != nil {
		t.Fatal(err)
	}
	r2 := waitRounds(rounds + 30)
	if r2["curl-label"] != 2 || r2["curl-get"] > m["curl-get"]+1 {
		t.Errorf("as a replica: labelled %d times (want 2), the Endpoints read %d more times (want none after the change)", r2["curl-label"], r2["curl-get"]-m["curl-get"])
	}
	if log := pod.LogTail(20); !strings.Contains(log, "this member is now a replica") || strings.Contains(log, "not found") {
		t.Errorf("the keeper's log:\n%s", log)
	}
	t.Logf("%d rounds: %v", r2["sleep"], r2)
}
