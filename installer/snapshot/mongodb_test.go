package snapshot

import (
	"context"
	"io"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/topology"
)

// answerExec answers replSetGetStatus in mongodb-1 only; mongodb-0
// refuses.
type answerExec struct{ asked []string }

func (a *answerExec) Exec(_ context.Context, t podexec.Target, _ []string, _ io.Reader, stdout io.Writer) error {
	a.asked = append(a.asked, t.Pod)
	if t.Pod != "mongodb-1" {
		return &podexec.ExitError{Target: t, Cmd: "sh", Code: 1, Stderr: "MongoNetworkError: connect ECONNREFUSED 127.0.0.1:27017"}
	}
	_, err := io.WriteString(stdout, `{"set":"onprem","date":{"$date":"2026-11-28T08:00:02.000Z"},"myState":2,"majorityVoteCount":2,"votingMembersCount":3,`+
		`"members":[{"_id":0,"name":"mongodb-0.mongodb-headless.onprem.svc:27017","health":0,"state":8,"stateStr":"(not reachable/healthy)","optimeDate":{"$date":"1970-01-01T00:00:00Z"},"lastHeartbeatMessage":"Error connecting"},`+
		`{"_id":1,"name":"mongodb-1.mongodb-headless.onprem.svc:27017","health":1,"state":2,"stateStr":"SECONDARY","optimeDate":{"$date":"2026-11-28T07:59:59.000Z"},"syncSourceHost":"mongodb-2.mongodb-headless.onprem.svc:27017","self":true},`+
		`{"_id":2,"name":"mongodb-2.mongodb-headless.onprem.svc:27017","health":1,"state":1,"stateStr":"PRIMARY","optimeDate":{"$date":"2026-11-28T08:00:01.000Z"}}],`+
		`"ok":1,"$clusterTime":{"clusterTime":{"$timestamp":{"t":1,"i":1}},"signature":{"hash":{"$binary":{"base64":"c2lnbmF0dXJl","subType":"00"}},"keyId":7}}}`+"\n")
	return err
}

func mongoMember(name string) *corev1.Pod {
	p := readyPod(platformNS, name, "node-1", "100m")
	p.Labels = map[string]string{topology.MongoDBClusterLabel: topology.MongoDB}
	return p
}

func TestCollectMongoDBReplicaSet(t *testing.T) {
	c := cluster(t)
	for _, n := range []string{"mongodb-0", "mongodb-1"} {
		if _, err := c.CoreV1().Pods(platformNS).Create(context.Background(), mongoMember(n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ex := &answerExec{}
	s := collect(t, c, Options{NoLogs: true, MongoDB: &topology.MongoDBProbe{Exec: ex, Command: []string{"sh"}}})
	if !slices.Equal(ex.asked, []string{"mongodb-0", "mongodb-1"}) {
		t.Errorf("asked %v", ex.asked)
	}
	col := s.Collector("mongodb-replica-set")
	if col == nil || col.Items != 3 || len(col.Skipped) != 1 || !strings.HasPrefix(col.Skipped[0], "mongodb-0: asking replSetGetStatus: sh in") {
		t.Fatalf("collector %+v", col)
	}
	if s.MongoDB == nil || s.MongoDB.Pod != "mongodb-1" || len(s.MongoDB.Status.Members) != 3 {
		t.Fatalf("answer %+v", s.MongoDB)
	}

	// Written and read back: the parts read, not the cluster's signature.
	_, byPath := filesByPath(t, s)
	b, ok := byPath[FileMongoDB]
	if !ok || strings.Contains(string(b), "signature") || !strings.Contains(string(b), `"stateStr": "PRIMARY"`) {
		t.Fatalf("%s: %s", FileMongoDB, b)
	}
	back, err := FromFiles(byPath)
	if err != nil {
		t.Fatal(err)
	}
	top := topology.MongoDBFromObjects(nil, back.Objects(platformNS).Pods, back.MongoDB)
	if top.Primary != "mongodb-2" || !top.Quorum || len(top.Members) != 3 {
		t.Fatalf("topology from the files: %+v", top)
	}
	if m := top.Members[1]; m.Name != "mongodb-1" || m.LagSeconds == nil || *m.LagSeconds != 2 {
		t.Errorf("mongodb-1 read back: %+v", m)
	}
}
