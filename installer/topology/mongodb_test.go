package topology

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/podexec"
)

// rsMember is one member of a replSetGetStatus answer as mongosh prints
// it in relaxed Extended JSON (MongoDB's documented output form: _id,
// name, health, state, stateStr, uptime, optime, optimeDate,
// lastHeartbeat, pingMs, syncSourceHost, ...).
func rsMember(id int, state string, health int, optime string, self bool) string {
	code := map[string]int{"PRIMARY": 1, "SECONDARY": 2, "RECOVERING": 3, "STARTUP2": 5, "(not reachable/healthy)": 8}[state]
	host := fmt.Sprintf("mongodb-%d.mongodb-headless.onprem.svc:27017", id)
	s := fmt.Sprintf(`{"_id":%d,"name":%q,"health":%d,"state":%d,"stateStr":%q,"uptime":5312,`+
		`"optime":{"ts":{"$timestamp":{"t":1723763173,"i":1}},"t":3},"optimeDate":{"$date":%q},`+
		`"lastAppliedWallTime":{"$date":%q},"syncSourceHost":"","syncSourceId":-1,"infoMessage":"","configVersion":5,"configTerm":3`,
		id, host, health, code, state, optime, optime)
	if self {
		s += `,"self":true,"electionDate":{"$date":"2026-11-28T07:00:00.000Z"}`
	} else {
		s += `,"lastHeartbeat":{"$date":"2026-11-28T08:00:01.500Z"},"lastHeartbeatRecv":{"$date":"2026-11-28T08:00:01.200Z"},"pingMs":0`
		if health == 0 {
			s += `,"lastHeartbeatMessage":"Couldn't get a connection within the time limit"`
		}
	}
	return s + "}"
}

// rsStatus is a whole answer; members are rsMember's.
func rsStatus(members ...string) string {
	return `{"set":"onprem","date":{"$date":"2026-11-28T08:00:02.000Z"},"myState":1,"term":3,` +
		`"syncSourceHost":"","syncSourceId":-1,"heartbeatIntervalMillis":2000,"majorityVoteCount":2,` +
		`"writeMajorityCount":2,"votingMembersCount":3,"writableVotingMembersCount":3,` +
		`"optimes":{"lastCommittedOpTime":{"ts":{"$timestamp":{"t":1723763173,"i":1}},"t":3}},` +
		`"members":[` + strings.Join(members, ",") + `],"ok":1,` +
		`"$clusterTime":{"clusterTime":{"$timestamp":{"t":1723763173,"i":1}},"signature":{"hash":{"$binary":{"base64":"AAAAAAAAAAAAAAAAAAAAAAAAAAA=","subType":"00"}},"keyId":0}},` +
		`"operationTime":{"$timestamp":{"t":1723763173,"i":1}}}`
}

const t0 = "2026-11-28T08:00:00.000Z"

// fakeExec answers the probe's command per pod: a document, or an error.
type fakeExec struct {
	answers map[string]string
	errs    map[string]error
	hang    map[string]bool

	mu    sync.Mutex
	asked []string
}

func (f *fakeExec) Exec(ctx context.Context, t podexec.Target, cmd []string, stdin io.Reader, stdout io.Writer) error {
	f.mu.Lock()
	f.asked = append(f.asked, t.Pod)
	f.mu.Unlock()
	if t.Container != MongoDB || len(cmd) == 0 {
		return fmt.Errorf("unexpected target %s or command %q", t, cmd)
	}
	if f.hang[t.Pod] {
		<-ctx.Done()
		return ctx.Err()
	}
	if err := f.errs[t.Pod]; err != nil {
		return err
	}
	_, err := io.WriteString(stdout, f.answers[t.Pod]+"\n")
	return err
}

func mongoPod(name, node string, ready bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem",
		Labels: map[string]string{MongoDBClusterLabel: MongoDB}}}
	p.Spec.NodeName = node
	p.Status.Phase = corev1.PodRunning
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	return p
}

func mongoSet(replicas int32) *appsv1.StatefulSet {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: MongoDB, Namespace: "onprem"}}
	s.Spec.Replicas = &replicas
	s.Spec.Template.Labels = map[string]string{MongoDBClusterLabel: MongoDB}
	return s
}

func mongoCluster(t *testing.T, ex *fakeExec, ready ...bool) *Topology {
	t.Helper()
	objs := []runtime.Object{mongoSet(3)}
	for i, r := range ready {
		objs = append(objs, mongoPod(fmt.Sprintf("mongodb-%d", i), fmt.Sprintf("n%d", i), r))
	}
	c := fake.NewClientset(objs...)
	top, err := MongoDBCluster(context.Background(), c, "onprem", &MongoDBProbe{Exec: ex, Command: []string{"sh", "-c", "status"}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func memberNamed(top *Topology, name string) Member {
	for _, m := range top.Members {
		if m.Name == name {
			return m
		}
	}
	return Member{}
}

func TestMongoDBClusterHealthy(t *testing.T) {
	doc := rsStatus(rsMember(0, "PRIMARY", 1, t0, true), rsMember(1, "SECONDARY", 1, t0, false), rsMember(2, "SECONDARY", 1, "2026-11-27T07:59:58.500Z", false))
	ex := &fakeExec{answers: map[string]string{"mongodb-0": "Current Mongosh Log ID: 0123\n" + doc}}
	top := mongoCluster(t, ex, true, true, true)
	if !top.Replicated || top.Desired != 3 || top.Primary != "mongodb-0" || !top.Quorum || !top.Healthy() || top.Unanswered != "" {
		t.Fatalf("topology = %+v", top)
	}
	if len(ex.asked) != 1 || ex.asked[0] != "mongodb-0" {
		t.Errorf("asked %v, want mongodb-0 only", ex.asked)
	}
	m0, m1 := memberNamed(top, "mongodb-0"), memberNamed(top, "mongodb-1")
	if m0.Role != RolePrimary || m0.State != "PRIMARY" || m0.Node != "n0" || m0.LagSeconds != nil {
		t.Errorf("primary = %+v", m0)
	}
	if m1.Role != RoleReplica || m1.State != "SECONDARY" || m1.LagSeconds == nil || *m1.LagSeconds != 0 {
		t.Errorf("secondary = %+v", m1)
	}
	// A day and 1.5 s behind (the date is a day older).
	if m2 := memberNamed(top, "mongodb-2"); m2.LagSeconds == nil || *m2.LagSeconds != 86401.5 {
		t.Errorf("lagging secondary = %+v", m2)
	}
	s := top.Summary()
	for _, want := range []string{"primary mongodb-0", "mongodb-1 replica, lag 0 s", "mongodb-2 replica, lag 24h0m2s"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary %q lacks %q", s, want)
		}
	}
}

func TestMongoDBClusterMemberDown(t *testing.T) {
	// mongodb-0 is not ready (its pod does not answer): mongodb-1 is
	// asked, and sees mongodb-0 unreachable.
	doc := rsStatus(rsMember(0, "(not reachable/healthy)", 0, "1970-01-01T00:00:00.000Z", false),
		rsMember(1, "PRIMARY", 1, t0, true), rsMember(2, "SECONDARY", 1, t0, false))
	ex := &fakeExec{answers: map[string]string{"mongodb-1": doc}}
	top := mongoCluster(t, ex, false, true, true)
	if len(ex.asked) != 1 || ex.asked[0] != "mongodb-1" {
		t.Errorf("asked %v, want the ready mongodb-1 first", ex.asked)
	}
	if top.Primary != "mongodb-1" || !top.Quorum || top.Healthy() {
		t.Fatalf("topology = %+v", top)
	}
	if m := memberNamed(top, "mongodb-0"); m.Role != RoleUnknown || m.State != "(not reachable/healthy)" || m.Ready || m.LagSeconds != nil {
		t.Errorf("down member = %+v", m)
	}
	if s := top.Summary(); !strings.Contains(s, "mongodb-0 unknown (not reachable/healthy), not ready") {
		t.Errorf("summary = %q", s)
	}
}

func TestMongoDBClusterNoPrimary(t *testing.T) {
	// An election under way: a majority is healthy but none is primary.
	doc := rsStatus(rsMember(0, "SECONDARY", 1, t0, true), rsMember(1, "SECONDARY", 1, t0, false), rsMember(2, "RECOVERING", 1, t0, false))
	ex := &fakeExec{answers: map[string]string{"mongodb-0": doc, "mongodb-1": doc, "mongodb-2": doc}}
	top := mongoCluster(t, ex, true, true, false)
	// Every running member is asked, in case one sees a primary.
	if strings.Join(ex.asked, ",") != "mongodb-0,mongodb-1,mongodb-2" {
		t.Errorf("asked %v", ex.asked)
	}
	if top.Primary != "" || !top.Quorum || top.Healthy() {
		t.Fatalf("topology = %+v", top)
	}
	// No primary, no lag to measure.
	if m := memberNamed(top, "mongodb-1"); m.Role != RoleReplica || m.LagSeconds != nil {
		t.Errorf("secondary = %+v", m)
	}
	if m := memberNamed(top, "mongodb-2"); m.Role != RoleUnknown || m.State != "RECOVERING" {
		t.Errorf("recovering = %+v", m)
	}
	if s := top.Summary(); !strings.HasPrefix(s, "no primary;") {
		t.Errorf("summary = %q", s)
	}
}

func TestMongoDBClusterNoMajority(t *testing.T) {
	// Two members lost: the one left steps down to SECONDARY and no
	// primary can be elected. The first pod asked fails, the next answers.
	doc := rsStatus(rsMember(0, "(not reachable/healthy)", 0, "1970-01-01T00:00:00.000Z", false),
		rsMember(1, "(not reachable/healthy)", 0, "1970-01-01T00:00:00.000Z", false), rsMember(2, "SECONDARY", 1, t0, true))
	ex := &fakeExec{answers: map[string]string{"mongodb-2": doc},
		errs: map[string]error{"mongodb-1": &podexec.ExitError{Cmd: "sh", Code: 1, Stderr: "MongoNetworkError: connect ECONNREFUSED 127.0.0.1:27017"}}}
	top := mongoCluster(t, ex, false, true, true)
	if top.Primary != "" || top.Quorum || top.Healthy() {
		t.Fatalf("topology = %+v", top)
	}
	// mongodb-2's answer names no primary: the not-ready mongodb-0 is
	// asked too, and fails; mongodb-2's answer is kept.
	if strings.Join(ex.asked, ",") != "mongodb-1,mongodb-2,mongodb-0" {
		t.Errorf("asked %v", ex.asked)
	}
	if s := top.Summary(); !strings.Contains(s, "no primary, no majority of the members healthy") {
		t.Errorf("summary = %q", s)
	}
}

func TestMongoDBClusterUnanswered(t *testing.T) {
	// No member answers (one hangs past the bound, one refuses the login,
	// one is not a member of a set yet): the roles are unknown, the
	// reading itself does not fail.
	ex := &fakeExec{hang: map[string]bool{"mongodb-0": true},
		answers: map[string]string{
			"mongodb-1": `{"ok":0,"code":18,"errmsg":"Authentication failed."}`,
			"mongodb-2": `{"ok":0,"errmsg":"no replset config has been received","code":94,"codeName":"NotYetInitialized"}`,
		}}
	top := mongoCluster(t, ex, true, true, true)
	if !top.Replicated || top.Primary != "" || top.Quorum || len(top.Members) != 3 {
		t.Fatalf("topology = %+v", top)
	}
	for _, want := range []string{"no member answered replSetGetStatus", "mongodb-0: no answer to replSetGetStatus within 1s",
		"mongodb-1: replSetGetStatus failed (code 18): Authentication failed.", "mongodb-2: replSetGetStatus failed (code 94): no replset config"} {
		if !strings.Contains(top.Unanswered, want) {
			t.Errorf("unanswered %q lacks %q", top.Unanswered, want)
		}
	}
	for _, m := range top.Members {
		if m.Role != RoleUnknown || !m.Ready {
			t.Errorf("member = %+v", m)
		}
	}
	if s := top.Summary(); !strings.HasPrefix(s, "roles unknown: no member answered") {
		t.Errorf("summary = %q", s)
	}
}

func TestMongoDBSingleInstance(t *testing.T) {
	// Without high availability the pods carry no cluster label: no one
	// is asked.
	p := mongoPod("mongodb-0", "n0", true)
	p.Labels = map[string]string{"app.kubernetes.io/name": "mongodb"}
	ex := &fakeExec{}
	top, err := MongoDBCluster(context.Background(), fake.NewClientset(p), "onprem", &MongoDBProbe{Exec: ex, Command: []string{"x"}})
	if err != nil || top.Replicated || len(ex.asked) != 0 {
		t.Fatalf("topology = %+v, %v; asked %v", top, err, ex.asked)
	}
}

func TestMongoDBMemberWithoutPod(t *testing.T) {
	// mongodb-2's pod is gone with its node: the set still names it.
	doc := rsStatus(rsMember(0, "PRIMARY", 1, t0, true), rsMember(1, "SECONDARY", 1, t0, false),
		rsMember(2, "(not reachable/healthy)", 0, "1970-01-01T00:00:00.000Z", false))
	top := mongoCluster(t, &fakeExec{answers: map[string]string{"mongodb-0": doc}}, true, true)
	if len(top.Members) != 3 || top.Primary != "mongodb-0" || !top.Quorum || top.Healthy() {
		t.Fatalf("topology = %+v", top)
	}
	if m := memberNamed(top, "mongodb-2"); m.Role != RoleUnknown || m.Ready || m.State != "(not reachable/healthy)" {
		t.Errorf("member without pod = %+v", m)
	}
}

func TestParseReplSetStatus(t *testing.T) {
	for _, tc := range []struct {
		name, in, err string
		when          time.Time
	}{
		{"relaxed", `{"ok":1,"members":[{"name":"a:27017","optimeDate":{"$date":"2026-11-28T08:00:00.250Z"}}]}`, "", time.Date(2026, 11, 28, 8, 0, 0, 250e6, time.UTC)},
		{"canonical", `{"ok":{"$numberDouble":"1"}}`, "cannot unmarshal", time.Time{}},
		{"numberLong", `{"ok":1,"members":[{"name":"a:27017","optimeDate":{"$date":{"$numberLong":"1000"}}}]}`, "", time.UnixMilli(1000).UTC()},
		{"nothing", "Warning: something\n", "printed no JSON document", time.Time{}},
		{"failed", `{"ok":0,"errmsg":"not running with --replSet","code":76}`, "code 76): not running with --replSet", time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := ParseReplSetStatus([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Members[0].OptimeDate.Time; !got.Equal(tc.when) {
				t.Errorf("optimeDate = %v, want %v", got, tc.when)
			}
		})
	}
}

func TestMongoDBProbeOversized(t *testing.T) {
	ex := &fakeExec{answers: map[string]string{"mongodb-0": strings.Repeat("x", maxMongoDBAnswer+10)}}
	a := MongoDBProbe{Exec: ex, Command: []string{"x"}}.Ask(context.Background(), "onprem", []corev1.Pod{*mongoPod("mongodb-0", "n0", true)})
	if a.Status != nil || len(a.Errors) != 1 || !strings.Contains(a.Errors[0], "larger than") {
		t.Fatalf("answer = %+v", a)
	}
}

func TestMongoDBClusterIsolatedMember(t *testing.T) {
	// mongodb-0 is cut off from the others: it sees them unreachable and
	// no primary; mongodb-1, asked next, sees the set the others form.
	isolated := rsStatus(rsMember(0, "SECONDARY", 1, "2026-11-28T07:59:00.000Z", true),
		rsMember(1, "(not reachable/healthy)", 0, "1970-01-01T00:00:00.000Z", false), rsMember(2, "(not reachable/healthy)", 0, "1970-01-01T00:00:00.000Z", false))
	majority := rsStatus(rsMember(0, "(not reachable/healthy)", 0, "1970-01-01T00:00:00.000Z", false),
		rsMember(1, "SECONDARY", 1, t0, true), rsMember(2, "PRIMARY", 1, t0, false))
	ex := &fakeExec{answers: map[string]string{"mongodb-0": isolated, "mongodb-1": majority}}
	top := mongoCluster(t, ex, true, true, true)
	if strings.Join(ex.asked, ",") != "mongodb-0,mongodb-1" || top.Primary != "mongodb-2" || !top.Quorum {
		t.Fatalf("asked %v; topology = %+v", ex.asked, top)
	}
	if m := memberNamed(top, "mongodb-0"); m.Role != RoleUnknown || m.State != "(not reachable/healthy)" {
		t.Errorf("isolated member = %+v", m)
	}
}

func TestMongoDBProbeAsksTheNextBesideAHungMember(t *testing.T) {
	// mongodb-0 hangs (its node is gone, the exec never returns) and the
	// caller gives the whole reading 10 s: one member after the other,
	// mongodb-0 would use them all (its own bound is a minute) and leave
	// the set's roles unknown. mongodb-1 is asked beside it after Hedge.
	doc := rsStatus(rsMember(0, "(not reachable/healthy)", 0, "1970-01-01T00:00:00.000Z", false),
		rsMember(1, "PRIMARY", 1, t0, true), rsMember(2, "SECONDARY", 1, t0, false))
	ex := &fakeExec{hang: map[string]bool{"mongodb-0": true}, answers: map[string]string{"mongodb-1": doc, "mongodb-2": doc}}
	pods := []corev1.Pod{*mongoPod("mongodb-0", "n0", true), *mongoPod("mongodb-1", "n1", true), *mongoPod("mongodb-2", "n2", true)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a := MongoDBProbe{Exec: ex, Command: []string{"x"}, Timeout: time.Minute, Hedge: 2 * time.Second}.Ask(ctx, "onprem", pods)
	if a.Pod != "mongodb-1" || a.Status == nil || !a.Status.hasPrimary() {
		t.Fatalf("answer = %+v", a)
	}
	if len(a.Errors) != 1 || a.Errors[0] != "mongodb-0: no answer yet when mongodb-1 answered" {
		t.Errorf("errors = %q", a.Errors)
	}
	ex.mu.Lock()
	defer ex.mu.Unlock()
	if strings.Join(ex.asked, ",") != "mongodb-0,mongodb-1" {
		t.Errorf("asked %v: mongodb-2 is asked only when mongodb-1 does not answer", ex.asked)
	}
}
