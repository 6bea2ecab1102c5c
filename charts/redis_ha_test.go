package charts

import (
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
