package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/doctor"
	snap "onprem.dev/onprem/installer/snapshot"
	"onprem.dev/onprem/installer/support"
)

// Bad input exits 2 and an unreachable cluster 3, before anything is
// written; analyze reads a bundle offline and exits 1 on an error finding.
func TestSupportCommands(t *testing.T) {
	dir := t.TempDir()
	kc := goneKubeconfig(t, dir)
	notBundle := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notBundle, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"doctor", "--kubeconfig", kc}, exitCluster, kc},
		{[]string{"support-bundle", "--kubeconfig", kc}, exitCluster, kc},
		{[]string{"doctor", "-o", "xml"}, exitInput, "xml"},
		{[]string{"support-bundle", "-o", "a.tar.gz", "--file", "b.tar.gz"}, exitInput, "give the bundle's file once"},
		{[]string{"support-bundle", "analyze", notBundle}, exitInput, "not a support bundle"},
		{[]string{"support-bundle", "analyze", filepath.Join(dir, "missing.tar.gz")}, exitInput, "missing.tar.gz"},
		{[]string{"support-bundle", "analyze"}, exitInput, "name one support bundle file"},
	} {
		code, stdout, stderr := cli(t, dir, c.args...)
		if code != c.code || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d (want %d), stdout %q, stderr %s", c.args, code, c.code, stdout, stderr)
		}
	}
	if entries, _ := filepath.Glob(filepath.Join(dir, "*.tar.gz*")); len(entries) != 0 {
		t.Errorf("files left: %v", entries)
	}

	s := &snap.Snapshot{Meta: snap.Meta{Onprem: "0.1.0", CollectedAt: time.Now(), Namespace: "onprem", Namespaces: []string{"onprem"}},
		Namespaces: map[string]*snap.Objects{"onprem": {Pods: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "api-1", Namespace: "onprem", Labels: map[string]string{"onprem.dev/component": "api"}},
			Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.internal:5000/codefresh/api:2.8.0"}}},
			Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull"}}}}}}}}}}
	file := filepath.Join(dir, "b.tar.gz")
	if _, err := support.Write(file, s, doctor.Analyze(s), support.NewRedactor(nil)); err != nil {
		t.Fatal(err)
	}
	code, stdout, _ := cli(t, dir, "support-bundle", "analyze", file)
	if code != exitFailure || !strings.Contains(stdout, "registry.internal:5000/codefresh/api:2.8.0") || !strings.Contains(stdout, "fix:") {
		t.Errorf("analyze: %d\n%s", code, stdout)
	}
	code, stdout, _ = cli(t, dir, "support-bundle", "analyze", file, "-o", "json")
	var rep doctor.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != exitFailure || rep.Findings[0].Analyzer != "image-pull" || rep.Findings[0].Component != "api" {
		t.Errorf("analyze -o json: %d %v %s", code, err, stdout)
	}
	code, stdout, _ = cli(t, dir, "doctor", "--help")
	for _, want := range []string{"image-pull", "node-pressure", "Exit code"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("doctor --help lacks %q", want)
		}
	}
}
