package topology

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/podexec"
)

// MongoDB with spec.availability high is a replica set (charts/mongodb)
// whose pods carry MongoDBClusterLabel. MongoDB publishes nothing about
// its members in Kubernetes objects: who is PRIMARY, who follows it and
// how far behind is what the replSetGetStatus command (mongosh's
// rs.status()) answers in a member, from the heartbeats the members
// exchange. The set elects a primary, and acknowledges a majority write,
// only while a majority of its voting members is healthy.
const (
	// MongoDB is the name of the platform's MongoDB StatefulSet and of
	// its container.
	MongoDB = "mongodb"
	// MongoDBClusterLabel selects the members of the replica set.
	MongoDBClusterLabel = "onprem.dev/mongodb-cluster"
	// DefaultMongoDBTimeout bounds one member's answer to replSetGetStatus.
	DefaultMongoDBTimeout = 10 * time.Second
	// DefaultMongoDBHedge is how long a member may take to answer before
	// the next one is asked as well (mongosh alone takes a second or two
	// to start).
	DefaultMongoDBHedge = 3 * time.Second
	// maxMongoDBAnswer bounds what is read of an answer (three members'
	// status is a few KiB).
	maxMongoDBAnswer = 1 << 20
)

// ReplSetStatus is the part of replSetGetStatus's answer read here, as
// mongosh prints it in relaxed Extended JSON (dates as {"$date": ...}).
type ReplSetStatus struct {
	OK     float64 `json:"ok"`
	ErrMsg string  `json:"errmsg,omitempty"`
	Code   int     `json:"code,omitempty"`
	// Set is the replica set's name.
	Set string `json:"set,omitempty"`
	// Date is the answering member's clock.
	Date    EJSONDate `json:"date,omitzero"`
	MyState int       `json:"myState,omitempty"`
	// MajorityVoteCount is how many voting members make a majority
	// (MongoDB 4.4 and later; else half the members plus one).
	MajorityVoteCount  int             `json:"majorityVoteCount,omitempty"`
	VotingMembersCount int             `json:"votingMembersCount,omitempty"`
	Members            []ReplSetMember `json:"members,omitempty"`
}

// ReplSetMember is one member as the answering member sees it.
type ReplSetMember struct {
	ID   int    `json:"_id"`
	Name string `json:"name"`
	// Health is 1 when the member answers heartbeats, 0 when not.
	Health   float64 `json:"health"`
	State    int     `json:"state"`
	StateStr string  `json:"stateStr"`
	// OptimeDate is the time of the last operation the member applied.
	OptimeDate           EJSONDate `json:"optimeDate,omitzero"`
	SyncSourceHost       string    `json:"syncSourceHost,omitempty"`
	LastHeartbeatMessage string    `json:"lastHeartbeatMessage,omitempty"`
	// Self marks the member that answered.
	Self bool `json:"self,omitempty"`
}

// EJSONDate is a date of Extended JSON: {"$date": "2024-08-15T23:06:13.978Z"}
// (relaxed), {"$date": {"$numberLong": "1723763173978"}} (canonical) or
// {"$date": 1723763173978}; a plain RFC 3339 string is read too.
type EJSONDate struct{ time.Time }

// UnmarshalJSON implements json.Unmarshaler.
func (d *EJSONDate) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var wrapped struct {
		Date json.RawMessage `json:"$date"`
	}
	raw := json.RawMessage(b)
	if len(b) > 0 && b[0] == '{' {
		if err := json.Unmarshal(b, &wrapped); err != nil {
			return fmt.Errorf("reading an Extended JSON date: %w", err)
		}
		raw = wrapped.Date
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return fmt.Errorf("reading an Extended JSON date: %w", err)
		}
		d.Time = t.UTC()
		return nil
	}
	var long struct {
		N string `json:"$numberLong"`
	}
	var ms int64
	if err := json.Unmarshal(raw, &long); err == nil && long.N != "" {
		n, err := strconv.ParseInt(long.N, 10, 64)
		if err != nil {
			return fmt.Errorf("reading an Extended JSON date: %w", err)
		}
		ms = n
	} else if err := json.Unmarshal(raw, &ms); err != nil {
		return fmt.Errorf("reading an Extended JSON date from %s: %w", raw, err)
	}
	d.Time = time.UnixMilli(ms).UTC()
	return nil
}

// MarshalJSON implements json.Marshaler: relaxed Extended JSON.
func (d EJSONDate) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{"$date": d.UTC().Format(time.RFC3339Nano)})
}

// MongoDBAnswer is what the replica set said when asked: the answer of
// the first member that gave one (Pod), and why the members asked before
// it did not (Errors, "mongodb-0: ..."). Status is nil when none answered.
type MongoDBAnswer struct {
	Pod    string         `json:"pod,omitempty"`
	Status *ReplSetStatus `json:"status,omitempty"`
	Errors []string       `json:"errors,omitempty"`
}

// MongoDBProbe asks the members of the replica set for its status, with
// Command run by Exec in a member's mongodb container. It only reads.
type MongoDBProbe struct {
	Exec podexec.Executor
	// Command prints replSetGetStatus's answer as relaxed Extended JSON
	// on its standard output (dbdump.ReplSetStatus).
	Command []string
	// Timeout bounds each member's answer (DefaultMongoDBTimeout when
	// zero).
	Timeout time.Duration
	// Hedge is how long a member may take before the next one is asked
	// beside it (DefaultMongoDBHedge when zero).
	Hedge time.Duration
}

// Ask asks the running members among pods (the ready ones first, by name)
// for the set's status and returns the first answer that names a healthy
// primary. Members are asked one after the other, but a member that fails,
// answers without a primary, or has not answered within Hedge, has the
// next one asked beside it: a hung member delays the answer by Hedge, not
// by Timeout. A member cut off from the others sees no primary while the
// others have one: when no answer names a primary, the answer of the first
// member (in the order above) that gave one is kept.
func (p MongoDBProbe) Ask(ctx context.Context, namespace string, pods []corev1.Pod) *MongoDBAnswer {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultMongoDBTimeout
	}
	hedge := p.Hedge
	if hedge <= 0 {
		hedge = DefaultMongoDBHedge
	}
	var running []*corev1.Pod
	for i := range pods {
		if pods[i].DeletionTimestamp == nil && pods[i].Status.Phase == corev1.PodRunning {
			running = append(running, &pods[i])
		}
	}
	slices.SortStableFunc(running, func(a, b *corev1.Pod) int {
		ra, rb := PodReady(a), PodReady(b)
		switch {
		case ra && !rb:
			return -1
		case rb && !ra:
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	out := &MongoDBAnswer{}
	if len(running) == 0 {
		out.Errors = append(out.Errors, "no member's pod is running")
		return out
	}

	type reply struct {
		i   int
		st  *ReplSetStatus
		err error
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel() // the members still asked when one answered
	replies := make(chan reply, len(running))
	asked, waiting := 0, 0
	askNext := func() {
		if asked == len(running) || ctx.Err() != nil {
			return
		}
		i, t := asked, podexec.Target{Namespace: namespace, Pod: running[asked].Name, Container: MongoDB}
		asked++
		waiting++
		go func() {
			st, err := p.askOne(actx, t, timeout)
			replies <- reply{i, st, err}
		}()
	}
	got := make([]*reply, len(running))
	chosen := -1
	askNext()
	timer := time.NewTimer(hedge)
	defer timer.Stop()
	for chosen < 0 && waiting > 0 {
		select {
		case <-timer.C: // one more member beside the others
			askNext()
			timer.Reset(hedge)
		case r := <-replies:
			waiting--
			got[r.i] = &r
			if r.err == nil && r.st.hasPrimary() {
				chosen = r.i // ends the loop
				continue
			}
			askNext()
			timer.Reset(hedge)
		}
	}
	if chosen < 0 {
		for i, r := range got {
			if r != nil && r.err == nil {
				chosen = i
				break
			}
		}
	}
	if chosen >= 0 {
		out.Pod, out.Status = running[chosen].Name, got[chosen].st
	}
	for i, pod := range running {
		switch r := got[i]; {
		case i == chosen:
		case r != nil && r.err != nil:
			out.Errors = append(out.Errors, pod.Name+": "+r.err.Error())
		case r == nil && i < asked:
			out.Errors = append(out.Errors, pod.Name+": no answer yet when "+out.Pod+" answered")
		case r == nil && chosen < 0 && ctx.Err() != nil:
			out.Errors = append(out.Errors, pod.Name+": not asked: "+ctx.Err().Error())
		}
	}
	return out
}

// hasPrimary reports whether the answer names a healthy PRIMARY.
func (st *ReplSetStatus) hasPrimary() bool {
	for _, m := range st.Members {
		if m.Health == 1 && m.StateStr == "PRIMARY" {
			return true
		}
	}
	return false
}

// askOne runs the probe's command in t, bounded by timeout.
func (p MongoDBProbe) askOne(ctx context.Context, t podexec.Target, timeout time.Duration) (*ReplSetStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out limited
	if err := p.Exec.Exec(ctx, t, p.Command, nil, &out); err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("no answer to replSetGetStatus within %s", timeout)
		}
		return nil, fmt.Errorf("asking replSetGetStatus: %w", err)
	}
	if out.over {
		return nil, fmt.Errorf("the answer to replSetGetStatus is larger than %d bytes", maxMongoDBAnswer)
	}
	return ParseReplSetStatus(out.b.Bytes())
}

// ParseReplSetStatus reads replSetGetStatus's answer as mongosh prints it
// (the last line that is a JSON document, so that a warning printed
// before it does not matter). A failed command (ok 0: a member not yet
// in a set, a refused login) is an error with MongoDB's message.
func ParseReplSetStatus(b []byte) (*ReplSetStatus, error) {
	lines := bytes.Split(bytes.TrimSpace(b), []byte("\n"))
	var doc []byte
	for i := len(lines) - 1; i >= 0; i-- {
		if l := bytes.TrimSpace(lines[i]); len(l) > 0 && l[0] == '{' {
			doc = l
			break
		}
	}
	if doc == nil {
		return nil, fmt.Errorf("replSetGetStatus printed no JSON document")
	}
	var st ReplSetStatus
	if err := json.Unmarshal(doc, &st); err != nil {
		return nil, fmt.Errorf("reading replSetGetStatus's answer: %w", err)
	}
	if st.OK != 1 {
		msg := st.ErrMsg
		if msg == "" {
			msg = "no error message"
		}
		return nil, fmt.Errorf("replSetGetStatus failed (code %d): %s", st.Code, msg)
	}
	return &st, nil
}

// limited keeps the first maxMongoDBAnswer bytes written to it.
type limited struct {
	b    bytes.Buffer
	over bool
}

func (l *limited) Write(p []byte) (int, error) {
	if room := maxMongoDBAnswer - l.b.Len(); len(p) > room {
		l.b.Write(p[:max(room, 0)])
		l.over = true
		return len(p), nil
	}
	return l.b.Write(p)
}

// MongoDBCluster reads the platform's MongoDB in namespace: a replica set
// when its pods carry MongoDBClusterLabel, else a single instance
// (Replicated false). The members' roles and lag are what probe hears
// from one of them (nil: not asked); a set none of whose members answers
// has members of unknown role, and Unanswered says why: it is not an
// error of the reading.
func MongoDBCluster(ctx context.Context, c kubernetes.Interface, namespace string, probe *MongoDBProbe) (*Topology, error) {
	sts, pods, err := readMembers(ctx, c, namespace, MongoDB, MongoDBClusterLabel, "MongoDB")
	if err != nil {
		return nil, err
	}
	var answer *MongoDBAnswer
	if members := clusterPods(sts, pods, MongoDBClusterLabel, MongoDB); probe != nil && probe.Exec != nil && members != nil {
		answer = probe.Ask(ctx, namespace, members)
	}
	return MongoDBFromObjects(sts, pods, answer), nil
}

// memberPod is the pod of a replica set member named host:port, its
// configuration's name (mongodb-1.mongodb-headless.<namespace>.svc:27017).
func memberPod(name string) string {
	host := name
	if h, _, ok := strings.Cut(name, "."); ok {
		host = h
	} else if i := strings.LastIndex(name, ":"); i > 0 {
		host = name[:i]
	}
	return host
}

// MongoDBFromObjects is MongoDB's topology from its StatefulSet (nil when
// there is none), the pods of its namespace and the set's answer (nil:
// not asked). A member is PRIMARY or SECONDARY only as a healthy member
// of the answer; its lag is how far its last applied operation trails
// the primary's. Quorum holds when a majority of the set's voting members
// is healthy (PRIMARY or SECONDARY): the set then has, or elects, a
// primary, and majority writes are acknowledged.
func MongoDBFromObjects(sts *appsv1.StatefulSet, pods []corev1.Pod, answer *MongoDBAnswer) *Topology {
	t := &Topology{Engine: MongoDB, Desired: desiredReplicas(sts)}
	members := clusterPods(sts, pods, MongoDBClusterLabel, MongoDB)
	if members == nil {
		return t
	}
	t.Replicated = true
	var st *ReplSetStatus
	switch {
	case answer == nil:
		t.Unanswered = "not asked"
	case answer.Status == nil:
		t.Unanswered = "no member answered replSetGetStatus"
		if len(answer.Errors) > 0 {
			t.Unanswered += " (" + strings.Join(answer.Errors, "; ") + ")"
		}
	default:
		st = answer.Status
	}
	byPod := map[string]*ReplSetMember{}
	var primaryOptime time.Time
	if st != nil {
		for i := range st.Members {
			rm := &st.Members[i]
			byPod[memberPod(rm.Name)] = rm
			if rm.Health == 1 && rm.StateStr == "PRIMARY" && rm.OptimeDate.After(primaryOptime) {
				primaryOptime = rm.OptimeDate.Time
			}
		}
	}
	seen := map[string]bool{}
	add := func(m Member, rm *ReplSetMember) {
		if rm != nil {
			m.State = rm.StateStr
			switch {
			case rm.Health != 1:
				m.Role = RoleUnknown
			case rm.StateStr == "PRIMARY":
				m.Role = RolePrimary
			case rm.StateStr == "SECONDARY":
				m.Role = RoleReplica
			default:
				m.Role = RoleUnknown
			}
			if m.Role == RoleReplica && !primaryOptime.IsZero() && !rm.OptimeDate.IsZero() {
				m.LagSeconds = ptr(max(0, primaryOptime.Sub(rm.OptimeDate.Time).Seconds()))
			}
			if m.Role == RolePrimary && t.Primary == "" {
				t.Primary = m.Name
			}
		} else if st != nil {
			m.Role, m.State = RoleUnknown, "not a member of set "+st.Set
		}
		t.Members = append(t.Members, m)
	}
	for i := range members {
		p := &members[i]
		seen[p.Name] = true
		add(memberOf(p, RoleUnknown), byPod[p.Name])
	}
	if st != nil {
		// Members of the set without a pod (their node is gone and the
		// pod with it): what the set says of them.
		for i := range st.Members {
			rm := &st.Members[i]
			if name := memberPod(rm.Name); !seen[name] {
				seen[name] = true
				add(Member{Name: name, Role: RoleUnknown}, rm)
			}
		}
		healthy, voting := 0, len(st.Members)
		for _, rm := range st.Members {
			if rm.Health == 1 && (rm.StateStr == "PRIMARY" || rm.StateStr == "SECONDARY") {
				healthy++
			}
		}
		if st.VotingMembersCount > 0 {
			voting = st.VotingMembersCount
		}
		majority := st.MajorityVoteCount
		if majority <= 0 {
			majority = voting/2 + 1
		}
		t.Quorum = voting > 0 && healthy >= majority
	}
	return t
}
