package support

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/installer/snapshot"
	"onprem.dev/onprem/installer/state"
)

// Secret shapes are redacted whatever their value; what only looks like
// a key (a Secret's name, JSON literals) stays, and JSON stays JSON.
func TestRedactorShapes(t *testing.T) {
	r := NewRedactor([][]byte{[]byte("generatedValue123456")})
	for _, c := range []struct{ in, gone, kept string }{
		{"db password=hunter2hunter2 ok", "hunter2hunter2", "ok"},
		{`{"token": "abcd.efgh.ijkl", "n": 1}`, "abcd.efgh.ijkl", `"n": 1`},
		{"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig", "eyJhbGciOiJIUzI1NiJ9", "Authorization"},
		{"mongodb://root:s3cr3tpw@mongodb:27017/admin", "s3cr3tpw", "mongodb:27017/admin"},
		{"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\nabc\n-----END RSA PRIVATE KEY-----\nafter", "MIIEowIBAAKCAQEA", "after"},
		{"API_KEY: sk-live-1234567890", "sk-live-1234567890", "API_KEY"},
		{`"settings": "password=first\napi_token: second99"`, "second99", "settings"},
		{"the value generatedValue123456 and its base64 Z2VuZXJhdGVkVmFsdWUxMjM0NTY=", "Z2VuZXJhdGVkVmFsdWUxMjM0NTY", "its base64"},
		{`{"automountServiceAccountToken": false, "secretName": "onprem-tls"}`, "", `"automountServiceAccountToken": false, "secretName": "onprem-tls"`},
	} {
		got := r.Redact(c.in)
		if (c.gone != "" && strings.Contains(got, c.gone)) || !strings.Contains(got, c.kept) {
			t.Errorf("Redact(%q) = %q", c.in, got)
		}
	}
	if got := r.Redact(`{"a": {"password": "x1y2z3w4"}, "b": [true]}`); !json.Valid([]byte(got)) {
		t.Errorf("JSON broken: %s", got)
	}
}

// Which values of which Secrets are redacted.
func TestSecretValuesChoosesWhatIsSecret(t *testing.T) {
	gen := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "onprem-mongodb", Labels: map[string]string{"onprem.dev/generated": "true"},
		Annotations: map[string]string{"onprem.dev/public-keys": "username"}},
		Data: map[string][]byte{"username": []byte("root"), "password": []byte("pw")}}
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "mine"}, Data: map[string][]byte{"short": []byte("abc"), "long": []byte("abcdefgh"), "tls.crt": []byte("cert-cert-cert")}}
	helm := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.x.v1"}, Type: "helm.sh/release.v1", Data: map[string][]byte{"release": []byte("H4sIAAAAA")}}
	st := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: state.SecretName}, Data: map[string][]byte{"state": []byte(`{"namespace": "onprem"}`)}}
	sa := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ci-token"}, Type: corev1.SecretTypeServiceAccountToken,
		Data: map[string][]byte{"namespace": []byte("onprem"), "token": []byte("eyJhbGciOiJSUzI1NiJ9.x.y")}}
	git := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "onprem-runtime-git", Annotations: map[string]string{"onprem.dev/public-keys": "url,username"}},
		Data: map[string][]byte{"url": []byte("https://git.example.com/config.git"), "username": []byte("onprem"), "password": []byte("ghp_token_value")}}
	argo := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "cluster-prod", Labels: map[string]string{"argocd.argoproj.io/secret-type": "cluster"}},
		Data: map[string][]byte{"name": []byte("production"), "server": []byte("https://10.0.0.1:6443"), "config": []byte(`{"bearerToken":"abc123abc123"}`)}}
	var got []string
	for _, s := range []*corev1.Secret{gen, own, helm, st, sa, git, argo} {
		for _, v := range valuesOf(s) {
			got = append(got, string(v))
		}
	}
	if strings.Join(got, ",") != `pw,abcdefgh,eyJhbGciOiJSUzI1NiJ9.x.y,ghp_token_value,{"bearerToken":"abc123abc123"}` {
		t.Errorf("values = %v", got)
	}
}

func sampleSnapshot() *snapshot.Snapshot {
	return &snapshot.Snapshot{
		Meta:   snapshot.Meta{Onprem: "0.1.0", CollectedAt: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC), Namespace: "onprem", Namespaces: []string{"onprem"}, Collectors: []snapshot.CollectorResult{{Name: "logs", Items: 1, Skipped: []string{"log of onprem/x container c: gone"}}}},
		State:  &state.State{Installation: "ci", Version: "2.8.0", Components: map[string]state.Component{"cfapi": {Chart: "service", ChartVersion: "2.8.0", Revision: 2, Status: "deployed"}}},
		Config: []byte("spec:\n  version: 2.8.0\n  registry:\n    password: hunter2hunter2\n"),
		Namespaces: map[string]*snapshot.Objects{"onprem": {Pods: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "cfapi-1", Namespace: "onprem"}, Status: corev1.PodStatus{Phase: corev1.PodRunning,
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "pull access denied"}}}}}}},
			Secrets: []snapshot.SecretInfo{{Name: "onprem-mongodb", Keys: []string{"password", "username"}}}}},
		Logs: []snapshot.Log{{Namespace: "onprem", Pod: "cfapi-1", Container: "app", Text: "connecting with token=abcdefabcdef\n"}},
	}
}

// A bundle reads back as the snapshot it was written from (redacted), its
// index describes every file, and its findings are those of the analysis.
func TestBundleRoundTrip(t *testing.T) {
	s := sampleSnapshot()
	rep := doctor.Analyze(s)
	file := filepath.Join(t.TempDir(), "b.tar.gz")
	res, err := Write(file, s, rep, NewRedactor(nil))
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != rep.Count(doctor.Error) || res.Errors == 0 || len(res.Skipped) != 1 {
		t.Errorf("result %+v", res)
	}
	files, err := Open(file)
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range files {
		if strings.Contains(string(b), "hunter2hunter2") || strings.Contains(string(b), "abcdefabcdef") {
			t.Errorf("%s holds a secret", p)
		}
	}
	back, err := Read(file)
	if err != nil {
		t.Fatal(err)
	}
	if back.State.Version != "2.8.0" || len(back.Objects("onprem").Pods) != 1 || back.Objects("onprem").Secrets[0].Name != "onprem-mongodb" ||
		back.Logs[0].Text != "connecting with token=<redacted>\n" || !strings.Contains(string(back.Config), "version: 2.8.0") {
		t.Errorf("read back: %+v %+v %q", back.State, back.Logs, back.Config)
	}
	again := doctor.Analyze(back)
	if len(again.Findings) != len(rep.Findings) || again.Findings[0].Title != rep.Findings[0].Title {
		t.Errorf("offline %+v\nlive %+v", again.Findings, rep.Findings)
	}
	if !strings.Contains(string(files[FileSummary]), "not collected: log of onprem/x container c: gone") {
		t.Errorf("summary.txt:\n%s", files[FileSummary])
	}
}

// A failed write leaves nothing that looks like a bundle; a file that is
// not a bundle is refused by name.
func TestBundleFaults(t *testing.T) {
	dir := t.TempDir()
	if _, err := Write(filepath.Join(dir, "missing-dir", "b.tar.gz"), sampleSnapshot(), &doctor.Report{}, NewRedactor(nil)); err == nil {
		t.Error("wrote into a folder that does not exist")
	}
	// The final name is a folder: the rename fails after the write.
	target := filepath.Join(dir, "taken")
	if err := os.MkdirAll(filepath.Join(target, "x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(target, sampleSnapshot(), &doctor.Report{}, NewRedactor(nil)); err == nil {
		t.Error("renamed over a folder")
	}
	if _, err := os.Stat(target + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("partial left: %v", err)
	}
	notBundle := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notBundle, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	var fe *FormatError
	if _, err := Read(notBundle); !errors.As(err, &fe) || !strings.Contains(err.Error(), "not a support bundle") {
		t.Errorf("err = %v", err)
	}
}
