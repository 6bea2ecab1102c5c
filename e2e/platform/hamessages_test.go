//go:build linux

package platform

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"onprem.dev/onprem/e2e/refservice"
	"onprem.dev/onprem/installer/podexec"
)

// haQueue is the queue pipelines-api publishes its messages to through
// POST /api/messages (refservice): declared without a type, a quorum queue
// with availability high.
var haQueue = refservice.QueueName("pipelines-api")

// queueInfo is haQueue's Raft members and the one that leads, as
// `rabbitmq-queues quorum_status` tells (which answers only for a quorum
// queue). `rabbitmqctl list_queues` cannot be used: on the kind ring it
// times out ("some queue(s) are unresponsive") while the queue answers.
type queueInfo struct {
	Leader  string
	Members []string
}

// queueLeaderPod is the pod of a RabbitMQ node name
// (rabbit@rabbitmq-1.rabbitmq-headless.onprem.svc.cluster.local).
func queueLeaderPod(leader string) string {
	_, host, ok := strings.Cut(leader, "@")
	if !ok {
		return ""
	}
	pod, _, _ := strings.Cut(host, ".")
	return pod
}

// queue asks a ready RabbitMQ member for haQueue's quorum status; ok is
// false while no member answers or the queue is not a quorum queue there.
func (e *env) queue(ctx context.Context) (q queueInfo, ok bool) {
	return e.queueOff(ctx, "")
}

// queueOff is queue asked only of members off node skipNode (a lost
// node's pods stay ready until the node is NotReady).
func (e *env) queueOff(ctx context.Context, skipNode string) (q queueInfo, ok bool) {
	ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
	for _, p := range e.members(ctx, "rabbitmq") {
		if !podReady(&p) || p.Spec.NodeName == skipNode {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var out bytes.Buffer
		err := ex.Exec(cctx, podexec.Target{Namespace: namespace, Pod: p.Name, Container: "rabbitmq"},
			[]string{"rabbitmq-queues", "--quiet", "quorum_status", haQueue, "--formatter", "json"}, nil, &out)
		cancel()
		if err != nil {
			continue
		}
		var members []struct {
			Node  string `json:"Node Name"`
			State string `json:"Raft State"`
		}
		if json.Unmarshal(out.Bytes(), &members) != nil {
			continue
		}
		for _, m := range members {
			q.Members = append(q.Members, m.Node)
			if m.State == "leader" {
				q.Leader = m.Node
			}
		}
		return q, true
	}
	return queueInfo{}, false
}

// queueLeader is the pod and node of the member leading haQueue.
func (e *env) queueLeader(ctx context.Context) (pod, node string) {
	e.t.Helper()
	q, ok := e.queue(ctx)
	pod = queueLeaderPod(q.Leader)
	for _, p := range e.members(ctx, "rabbitmq") {
		if ok && p.Name == pod {
			return pod, p.Spec.NodeName
		}
	}
	e.t.Fatalf("queue %s: no leader among RabbitMQ's members (listed: %v, %+v)", haQueue, ok, q)
	return "", ""
}

// waitRabbitMQSawLoss waits until every RabbitMQ member off the lost node
// no longer counts the lost member among its running nodes (Erlang's
// distribution notices a peer gone after its tick, 45 to 75 s by
// default). The ring's RabbitMQ is Debian's 3.10.8 on OTP 25: a member
// that boots again while a peer still holds its old connection can hang
// for good in Erlang's global (rabbitmq-server#6034, fixed in 3.10.10 and
// 3.11.1; the release's 3.13 has the fix); it did in one run of three
// when the node was started sooner.
func (e *env) waitRabbitMQSawLoss(ctx context.Context, lostNode string) {
	ex := podexec.Kube{Config: e.cluster.RESTConfig, Client: e.cluster.Client}
	var lost string
	for _, p := range e.members(ctx, "rabbitmq") {
		if p.Spec.NodeName == lostNode {
			lost = p.Name
		}
	}
	if lost == "" {
		return
	}
	start := time.Now()
	waitUntil(e.t, "the RabbitMQ members off node "+lostNode+" to see "+lost+" stopped", 3*time.Minute, func() bool {
		asked := 0
		for _, p := range e.members(ctx, "rabbitmq") {
			if p.Spec.NodeName == lostNode {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			var out bytes.Buffer
			err := ex.Exec(cctx, podexec.Target{Namespace: namespace, Pod: p.Name, Container: "rabbitmq"},
				[]string{"rabbitmqctl", "--quiet", "eval", "[atom_to_list(N) || N <- nodes()]."}, nil, &out)
			cancel()
			if err != nil {
				return false
			}
			if strings.Contains(out.String(), "@"+lost+".") {
				return false
			}
			asked++
		}
		return asked > 0
	})
	e.t.Logf("rabbitmq: the members off node %s saw %s stopped %.1f s after the wait began", lostNode, lost, time.Since(start).Seconds())
}

// checkQuorumQueue publishes a first message through the ingress
// controller and checks that pipelines-api's queue is a quorum queue with
// a member on each node; then takes the message back.
func (e *env) checkQuorumQueue(ctx context.Context) {
	t := e.t
	e.request(http.MethodPost, "/api/messages", "the first message", http.StatusOK)
	var q queueInfo
	waitUntil(t, "queue "+haQueue+" a quorum queue with three members", time.Minute, func() bool {
		var ok bool
		q, ok = e.queue(ctx)
		return ok && len(q.Members) == haWorkers && q.Leader != ""
	})
	t.Logf("queue %s: a quorum queue, leader %s, members %v", haQueue, q.Leader, q.Members)
	if got := e.takeMessages(); len(got) != 1 || got[0] != "the first message" {
		t.Fatalf("messages taken back from %s: %q, want the first message", haQueue, got)
	}
}

// publishRate is how many messages a second are published during a loss:
// each is a new AMQP connection and a quorum queue write on every node, so
// few enough that the test itself does not starve the ring's 2-core
// machine.
const publishRate = 2

// publishes publishes messages through the ingress controller
// (pipelines-api, POST /api/messages) at publishRate, remembering each
// one the broker confirmed.
type publishes struct {
	*traffic
	mu        sync.Mutex
	confirmed []string
}

func (e *env) startPublishing(tag string) *publishes {
	tr, ctx := newTraffic(context.Background())
	p := &publishes{traffic: tr}
	p.run(ctx, time.Second/publishRate, true, func(_ context.Context, i int) {
		msg := fmt.Sprintf("published while %s lost a node, message %d", tag, i)
		sent := time.Now()
		err := call(e.client, http.MethodPost, "/api/messages", msg, nil)
		p.recordSent("/api/messages (publish)", sent, err)
		if err == nil {
			p.mu.Lock()
			p.confirmed = append(p.confirmed, msg)
			p.mu.Unlock()
		}
	})
	return p
}

// stop ends the publishing and returns the confirmed messages.
func (p *publishes) stop(operation string) ([]string, trafficResult) {
	r := p.traffic.stop(operation)
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.confirmed...), r
}

// takeMessages takes every message queued in haQueue through the ingress
// controller, asking again while RabbitMQ does not answer (keeping what a
// partial answer took).
func (e *env) takeMessages() []string {
	t := e.t
	var taken []string
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, err := http.NewRequest(http.MethodGet, "https://"+domain+"/api/messages", nil)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Taken []string `json:"taken"`
			Error string   `json:"error"`
		}
		resp, err := e.client.Do(req)
		if err == nil {
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			err = json.Unmarshal(data, &got)
			taken = append(taken, got.Taken...)
			if err == nil && resp.StatusCode == http.StatusOK {
				return taken
			}
			if err == nil {
				err = fmt.Errorf("status %d: %s", resp.StatusCode, got.Error)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("taking the messages of %s: %v", haQueue, err)
		}
		time.Sleep(2 * time.Second)
	}
}

// checkPublished takes every queued message and checks that each
// confirmed one is among them.
func (e *env) checkPublished(confirmed []string) {
	t := e.t
	taken := e.takeMessages()
	have := make(map[string]bool, len(taken))
	for _, m := range taken {
		have[m] = true
	}
	var lost []string
	for _, m := range confirmed {
		if !have[m] {
			lost = append(lost, m)
		}
	}
	if len(lost) > 0 {
		t.Fatalf("%d of %d messages RabbitMQ confirmed are lost, e.g. %q", len(lost), len(confirmed), lost[0])
	}
	t.Logf("%d message(s) RabbitMQ confirmed taken back from %s (%d in the queue)", len(confirmed), haQueue, len(taken))
}
