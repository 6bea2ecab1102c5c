//go:build linux

package topology_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
)

// rabbitMQNodeLoss, on the platform installed with spec.availability high
// on a real API server, runs Debian's RabbitMQ as the three pods of the
// rendered StatefulSet would: the chart's own start command (which copies
// the Erlang cookie and creates the platform's user), its environment,
// configuration, plugins and definitions, the ServiceAccount's token and
// the Role the chart grants. The nodes form one cluster through the
// Kubernetes API (peer discovery reads the headless Service's endpoints),
// a queue declared without a type is a quorum queue, and then the node
// that leads it is killed at once (a lost node) while a client publishes
// with confirms through any node, as the Service rabbitmq sends it: the
// queue elects a new leader, publishing resumes, every message whose
// publish was confirmed before or during the kill is consumed afterwards,
// and the killed node rejoins the cluster when it starts again.
//
// What differs from the pods: the three nodes share this machine's
// network, so each listens on an address of its own (AMQP, Erlang
// distribution, the management and metrics listeners), finds its peers'
// names in an Erlang hosts file instead of the cluster's DNS, has its
// epmd and distribution on ports of their own (NAT rules send a peer's
// epmd lookups there), and reaches the API server at its address instead of
// kubernetes.default.svc (a configuration file of this machine's, read
// after the chart's). A killed node's peers see its connections closed at
// once; a node lost to the network is only noticed after Erlang's tick
// (docs/availability.md).
func rabbitMQNodeLoss(t *testing.T, c *testcluster.Cluster) {
	ctx := context.Background()
	const ns, set, queue = "onprem", "rabbitmq", "records"

	sts, err := c.Client.AppsV1().StatefulSets(ns).Get(ctx, set, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *sts.Spec.Replicas != 3 || sts.Spec.PodManagementPolicy != "Parallel" {
		t.Fatalf("StatefulSet rabbitmq: %d replicas, podManagementPolicy %s; want 3, Parallel", *sts.Spec.Replicas, sts.Spec.PodManagementPolicy)
	}

	net3 := rand.IntN(200) + 20 // this run's addresses, apart from a parallel run's
	ips := make([]string, 3)
	names := make([]string, 3) // Erlang node names, as the chart makes them
	var hosts strings.Builder
	for i := range ips {
		ips[i] = fmt.Sprintf("10.253.%d.%d", net3, i+1)
		testservers.AddAddress(t, ips[i])
		host := fmt.Sprintf("%s-%d.%s-headless.%s", set, i, set, ns)
		names[i] = "rabbit@" + host
		fmt.Fprintf(&hosts, "{host, {%s}, [%q]}.\n", strings.ReplaceAll(ips[i], ".", ","), host)
	}
	hosts.WriteString("{lookup, [file, native]}.\n")
	// Each pod has its own epmd (started by its node, on all addresses), as
	// each pod has its own network: here each on a port of its own, since
	// epmd names a node by the part before the @ (rabbit) and refuses a
	// second one. A node asks a peer's epmd at the peer's address and its
	// own epmd port: rules of this machine's NAT send that to the peer's.
	epmds := make([]string, 3)
	for i := range epmds {
		epmds[i] = strconv.Itoa(testservers.FreePort(t))
	}
	iptables := testservers.EnsurePackage(t, "iptables", "/usr/sbin/iptables")
	for j := range ips {
		for k := range ips {
			if j == k {
				continue
			}
			rule := []string{"OUTPUT", "-d", ips[j] + "/32", "-p", "tcp", "--dport", epmds[k], "-j", "DNAT", "--to-destination", ips[j] + ":" + epmds[j]}
			if out, err := exec.Command(iptables, append([]string{"-t", "nat", "-A"}, rule...)...).CombinedOutput(); err != nil {
				t.Fatalf("iptables: %v: %s", err, out)
			}
			t.Cleanup(func() { _ = exec.Command(iptables, append([]string{"-t", "nat", "-D"}, rule...)...).Run() })
		}
	}
	t.Cleanup(func() {
		// An epmd that a command-line tool started outside a pod.
		for _, p := range epmds {
			_ = exec.Command("epmd", "-port", p, "-kill").Run()
		}
	})
	shared := testservers.WriteFiles(t, map[string][]byte{
		"inetrc": []byte(hosts.String()),
		// The image's entrypoint, which the chart's command ends with: what
		// it does before it runs its arguments matters not here.
		"docker-entrypoint.sh": []byte("#!/bin/sh\nexec \"$@\"\n"),
	}, 0o755)
	apiHost, apiPort, err := net.SplitHostPort(strings.TrimPrefix(c.RESTConfig.Host, "https://"))
	if err != nil {
		t.Fatal(err)
	}

	members := make([]*testservers.Pod, 3)
	data := make([]string, 3)
	for i := range members {
		spec := podSpec(t, c, ns, set, fmt.Sprintf("%s-%d", set, i), ips[i])
		if _, ok := spec.Mounts["/etc/rabbitmq/conf.d"]; !ok {
			t.Fatalf("the pod mounts no configuration in /etc/rabbitmq/conf.d: %v", spec.Mounts)
		}
		machine := fmt.Sprintf("cluster_formation.k8s.host = %s\ncluster_formation.k8s.port = %s\n"+
			"management.tcp.ip = %s\nprometheus.tcp.ip = %s\n", apiHost, apiPort, ips[i], ips[i])
		if err := os.WriteFile(filepath.Join(spec.Mounts["/etc/rabbitmq/conf.d"], "99-this-machine.conf"), []byte(machine), 0o444); err != nil {
			t.Fatal(err)
		}
		// This machine's /etc/rabbitmq is not the image's.
		spec.Mounts["/etc/rabbitmq"] = testservers.EmptyDir(t)
		// The entrypoint and the hosts file, where the pod's /tmp does not
		// hide them.
		spec.Mounts["/opt/this-machine"] = shared
		spec.Env["PATH"] = "/opt/this-machine:/usr/lib/rabbitmq/bin:" + spec.Env["PATH"]
		spec.Env["HOME"] = "/var/lib/rabbitmq" // the image's rabbitmq user
		spec.Env["ERL_INETRC"] = "/opt/this-machine/inetrc"
		spec.Env["ERL_EPMD_PORT"] = epmds[i]
		spec.Env["RABBITMQ_NODE_IP_ADDRESS"] = ips[i]
		// RabbitMQ checks its distribution port on every address: each
		// node a port of its own (its epmd tells its peers which).
		spec.Env["RABBITMQ_DIST_PORT"] = strconv.Itoa(25672 + 10*(i+1))
		spec.Env["RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"] = "-kernel inet_dist_use_interface {" + strings.ReplaceAll(ips[i], ".", ",") + "}"
		spec.Packages = map[string]string{"rabbitmq-server": "/usr/lib/rabbitmq/bin/rabbitmq-server"}
		data[i] = spec.Mounts["/var/lib/rabbitmq"]
		members[i] = testservers.StartPod(t, spec)
	}

	// rabbitmqctl as an operator runs it in a pod (kubectl exec), against
	// node i.
	ctl := func(i int, args ...string) ([]byte, error) {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(cctx, "/usr/lib/rabbitmq/bin/rabbitmqctl", args...)
		// As in the pod (its -n and --longnames flags fail to reach the node
		// where this environment does).
		cmd.Env = []string{"RABBITMQ_NODENAME=" + names[i], "RABBITMQ_USE_LONGNAME=true", "HOME=" + data[i], "ERL_INETRC=" + filepath.Join(shared, "inetrc"), "ERL_EPMD_PORT=" + epmds[i],
			"PATH=/usr/lib/rabbitmq/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
			}
		}
		return out, err
	}
	running := func(i int) ([]string, error) {
		out, err := ctl(i, "cluster_status", "--formatter", "json")
		if err != nil {
			return nil, err
		}
		var st struct {
			Running []string `json:"running_nodes"`
		}
		if err := json.Unmarshal(out, &st); err != nil {
			return nil, fmt.Errorf("cluster_status: %w: %s", err, out)
		}
		return st.Running, nil
	}

	secret := secretData(t, c.Client, ns, "onprem-rabbitmq")
	dial := func(ip string) (*amqp.Connection, error) {
		u := url.URL{Scheme: "amqp", User: url.UserPassword(string(secret["username"]), string(secret["password"])), Host: net.JoinHostPort(ip, "5672"), Path: "/"}
		return amqp.DialConfig(u.String(), amqp.Config{Dial: amqp.DefaultDial(2 * time.Second)})
	}

	t0 := time.Now()
	// 30-40 s on an idle machine, over two minutes beside the rest of make test.
	waitFor(t, members, 8*time.Minute, "three nodes in one cluster, the platform's user on each", func() error {
		for i := range members {
			conn, err := dial(ips[i])
			if err != nil {
				return fmt.Errorf("%s: %w", names[i], err)
			}
			conn.Close()
		}
		nodes, err := running(0)
		if err != nil {
			return err
		}
		if len(nodes) != 3 {
			return fmt.Errorf("running nodes: %v", nodes)
		}
		return nil
	})
	t.Logf("three nodes in one cluster %s after their start", time.Since(t0).Round(100*time.Millisecond))

	// A queue declared as the platform's services declare theirs, with no
	// type: the virtual host makes it a quorum queue, which a second
	// declaration as a classic queue finds out.
	conn, err := dial(ips[0])
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	_, err = ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	var ae *amqp.Error
	if !errors.As(err, &ae) || ae.Code != amqp.PreconditionFailed || !strings.Contains(ae.Reason, "x-queue-type") {
		t.Fatalf("declaring queue %s again as a classic queue: %v; want PRECONDITION_FAILED on x-queue-type (it is a quorum queue)", queue, err)
	}
	conn.Close()

	type queueInfo struct {
		Name    string   `json:"name"`
		Type    string   `json:"type"`
		Leader  string   `json:"leader"`
		Members []string `json:"members"`
	}
	info := func(i int) (queueInfo, error) {
		out, err := ctl(i, "list_queues", "name", "type", "leader", "members", "--formatter", "json")
		if err != nil {
			return queueInfo{}, err
		}
		var qs []queueInfo
		if err := json.Unmarshal(out, &qs); err != nil {
			return queueInfo{}, fmt.Errorf("list_queues: %w: %s", err, out)
		}
		for _, q := range qs {
			if q.Name == queue {
				return q, nil
			}
		}
		return queueInfo{}, fmt.Errorf("no queue %s in %s", queue, out)
	}
	var q queueInfo
	waitFor(t, members, time.Minute, "queue records on every node", func() error {
		q, err = info(0)
		if err == nil && (q.Type != "quorum" || len(q.Members) != 3 || q.Leader == "") {
			err = fmt.Errorf("queue %+v", q)
		}
		return err
	})
	t.Logf("queue %s: %s, leader %s, members %v", queue, q.Type, q.Leader, q.Members)

	// The node to lose: the queue's leader.
	lost := -1
	for i, n := range names {
		if n == q.Leader {
			lost = i
		}
	}
	if lost < 0 {
		t.Fatalf("the leader %s is none of %v", q.Leader, names)
	}

	// A client publishes with confirms, noting every confirmed message. It
	// starts on the node that will be lost (the hard case: its connection
	// dies with the node) and reconnects on an error through whichever node
	// the Service gives it (one at random, the lost one too until its
	// endpoint is gone).
	var pubConn *amqp.Connection
	var pubCh *amqp.Channel
	reset := func() {
		if pubConn != nil {
			pubConn.Close()
		}
		pubConn, pubCh = nil, nil
	}
	next := ips[lost]
	w := startWriter(func(id int) error {
		err := func() error {
			if pubCh == nil {
				c, err := dial(next)
				next = ips[rand.IntN(len(ips))]
				if err != nil {
					return err
				}
				pubConn = c
				if pubCh, err = pubConn.Channel(); err != nil {
					return err
				}
				if err := pubCh.Confirm(false); err != nil {
					return err
				}
			}
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			dc, err := pubCh.PublishWithDeferredConfirmWithContext(pctx, "", queue, false, false,
				amqp.Publishing{DeliveryMode: amqp.Persistent, Body: []byte(strconv.Itoa(id))})
			if err != nil {
				return err
			}
			ok, err := dc.WaitContext(pctx)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("message %d not confirmed (nack)", id)
			}
			return nil
		}()
		if err != nil {
			reset()
		}
		return err
	})
	ackedNow := w.Acked
	waitFor(t, members, time.Minute, "30 messages confirmed", func() error {
		if n, _ := ackedNow(); n < 30 {
			return fmt.Errorf("%d messages", n)
		}
		return nil
	})

	survivor := (lost + 1) % 3
	var left []*testservers.Pod
	for i, m := range members {
		if i != lost {
			left = append(left, m)
		}
	}
	killed := time.Now()
	members[lost].Kill()
	var newLeader string
	waitFor(t, left, 2*time.Minute, "a new leader that confirms messages", func() error {
		if _, last := ackedNow(); !last.After(killed) {
			return errors.New("no message confirmed since the kill")
		}
		q, err := info(survivor)
		if err != nil {
			return err
		}
		if q.Leader == "" || q.Leader == names[lost] {
			return fmt.Errorf("leader %q", q.Leader)
		}
		newLeader = q.Leader
		return nil
	})
	_, firstAfter := ackedNow()
	// More messages through the two nodes left, then stop.
	n, _ := ackedNow()
	waitFor(t, left, time.Minute, "20 more messages confirmed", func() error {
		if m, _ := ackedNow(); m < n+20 {
			return fmt.Errorf("%d more", m-n)
		}
		return nil
	})
	want, failed, _ := w.Stop()
	reset()
	t.Logf("node %s (the queue's leader) killed: %s leads; publishes confirmed again %s after the kill; %d publishes failed meanwhile",
		names[lost], newLeader, firstAfter.Sub(killed).Round(100*time.Millisecond), failed)

	// Every confirmed message is in the queue, read through a node left.
	conn, err = dial(ips[survivor])
	if err != nil {
		t.Fatal(err)
	}
	ch, err = conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	have := map[int]bool{}
	for {
		d, ok, err := ch.Get(queue, true)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		id, err := strconv.Atoi(string(d.Body))
		if err != nil {
			t.Fatalf("message %q: %v", d.Body, err)
		}
		have[id] = true
	}
	conn.Close()
	if lost := missing(want, have); len(lost) > 0 {
		t.Fatalf("%d of %d confirmed messages are not in the queue: %v", len(lost), len(want), lost)
	}
	t.Logf("all %d confirmed messages consumed through %s", len(want), names[survivor])

	// The node returns and rejoins the cluster and the queue.
	members[lost].Start()
	waitFor(t, members, 3*time.Minute, names[lost]+" back in the cluster", func() error {
		nodes, err := running(survivor)
		if err != nil {
			return err
		}
		if len(nodes) != 3 {
			return fmt.Errorf("running nodes: %v", nodes)
		}
		return nil
	})
}
