package rotate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/secrets"
)

// readerOf is a rolled-out workload whose pods read the Secrets names.
func readerOf(kind, name string, names ...string) runtime.Object {
	var env []corev1.EnvVar
	for _, n := range names {
		env = append(env, corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: n}, Key: "password"}}})
	}
	one := int32(1)
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}
	tpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: env}}}}
	if kind == "StatefulSet" {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem"},
			Spec:   appsv1.StatefulSetSpec{Replicas: &one, Selector: sel, Template: tpl},
			Status: appsv1.StatefulSetStatus{UpdatedReplicas: 1, ReadyReplicas: 1}}
	}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem"},
		Spec:   appsv1.DeploymentSpec{Replicas: &one, Selector: sel, Template: tpl},
		Status: appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}}
}

// Several engines rotated together restart each service once: every
// engine's Secrets switch first (the databases accepting old and new),
// then the workloads roll, once each, then every engine revokes. The
// databases' own StatefulSets are not restarted.
func TestCredentialsAllRestartsOnce(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(serviceSecret("audit-manager", "audit_manager"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentials.Redis, Namespace: "onprem",
			Labels: map[string]string{secrets.LabelGenerated: "true"}}, Data: map[string][]byte{"password": []byte("P0")}},
		readerOf("Deployment", "audit-manager", "onprem-audit-manager-postgresql", credentials.Redis),
		readerOf("Deployment", "pipelines-api", credentials.Redis),
		readerOf("StatefulSet", "redis", credentials.Redis))
	r := &recordingRedis{c: c, recordingLogins: recordingLogins{c: c}}
	c.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		r.calls = append(r.calls, "restart "+p.GetResource().Resource+"/"+p.GetName())
		return false, nil, nil
	})
	n := 0
	pw := func() ([]byte, error) { n++; return []byte(fmt.Sprintf("P%d", n)), nil }
	opts := []CredentialsOptions{
		{Client: c, Namespace: "onprem", Logins: r, Engine: PostgreSQL, Password: pw},
		{Client: c, Namespace: "onprem", Logins: r, Engine: Redis, Password: pw},
	}
	dry := []CredentialsOptions{opts[0], opts[1]}
	dry[0].DryRun, dry[1].DryRun = true, true
	res, err := CredentialsAll(ctx, dry)
	if err != nil || len(res) != 2 || len(r.calls) != 0 || n != 0 {
		t.Fatalf("dry run: %+v, %v, calls %v, passwords made %d", res, err, r.calls, n)
	}
	if got := strings.Join(res[1].Restarted, ","); got != "Deployment/audit-manager,Deployment/pipelines-api" {
		t.Errorf("the dry run would restart %s for Redis", got)
	}

	r.looked = true
	res, err = CredentialsAll(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, call := range r.calls {
		got = append(got, strings.SplitN(call, " (Secret", 2)[0])
	}
	want := []string{
		"grant audit_manager_2 owner audit_manager db audit_manager",
		"add P2 beside P0",
		"restart deployments/audit-manager",
		"restart deployments/pipelines-api",
		"revoke audit_manager",
		"file holds P2",
		"keep only P2",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if len(res) != 2 || res[0].Engine != PostgreSQL || res[1].Engine != Redis || len(res[0].Restarted) != 1 || len(res[1].Restarted) != 2 {
		t.Errorf("results: %+v", res)
	}
}

// recordingAdmins records MongoDB admin calls with the Secret's user at
// that moment; the call numbered failAt fails; the mount lags by one look.
type recordingAdmins struct {
	recordingRedis
}

func (r *recordingAdmins) noteAdmin(call string) error {
	s, err := r.c.CoreV1().Secrets("onprem").Get(context.Background(), credentials.MongoDBAdmin, metav1.GetOptions{})
	if err != nil {
		return err
	}
	r.calls = append(r.calls, fmt.Sprintf("%s (Secret: %s, next %q, retire %q)", call, s.Data["username"], s.Data[keyNextUsername], s.Annotations[AnnotationRetire]))
	if len(r.calls) == r.failAt {
		return fmt.Errorf("killed with password=%s", s.Data[keyNextPassword])
	}
	return nil
}

func (r *recordingAdmins) GrantAdmin(_ context.Context, _ string, l Login) error {
	return r.noteAdmin("grant " + l.Username + " " + string(l.Password))
}

func (r *recordingAdmins) RevokeAdmin(_ context.Context, _, username string) error {
	return r.noteAdmin("revoke " + username)
}

func (r *recordingAdmins) AdminFileHolds(_ context.Context, _, key string, pw []byte) (bool, error) {
	if key == "username" {
		return true, nil
	}
	if !r.looked {
		r.looked = true
		return false, nil
	}
	return true, r.noteAdmin("mounted " + string(pw))
}

// MongoDB's admin alternates between two users: the next one is in the
// Secret before the database has it; the Secret switches after the grant;
// the old user is dropped only once the pod's mount holds the new one; a
// killed run is finished by the next with the same user and password.
func TestMongoDBAdminOrderAndResume(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentials.MongoDBAdmin, Namespace: "onprem",
		Labels: map[string]string{secrets.LabelGenerated: "true"}}, Data: map[string][]byte{"username": []byte("root"), "password": []byte("P0")}})
	r := &recordingAdmins{recordingRedis{c: c}}
	r.failAt = 1
	n := 0
	o := CredentialsOptions{Client: c, Namespace: "onprem", Logins: r, Engine: MongoDB, Admin: true,
		Password: func() ([]byte, error) { n++; return []byte(fmt.Sprintf("P%d", n)), nil }}
	if _, err := Credentials(ctx, o); err == nil || !strings.Contains(err.Error(), "current admin still works") || strings.Contains(err.Error(), "P1") {
		t.Fatalf("a run killed at the grant: %v (and no password in it)", err)
	}
	r.failAt = 4 // the revocation
	if _, err := Credentials(ctx, o); err == nil || !strings.Contains(err.Error(), "the new one works") {
		t.Fatalf("a run killed at the revocation: %v", err)
	}
	r.failAt = 0
	res, err := Credentials(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`grant root_2 P1 (Secret: root, next "root_2", retire "")`,
		`grant root_2 P1 (Secret: root, next "root_2", retire "")`,
		`mounted P1 (Secret: root_2, next "", retire "root")`,
		`revoke root (Secret: root_2, next "", retire "root")`,
		`mounted P1 (Secret: root_2, next "", retire "root")`,
		`revoke root (Secret: root_2, next "", retire "root")`,
	}
	if got := strings.Join(r.calls, "\n"); got != strings.Join(want, "\n") {
		t.Errorf("calls:\n%s\nwant\n%s", got, strings.Join(want, "\n"))
	}
	if l := res.Logins[0]; l.Resumed != "revoking" || l.From != "root" || l.To != "root_2" || l.Secret != credentials.MongoDBAdmin {
		t.Errorf("result: %+v", l)
	}
	s, _ := c.CoreV1().Secrets("onprem").Get(ctx, credentials.MongoDBAdmin, metav1.GetOptions{})
	if string(s.Data["username"]) != "root_2" || string(s.Data["password"]) != "P1" || string(s.Data[KeyOwner]) != "root" ||
		s.Data[keyNextPassword] != nil || s.Annotations[AnnotationRetire] != "" || n != 1 {
		t.Errorf("the Secret after the rotation: %v %v (passwords made: %d)", s.Data, s.Annotations, n)
	}
	if due, err := AdminDue(ctx, c, "onprem", MongoDB, time.Hour, time.Now()); err != nil || due {
		t.Errorf("just rotated, due: %v %v", due, err)
	}
	if due, err := AdminDue(ctx, c, "onprem", MongoDB, time.Hour, time.Now().Add(2*time.Hour)); err != nil || !due {
		t.Errorf("two hours later, with a one-hour maximum, due: %v %v", due, err)
	}

	// The next rotation goes back to root.
	r.calls = nil
	res, err = Credentials(ctx, o)
	if err != nil || res.Logins[0].From != "root_2" || res.Logins[0].To != "root" || len(r.calls) != 3 {
		t.Fatalf("the second rotation: %+v %v\n%s", res, err, strings.Join(r.calls, "\n"))
	}
}

// unmountedAdmins is a MongoDB pod whose chart does not mount the admin
// Secret (an onprem from before admin rotation).
type unmountedAdmins struct{ recordingAdmins }

func (u *unmountedAdmins) AdminFileHolds(context.Context, string, string, []byte) (bool, error) {
	return false, ErrNoAdminFile
}

// Without the mounted admin Secret, a rotation that includes MongoDB's
// admin is refused before any engine changes anything: here a service
// login of PostgreSQL, planned first, is left as it was.
func TestMongoDBAdminUnmountedRefusedFirst(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(serviceSecret("audit-manager", "audit_manager"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentials.MongoDBAdmin, Namespace: "onprem",
			Labels: map[string]string{secrets.LabelGenerated: "true"}}, Data: map[string][]byte{"username": []byte("root"), "password": []byte("P0")}})
	u := &unmountedAdmins{recordingAdmins{recordingRedis{c: c, recordingLogins: recordingLogins{c: c}}}}
	_, err := CredentialsAll(ctx, []CredentialsOptions{
		{Client: c, Namespace: "onprem", Logins: u, Engine: PostgreSQL},
		{Client: c, Namespace: "onprem", Logins: u, Engine: MongoDB, Admin: true},
	})
	var re *RefusedError
	if !errors.As(err, &re) || !strings.Contains(err.Error(), "/etc/mongodb-admin") || !strings.Contains(err.Error(), "onprem install") {
		t.Fatalf("MongoDB's admin without the mounted Secret: %v, want a refusal saying to install first", err)
	}
	s, _ := c.CoreV1().Secrets("onprem").Get(ctx, "onprem-audit-manager-postgresql", metav1.GetOptions{})
	if len(u.calls) != 0 || string(s.Data["username"]) != "audit_manager" || s.Data[keyNextUsername] != nil {
		t.Errorf("a refused rotation changed something: calls %v, login %s", u.calls, s.Data["username"])
	}
}
