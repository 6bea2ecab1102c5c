package snapshot

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/preflight"
)

func sampleSnapshot() *Snapshot {
	at := time.Date(2026, 11, 28, 5, 0, 0, 0, time.UTC)
	return &Snapshot{
		Meta: Meta{Onprem: "v1.0.0", CollectedAt: at, Server: "https://10.0.0.1:6443", Namespace: "platform",
			Namespaces: []string{"platform", "runner"}, Collectors: []CollectorResult{{Name: "objects", Duration: time.Second, Items: 3, Skipped: []string{"leases: forbidden"}}},
			Limits: LogLimits{Lines: 200, Age: time.Hour, Bytes: 1024}},
		Config: []byte("apiVersion: onprem.dev/v1alpha1\nkind: Installation\n"),
		State:  &state.State{Installation: "acme", Namespace: "platform", Version: "1.2.3"},
		Releases: []Release{{Namespace: "platform", Name: "pipelines", Revisions: []Revision{
			{Revision: 1, Status: "superseded", Chart: "pipelines", ChartVersion: "1.0.0"},
			{Revision: 2, Status: "deployed", Chart: "pipelines", ChartVersion: "1.1.0", Deployed: at, Values: json.RawMessage(`{"replicas":2}`)}}}},
		Namespaces: map[string]*Objects{
			"runner": {Pods: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "agent-0", Namespace: "runner"}}}},
			"platform": {
				Pods:    []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "api-0", Namespace: "platform"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}},
				Secrets: []SecretInfo{{Name: "onprem-api-mongodb", Type: "Opaque", Keys: []string{"database", "password"}, Created: at}},
			},
		},
		Cluster: ClusterObjects{Nodes: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}}},
		Logs: []Log{
			{Namespace: "platform", Pod: "api-0", Container: "api", Text: "started\n"},
			{Namespace: "platform", Pod: "api-0", Container: "api", Previous: true, Text: "panic: boom\n"},
			{Namespace: "platform", Pod: "gone-0", Container: "x", Error: "pods \"gone-0\" not found"},
		},
		Health:      []Health{{Namespace: "platform", Service: "api", Path: "/readyz", Answered: true, Ready: true, Deps: map[string]string{"mongodb": "ok"}}},
		Preflight:   &preflight.Report{Skipped: []string{"dns"}},
		Attachments: &Attachments{Problems: []string{"runtime rt: unreachable"}},
		Drift:       []Drift{{Component: "pipelines", Objects: []string{"Deployment/api image"}}},
	}
}

func filesByPath(t *testing.T, s *Snapshot) ([]File, map[string][]byte) {
	t.Helper()
	files, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	m := map[string][]byte{}
	for _, f := range files {
		if _, dup := m[f.Path]; dup {
			t.Fatalf("two files at %s", f.Path)
		}
		if f.Describe == "" {
			t.Errorf("%s has no description", f.Path)
		}
		m[f.Path] = f.Data
	}
	return files, m
}

// What Files writes, FromFiles reads back to the same snapshot: written
// again it gives the same files, byte for byte.
func TestFilesRoundTrip(t *testing.T) {
	s := sampleSnapshot()
	files, m := filesByPath(t, s)
	back, err := FromFiles(m)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := filesByPath(t, back)
	if len(again) != len(files) {
		t.Fatalf("written again: %d files, first time %d", len(again), len(files))
	}
	for i := range files {
		if again[i].Path != files[i].Path || string(again[i].Data) != string(files[i].Data) {
			t.Errorf("file %d: %s differs after a round trip:\n%s\n---\n%s", i, files[i].Path, files[i].Data, again[i].Data)
		}
	}
	if !reflect.DeepEqual(back.Meta, s.Meta) {
		t.Errorf("meta read back %+v, want %+v", back.Meta, s.Meta)
	}
	if string(back.Config) != string(s.Config) || back.State.Version != "1.2.3" {
		t.Errorf("config %q / state %+v", back.Config, back.State)
	}
	if l := back.LogOf("platform", "api-0", "api", true); l == nil || l.Text != "panic: boom\n" {
		t.Errorf("previous log read back: %+v", l)
	}
	if l := back.LogOf("platform", "gone-0", "x", false); l == nil || l.Error == "" || l.Text != "" {
		t.Errorf("missing log read back: %+v", l)
	}
	if got := back.Objects("platform").Secrets; len(got) != 1 || got[0].Name != "onprem-api-mongodb" {
		t.Errorf("secrets read back: %+v", got)
	}
	if got := back.Objects("runner").Pods; len(got) != 1 || got[0].Name != "agent-0" {
		t.Errorf("runner pods read back: %+v", got)
	}
	if got := back.Collector("objects"); got == nil || got.Items != 3 {
		t.Errorf("collector read back: %+v", got)
	}
}

// The layout: meta first, one file per kind of each namespace (only the
// kinds it has), logs under logs/<ns>/<pod>/, no file for a log that
// could not be read, and the optional parts only when present.
func TestFilesLayout(t *testing.T) {
	files, m := filesByPath(t, sampleSnapshot())
	if files[0].Path != FileMeta {
		t.Errorf("first file %s, want %s", files[0].Path, FileMeta)
	}
	for _, p := range []string{FileConfig, FileState, FileReleases, FilePreflight, FileAttachments, FileDrift, FileLogIndex,
		"namespaces/platform/pods.json", "namespaces/platform/secrets.json", "namespaces/runner/pods.json",
		"cluster/nodes.json", "logs/platform/api-0/api.log", "logs/platform/api-0/api.previous.log"} {
		if _, ok := m[p]; !ok {
			t.Errorf("no file %s", p)
		}
	}
	for _, p := range []string{"namespaces/runner/secrets.json", "namespaces/platform/deployments.json", "logs/platform/gone-0/x.log"} {
		if _, ok := m[p]; ok {
			t.Errorf("unexpected file %s", p)
		}
	}
	if string(m["logs/platform/api-0/api.log"]) != "started\n" {
		t.Errorf("log file holds %q", m["logs/platform/api-0/api.log"])
	}
	var platformAt, runnerAt int
	for i, f := range files {
		switch f.Path {
		case "namespaces/platform/pods.json":
			platformAt = i
		case "namespaces/runner/pods.json":
			runnerAt = i
		case "namespaces/platform/secrets.json":
			if !strings.Contains(f.Describe, "never a value") {
				t.Errorf("the Secrets' file does not say it holds no value: %q", f.Describe)
			}
		}
	}
	if platformAt > runnerAt {
		t.Error("namespaces are not written in sorted order")
	}

	// A bare snapshot has none of the optional files.
	_, bare := filesByPath(t, &Snapshot{Meta: Meta{Namespace: "platform"}})
	for _, p := range []string{FileConfig, FileState, FilePreflight, FileAttachments, FileDrift} {
		if _, ok := bare[p]; ok {
			t.Errorf("a bare snapshot has %s", p)
		}
	}
	back, err := FromFiles(bare)
	if err != nil {
		t.Fatal(err)
	}
	if back.State != nil || back.Preflight != nil || back.Attachments != nil || back.Config != nil {
		t.Errorf("a bare snapshot read back with optional parts: %+v", back)
	}
}

func TestFromFilesRefusals(t *testing.T) {
	_, good := filesByPath(t, sampleSnapshot())
	if _, err := FromFiles(map[string][]byte{FileState: good[FileState]}); err == nil || !strings.Contains(err.Error(), FileMeta) {
		t.Errorf("without %s: %v", FileMeta, err)
	}
	for _, p := range []string{FileMeta, FileState, FileReleases, "namespaces/platform/pods.json", FileLogIndex} {
		bad := map[string][]byte{}
		for k, v := range good {
			bad[k] = v
		}
		bad[p] = []byte("{not json")
		_, err := FromFiles(bad)
		if err == nil || !strings.Contains(err.Error(), p+": ") {
			t.Errorf("a broken %s: %v, want an error naming it", p, err)
		}
	}
	// Files it does not know are ignored, nested ones under namespaces too.
	extra := map[string][]byte{"README.txt": []byte("hello"), "namespaces/platform/sub/pods.json": []byte("{broken"), "namespaces/platform/notes.txt": []byte("x")}
	for k, v := range good {
		extra[k] = v
	}
	if _, err := FromFiles(extra); err != nil {
		t.Errorf("unknown files were not ignored: %v", err)
	}
}

func TestLogPath(t *testing.T) {
	if got := LogPath(Log{Namespace: "ns", Pod: "p", Container: "c"}); got != "logs/ns/p/c.log" {
		t.Errorf("LogPath = %s", got)
	}
	if got := LogPath(Log{Namespace: "ns", Pod: "p", Container: "c", Previous: true}); got != "logs/ns/p/c.previous.log" {
		t.Errorf("LogPath of a previous run = %s", got)
	}
}

func TestReleaseLast(t *testing.T) {
	if (Release{}).Last() != nil {
		t.Error("Last of no revision is not nil")
	}
	r := Release{Revisions: []Revision{{Revision: 1}, {Revision: 4}}}
	if r.Last().Revision != 4 {
		t.Errorf("Last = %d", r.Last().Revision)
	}
}
