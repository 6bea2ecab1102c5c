//go:build linux

package topology_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/topology"
)

// redisFailover, on the platform installed with spec.availability high on
// a real API server, runs Debian's real Redis and Redis Sentinel as the
// three pods of the rendered StatefulSet would: each pod's three
// containers (server, Sentinel, keeper) with the chart's own script,
// environment, Secret, ServiceAccount token and Role; the keepers write
// the Service redis's Endpoints and the pods' role labels in the API
// server with curl. Then the master's pod is killed at once (a lost node)
// while a client writes through the address the Service redis would send
// it to: the Sentinels promote a replica, the keeper points the Service
// at it, every write the client had seen replicated (WAIT) is read back,
// and the killed member comes back as a replica of the new master.
//
// What differs from the pods: each member listens on an address of its
// own on this machine (REDIS_BIND, which the chart leaves unset: all
// addresses), its /etc/hosts names the members as the cluster's DNS
// would, and the kubelet is kwok.
func redisFailover(t *testing.T, c *testcluster.Cluster) {
	ctx := context.Background()
	const ns = "onprem"
	sts, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, "redis", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != 3 || len(sts.Spec.Template.Spec.Containers) != 3 {
		t.Fatalf("StatefulSet redis has %d replicas of %d containers, want 3 of 3", *sts.Spec.Replicas, len(sts.Spec.Template.Spec.Containers))
	}
	net3 := rand.IntN(200) + 20
	ips := make([]string, 3)
	var hosts strings.Builder
	hosts.WriteString("127.0.0.1 localhost\n")
	for i := range ips {
		ips[i] = fmt.Sprintf("10.251.%d.%d", net3, i+1)
		testservers.AddAddress(t, ips[i])
		fmt.Fprintf(&hosts, "%s redis-%d.redis-headless.%s\n", ips[i], i, ns)
	}
	hostsFile := filepath.Join(t.TempDir(), "hosts")
	if err := os.WriteFile(hostsFile, []byte(hosts.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	password := string(secretData(t, c.Client, ns, "onprem-redis")["password"])
	pods := make([][]*testservers.Pod, 3)
	var all []*testservers.Pod
	startMember := func(i int) {
		if pods[i] != nil {
			for _, p := range pods[i] {
				p.Start()
			}
			return
		}
		for _, spec := range podContainers(t, c, ns, "redis", fmt.Sprintf("redis-%d", i), ips[i]) {
			spec.Env["REDIS_BIND"] = ips[i]
			spec.Mounts["/etc/hosts"] = hostsFile
			spec.Packages = map[string]string{"redis-server": "/usr/bin/redis-server", "curl": "/usr/bin/curl"}
			p := testservers.StartPod(t, spec)
			pods[i] = append(pods[i], p)
			all = append(all, p)
		}
	}
	// cli runs redis-cli against ip:port with args, or with the commands
	// of stdin when there are none; a reply that is an error is one.
	cli := func(ip string, port int, stdin string, args ...string) (string, error) {
		cmd := exec.Command("redis-cli", append([]string{"-h", ip, "-p", strconv.Itoa(port), "--no-auth-warning", "--raw"}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		if port == 6379 {
			cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+password)
		}
		out, err := cmd.CombinedOutput()
		s := strings.TrimSpace(string(out))
		for _, bad := range []string{"ERR", "NOAUTH", "NOREPLICAS", "READONLY", "LOADING", "Could not connect"} {
			if err == nil && strings.Contains(s, bad) {
				err = fmt.Errorf("%s", s)
			}
		}
		if err != nil {
			return s, fmt.Errorf("redis-cli %s:%d %v: %w: %s", ip, port, args, err, s)
		}
		return s, nil
	}
	// The address the Service redis sends a client to.
	serviceAddress := func() (string, error) {
		ep, err := c.Client.CoreV1().Endpoints(ns).Get(ctx, "redis", metav1.GetOptions{})
		if err != nil {
			return "", err
		}
		for _, s := range ep.Subsets {
			for _, a := range s.Addresses {
				return a.IP, nil
			}
		}
		return "", fmt.Errorf("Endpoints redis has no address")
	}
	roleLabel := func(i int) string {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, fmt.Sprintf("redis-%d", i), metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		return p.Labels["onprem.dev/redis-role"]
	}

	// The members start together (Parallel): member 0 is the first master,
	// whichever process comes up first.
	for i := range ips {
		startMember(i)
	}
	waitFor(t, all, 2*time.Minute, "redis-0 the master behind the Service redis", func() error {
		ip, err := serviceAddress()
		if err != nil {
			return err
		}
		if ip != ips[0] || roleLabel(0) != "master" {
			return fmt.Errorf("Service redis at %s, redis-0 labelled %q", ip, roleLabel(0))
		}
		return nil
	})
	waitFor(t, all, 3*time.Minute, "two replicas in sync and three Sentinels", func() error {
		info, err := cli(ips[0], 6379, "", "info", "replication")
		if err != nil {
			return err
		}
		if !strings.Contains(info, "connected_slaves:2") || strings.Count(info, "state=online") != 2 {
			return fmt.Errorf("master: %s", info)
		}
		for i := range ips {
			m, err := cli(ips[i], 26379, "", "sentinel", "master", "redis")
			if err != nil {
				return fmt.Errorf("Sentinel of redis-%d: %v", i, err)
			}
			if !strings.Contains(m, "num-other-sentinels\n2") || !strings.Contains(m, "num-slaves\n2") {
				return fmt.Errorf("Sentinel of redis-%d does not know every member yet: %s", i, strings.ReplaceAll(m, "\n", " "))
			}
		}
		for i := 1; i < 3; i++ {
			if roleLabel(i) != "replica" {
				return fmt.Errorf("redis-%d labelled %q", i, roleLabel(i))
			}
		}
		return nil
	})

	if top, err := topology.RedisCluster(ctx, c.Client, ns); err != nil || top.Summary() != "primary redis-0; redis-1 replica; redis-2 replica" || !top.Quorum {
		t.Errorf("topology before the loss: %+v (%v)", top, err)
	}

	// A client appends records through the Service's address and counts a
	// write acknowledged once a replica has it too (WAIT: Redis replicates
	// asynchronously; WAIT is how a client knows a write outlives the
	// master).
	w := startWriter(func(id int) error {
		ip, err := serviceAddress()
		if err != nil {
			return err
		}
		out, err := cli(ip, 6379, fmt.Sprintf("RPUSH records %d\nWAIT 1 1000\n", id))
		if err != nil {
			return err
		}
		lines := strings.Fields(out)
		if n, _ := strconv.Atoi(lines[len(lines)-1]); len(lines) != 2 || n < 1 {
			return fmt.Errorf("no replica acknowledged write %d", id)
		}
		return nil
	})
	ackedNow := func() int {
		n, _ := w.Acked()
		return n
	}
	waitFor(t, all, time.Minute, "30 records written", func() error {
		if n := ackedNow(); n < 30 {
			return fmt.Errorf("%d records", n)
		}
		return nil
	})

	killed := time.Now()
	for _, p := range pods[0] {
		p.Kill()
	}
	before := ackedNow()
	var newMaster string
	left := append(append([]*testservers.Pod(nil), pods[1]...), pods[2]...)
	waitFor(t, left, 2*time.Minute, "a new master behind the Service that takes writes", func() error {
		ip, err := serviceAddress()
		if err != nil {
			return err
		}
		if ip == ips[0] {
			return fmt.Errorf("the Service still reaches the lost master")
		}
		if n := ackedNow(); n <= before {
			return fmt.Errorf("no write acknowledged since the kill (%d)", n)
		}
		newMaster = ip
		return nil
	})
	serving := time.Since(killed)
	want, failures, lastFail := w.Stop()
	t.Logf("master redis-0 killed: %s promoted and behind the Service; writes acknowledged again after %s; %d writes failed meanwhile, the last %s after the kill",
		newMaster, serving.Round(100*time.Millisecond), failures, lastFail.Sub(killed).Round(100*time.Millisecond))

	// status names the new master (kwok still calls the killed pod ready,
	// and its keeper cannot relabel it: it stays "master" beside the new
	// one, and the Service's Endpoints tell them apart).
	waitFor(t, left, 30*time.Second, "topology naming the new master", func() error {
		top, err := topology.RedisCluster(ctx, c.Client, ns)
		if err != nil {
			return err
		}
		if top.Primary == "" || top.Primary == "redis-0" {
			return fmt.Errorf("topology: %s", top.Summary())
		}
		return nil
	})

	out, err := cli(newMaster, 6379, "", "lrange", "records", "0", "-1")
	if err != nil {
		t.Fatal(err)
	}
	have := map[int]bool{}
	for _, f := range strings.Fields(out) {
		id, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("record %q", f)
		}
		have[id] = true
	}
	if lost := missing(want, have); len(lost) > 0 {
		t.Fatalf("%d of %d acknowledged writes are not on the new master: %v", len(lost), len(want), lost)
	}
	t.Logf("all %d acknowledged writes read back from the new master %s", len(want), newMaster)

	// The node returns: redis-0 asks the Sentinels for the master and
	// follows it.
	startMember(0)
	waitFor(t, all, 2*time.Minute, "redis-0 back as a replica", func() error {
		role, err := cli(ips[0], 6379, "", "role")
		if err != nil {
			return err
		}
		if !strings.HasPrefix(role, "slave") || roleLabel(0) != "replica" {
			return fmt.Errorf("redis-0: role %q, label %q", strings.ReplaceAll(role, "\n", " "), roleLabel(0))
		}
		if ip, err := serviceAddress(); err != nil || ip != newMaster {
			return fmt.Errorf("Service redis at %s (%v), want %s", ip, err, newMaster)
		}
		return nil
	})
}
