package rotate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/secrets"
)

// recordingRedis records each call to Redis with the Secret's state at
// that moment; the call numbered failAt fails, and the password file
// lags the Secret by one look.
type recordingRedis struct {
	recordingLogins
	c      kubernetes.Interface
	looked bool
}

func (r *recordingRedis) noteRedis(call string) error {
	s, err := r.c.CoreV1().Secrets("onprem").Get(context.Background(), credentials.Redis, metav1.GetOptions{})
	if err != nil {
		return err
	}
	r.calls = append(r.calls, fmt.Sprintf("%s (Secret: %s, next %q, retire %q)", call, s.Data["password"], s.Data[keyNextPassword], s.Annotations[AnnotationRetire]))
	if len(r.calls) == r.failAt {
		return errors.New("killed with password=" + string(s.Data["password"]))
	}
	return nil
}

func (r *recordingRedis) AddPassword(_ context.Context, current, next []byte) error {
	return r.noteRedis(fmt.Sprintf("add %s beside %s", next, current))
}

func (r *recordingRedis) FileHolds(_ context.Context, pw []byte) (bool, error) {
	if !r.looked {
		r.looked = true
		return false, nil
	}
	return true, r.noteRedis("file holds " + string(pw))
}

func (r *recordingRedis) KeepOnly(_ context.Context, pw []byte) error {
	return r.noteRedis("keep only " + string(pw))
}

// Redis's password: the next one in the Secret before Redis has it; the
// Secret switched after; the old one dropped only once the pod's password
// file holds the new one; a killed run is finished by the next, with the
// same password.
func TestRedisPasswordOrderAndResume(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentials.Redis, Namespace: "onprem",
		Labels: map[string]string{secrets.LabelGenerated: "true"}}, Data: map[string][]byte{"password": []byte("P0")}})
	r := &recordingRedis{c: c}
	r.failAt = 1
	n := 0
	o := CredentialsOptions{Client: c, Namespace: "onprem", Logins: r, Engine: Redis,
		Password: func() ([]byte, error) { n++; return []byte(fmt.Sprintf("P%d", n)), nil }}
	if _, err := Credentials(ctx, o); err == nil || !strings.Contains(err.Error(), "still use the old one") || strings.Contains(err.Error(), "P0") {
		t.Fatalf("a run killed adding the password: %v (and no password in it)", err)
	}
	r.failAt = 4 // keep only
	if _, err := Credentials(ctx, o); err == nil || !strings.Contains(err.Error(), "use the new one") {
		t.Fatalf("a run killed revoking: %v", err)
	}
	r.failAt = 0
	res, err := Credentials(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`add P1 beside P0 (Secret: P0, next "P1", retire "")`,
		`add P1 beside P0 (Secret: P0, next "P1", retire "")`,
		`file holds P1 (Secret: P1, next "", retire "default (previous password)")`,
		`keep only P1 (Secret: P1, next "", retire "default (previous password)")`,
		`file holds P1 (Secret: P1, next "", retire "default (previous password)")`,
		`keep only P1 (Secret: P1, next "", retire "default (previous password)")`,
	}
	if got := strings.Join(r.calls, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
	if len(res.Logins) != 1 || res.Logins[0].Resumed != "revoking" || res.Engine != Redis {
		t.Errorf("result: %+v", res)
	}
	s, _ := c.CoreV1().Secrets("onprem").Get(ctx, credentials.Redis, metav1.GetOptions{})
	if string(s.Data["password"]) != "P1" || s.Data[keyNextPassword] != nil || s.Annotations[AnnotationRetire] != "" || s.Annotations[AnnotationRotatedAt] == "" || n != 1 {
		t.Errorf("the Secret after the rotation: %v %v (passwords made: %d)", s.Data, s.Annotations, n)
	}

	// The operator's own Secret is refused.
	s.Labels = nil
	if _, err := c.CoreV1().Secrets("onprem").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var re *RefusedError
	if _, err := Credentials(ctx, o); !errors.As(err, &re) || !strings.Contains(err.Error(), "onprem-redis") {
		t.Errorf("the operator's Redis Secret: %v", err)
	}
}

// A Secret that cannot be read (the API server failing) is an error to
// retry, not a refusal (exit 2, "fix your input"); a missing one is a
// refusal.
func TestSharedPasswordReadErrors(t *testing.T) {
	ctx := context.Background()
	for _, admin := range []bool{false, true} {
		engine := Redis
		if admin {
			engine = PostgreSQL
		}
		var re *RefusedError
		o := CredentialsOptions{Client: fake.NewClientset(), Namespace: "onprem", Logins: &recordingRedis{}, Engine: engine, Admin: admin}
		if _, err := Credentials(ctx, o); !errors.As(err, &re) || !strings.Contains(err.Error(), "does not exist") {
			t.Errorf("admin %v, no Secret: %v, want a refusal", admin, err)
		}
		c := fake.NewClientset()
		c.PrependReactor("get", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, errors.New("connection refused")
		})
		o.Client = c
		if _, err := Credentials(ctx, o); err == nil || errors.As(err, &re) || !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("admin %v, API failing: %v, want an error that is not a refusal", admin, err)
		}
	}
}

func (r *recordingRedis) AdminFileHolds(_ context.Context, _, _ string, pw []byte) (bool, error) {
	return true, r.noteRedis("admin file holds " + string(pw))
}

func (r *recordingRedis) SetAdminPassword(_ context.Context, _ string, _, next []byte) error {
	return r.noteRedis("set admin password " + string(next))
}
