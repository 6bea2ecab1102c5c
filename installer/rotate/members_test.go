package rotate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/podexec"
)

// targetsExec records where each command ran and what it read, and fails
// in pod failIn with exit code failCode.
type targetsExec struct {
	ran      []string
	stdins   []string
	failIn   string
	failCode int
}

func (e *targetsExec) Exec(_ context.Context, t podexec.Target, _ []string, stdin io.Reader, _ io.Writer) error {
	in, _ := io.ReadAll(stdin)
	e.ran = append(e.ran, t.Pod+"/"+t.Container)
	e.stdins = append(e.stdins, string(in))
	if t.Pod == e.failIn {
		return &podexec.ExitError{Target: t, Code: e.failCode}
	}
	return nil
}

// Redis's ACL is not replicated: with several members (spec.availability
// high) each running one gets the password added, checked and revoked; a
// member that is not running is left out (it starts with the Secret's
// password), and a failure names the member.
func TestRedisPasswordsReachEveryMember(t *testing.T) {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "redis", Namespace: "onprem", Labels: map[string]string{"onprem.dev/component": "redis"}},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "redis"}}}}
	pod := func(name string, phase corev1.PodPhase) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem", Labels: map[string]string{"app.kubernetes.io/name": "redis"}},
			Status: corev1.PodStatus{Phase: phase}}
	}
	c := fake.NewClientset(sts, pod("redis-2", corev1.PodRunning), pod("redis-0", corev1.PodRunning), pod("redis-1", corev1.PodPending))
	ex := &targetsExec{}
	p := PodLogins{Client: c, Namespace: "onprem", Exec: ex}
	if err := p.AddPassword(context.Background(), []byte("old"), []byte("new")); err != nil {
		t.Fatal(err)
	}
	if want := []string{"redis-0/redis", "redis-2/redis"}; !slices.Equal(ex.ran, want) {
		t.Errorf("added on %v, want %v (running members, by name)", ex.ran, want)
	}
	if ex.stdins[0] != "old\nnew\n" || ex.stdins[1] != "old\nnew\n" {
		t.Errorf("each member reads the passwords: %q", ex.stdins)
	}

	// The file is checked on every member: one that does not hold it yet
	// is "not yet".
	ex = &targetsExec{failIn: "redis-2", failCode: 3}
	p.Exec = ex
	holds, err := p.FileHolds(context.Background(), []byte("new"))
	if err != nil || holds {
		t.Errorf("FileHolds with redis-2 behind: %v %v, want false", holds, err)
	}
	ex = &targetsExec{failIn: "redis-2", failCode: 1}
	p.Exec = ex
	err = p.KeepOnly(context.Background(), []byte("new"))
	var ee *podexec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(err.Error(), "in pod redis-2") || strings.Contains(err.Error(), "new\n") {
		t.Errorf("KeepOnly failing on redis-2: %v", err)
	}
}

// The password-file scripts answer by exit code: 0 the file holds the
// password, 3 another one, 4 there is no file; anything else is a failure.
func TestFileHoldsReadsTheExitCode(t *testing.T) {
	noFile := errors.New("no file")
	for _, tc := range []struct {
		err     error
		holds   bool
		wantErr error
	}{
		{nil, true, nil},
		{fmt.Errorf("in pod redis-0: %w", &podexec.ExitError{Code: 3}), false, nil},
		{&podexec.ExitError{Code: 4}, false, noFile},
	} {
		holds, err := fileHolds(tc.err, noFile)
		if holds != tc.holds || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
			t.Errorf("%v: %v, %v; want %v, %v", tc.err, holds, err, tc.holds, tc.wantErr)
		}
	}
	other := &podexec.ExitError{Code: 1}
	if holds, err := fileHolds(other, noFile); holds || !errors.Is(err, other) {
		t.Errorf("exit 1: %v, %v; want the failure", holds, err)
	}
}
