//go:build linux

package platform

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// trafficRate is how many requests a second the client sends through the
// ingress controller while an operation runs.
const trafficRate = 10

// traffic is a client that reads records through the ingress controller
// at trafficRate while an operation runs, alternating between services,
// and counts what failed (an error, a timeout or a status other than 200).
type traffic struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	sent      int
	failed    int
	firstFail time.Time
	lastFail  time.Time
	// lastFailSent is when the last request that failed was sent: every
	// request sent after it succeeded (recordSent). A request sent to an
	// address that no longer answers fails only at its timeout, later.
	lastFailSent time.Time
	examples     []string
	started      time.Time
	// causes: the last failure of each cause (failureCauses).
	causes map[string]time.Time
	// lastExamples: the last five failures.
	lastExamples []string
}

// trafficResult is what the timing file reports for one operation.
type trafficResult struct {
	Operation string
	Sent      int
	Failed    int
	// Window is from the first failure to the last (zero with none).
	Window   time.Duration
	Took     time.Duration
	Examples []string
}

func (r trafficResult) String() string {
	s := fmt.Sprintf("%s: %d requests in %.0f s, %d failed", r.Operation, r.Sent, r.Took.Seconds(), r.Failed)
	if r.Failed > 0 {
		s += fmt.Sprintf(" (interruption window %.1f s)", r.Window.Seconds())
	}
	return s
}

// newTraffic is a traffic that has not started (run starts it); stop ends
// it, or the end of ctx.
func newTraffic(ctx context.Context) (*traffic, context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	return &traffic{cancel: cancel, done: make(chan struct{}), started: time.Now()}, ctx
}

// run calls send(ctx, i) every interval until the traffic stops: each call
// in a goroutine of its own when concurrent (a request that hangs does not
// hold back the next ones), otherwise one after the other. Stopping waits
// for the calls in flight.
func (tr *traffic) run(ctx context.Context, interval time.Duration, concurrent bool, send func(ctx context.Context, i int)) {
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		var wg sync.WaitGroup
		defer wg.Wait()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if !concurrent {
				send(ctx, i)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				send(ctx, i)
			}()
		}
	}()
}

// startTraffic starts reading paths (through the ingress controller, one
// after the other) at trafficRate until stop.
func (e *env) startTraffic(paths ...string) *traffic {
	e.t.Helper()
	tr, ctx := newTraffic(context.Background())
	client := &http.Client{Timeout: 5 * time.Second, Transport: e.client.Transport}
	tr.run(ctx, time.Second/trafficRate, true, func(_ context.Context, i int) {
		path := paths[i%len(paths)]
		tr.record(path, call(client, http.MethodGet, path, "", nil))
	})
	return tr
}

// record counts one request to path, just answered, and, when err is not
// nil, its failure.
func (tr *traffic) record(path string, err error) { tr.recordSent(path, time.Now(), err) }

// recordSent is record for a request sent at sent: a failure's cause is
// dated by when its request was sent.
func (tr *traffic) recordSent(path string, sent time.Time, err error) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.sent++
	if err == nil {
		return
	}
	now := time.Now()
	if tr.failed == 0 {
		tr.firstFail = now
	}
	tr.failed++
	tr.lastFail = now
	if sent.After(tr.lastFailSent) {
		tr.lastFailSent = sent
	}
	if tr.causes == nil {
		tr.causes = map[string]time.Time{}
	}
	for _, c := range failureCauses(path, err) {
		if sent.After(tr.causes[c]) {
			tr.causes[c] = sent
		}
	}
	ex := fmt.Sprintf("%s at +%.1f s: %v", path, now.Sub(tr.started).Seconds(), err)
	if now.Sub(sent) > time.Second {
		ex = fmt.Sprintf("%s sent at +%.1f s, failed at +%.1f s: %v", path, sent.Sub(tr.started).Seconds(), now.Sub(tr.started).Seconds(), err)
	}
	if len(tr.examples) < 5 {
		tr.examples = append(tr.examples, ex)
	}
	// The last ones too: what failed last says what ended the outage.
	if tr.lastExamples = append(tr.lastExamples, ex); len(tr.lastExamples) > 5 {
		tr.lastExamples = tr.lastExamples[1:]
	}
}

// stop ends the traffic, waits for the requests in flight, and returns
// the figures of operation.
func (tr *traffic) stop(operation string) trafficResult {
	tr.cancel()
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	r := trafficResult{Operation: operation, Sent: tr.sent, Failed: tr.failed, Took: time.Since(tr.started), Examples: tr.examples}
	if tr.failed > 0 {
		r.Window = tr.lastFail.Sub(tr.firstFail)
	}
	return r
}

// underTraffic runs op while reading records through the ingress
// controller, records the figures in the timing file, and returns them.
func (e *env) underTraffic(operation string, op func(), paths ...string) trafficResult {
	e.t.Helper()
	tr := e.startTraffic(paths...)
	op()
	r := tr.stop(operation)
	e.timing.traffic = append(e.timing.traffic, r)
	e.t.Logf("traffic through the ingress controller during %s", r)
	for _, ex := range r.Examples {
		e.t.Logf("  failed: %s", ex)
	}
	return r
}

// serviceTemplates returns, for every service Deployment of the platform,
// its generation: a change of its pod template (a roll) raises it.
func (e *env) serviceTemplates(ctx context.Context) map[string]string {
	e.t.Helper()
	deps, err := e.cluster.Client.AppsV1().Deployments(namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component in (api,ui,worker)"})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range deps.Items {
		out[d.Name] = fmt.Sprint(d.Generation)
	}
	return out
}

// failureCauses names what a failed request failed on: the databases a
// service's readiness answer (503) says do not answer, else the request's
// path (the ingress controller or the service did not answer).
func failureCauses(path string, err error) []string {
	msg := err.Error()
	if i := strings.Index(msg, "{"); i >= 0 && strings.Contains(msg, `"deps"`) {
		var h struct {
			Deps map[string]string `json:"deps"`
		}
		if json.Unmarshal([]byte(msg[i:]), &h) == nil {
			var out []string
			for dep, state := range h.Deps {
				if state != "ok" {
					out = append(out, dep)
				}
			}
			if len(out) > 0 {
				sort.Strings(out)
				return out
			}
		}
	}
	if i := strings.Index(path, "/records/"); i >= 0 {
		path = path[:i] + "/records" // one cause for every record's path
	}
	return []string{path}
}

// lastFailures returns the last failure of each cause (when its request
// was sent), sorted by cause.
func (tr *traffic) lastFailures() []causeFailure {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []causeFailure
	for c, at := range tr.causes {
		out = append(out, causeFailure{c, at})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cause < out[j].Cause })
	return out
}

// causeFailure is the last failure of one cause.
type causeFailure struct {
	Cause string
	At    time.Time
}
