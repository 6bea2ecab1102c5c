package rotate

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/secrets"
)

// recordingLogins records each call with the login the Secret holds at
// that moment, and fails the call numbered failAt.
type recordingLogins struct {
	c      kubernetes.Interface
	calls  []string
	failAt int
}

func (r *recordingLogins) note(call string) error {
	s, err := r.c.CoreV1().Secrets("onprem").Get(context.Background(), "onprem-audit-manager-postgresql", metav1.GetOptions{})
	if err != nil {
		return err
	}
	r.calls = append(r.calls, fmt.Sprintf("%s (Secret: %s, next %q, retire %q)", call, s.Data["username"], s.Data[keyNextUsername], s.Annotations[AnnotationRetire]))
	if len(r.calls) == r.failAt {
		return errors.New("killed with password=" + string(s.Data[keyNextPassword]))
	}
	return nil
}

func (r *recordingLogins) Grant(_ context.Context, _ string, l Login) error {
	return r.note("grant " + l.Username + " owner " + l.Owner + " db " + l.Database)
}

func (r *recordingLogins) Revoke(_ context.Context, _ string, l Login) error {
	return r.note("revoke " + l.Username)
}

func serviceSecret(svc, user string) *corev1.Secret {
	db := strings.ReplaceAll(svc, "-", "_")
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "onprem-" + svc + "-postgresql", Namespace: "onprem",
		Labels:      map[string]string{secrets.LabelGenerated: "true"},
		Annotations: map[string]string{secrets.AnnotationPublicKeys: "database,username"}},
		Data: map[string][]byte{"username": []byte(user), "password": []byte("Old-Password-" + svc), "database": []byte(db)}}
}

// The order that keeps the service connected: the next login is in the
// Secret before the database learns it; the Secret switches after the
// grant; the old login is revoked last. A run killed at the grant leaves
// the service on its old login, and the next run finishes with the same
// next login; then the login alternates back to the owner.
func TestCredentialsOrderAndResume(t *testing.T) {
	ctx := context.Background()
	c := fake.NewSimpleClientset(serviceSecret("audit-manager", "audit_manager"), serviceSecret("analytics-reporter", "analytics_reporter"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "onprem-postgresql-admin", Namespace: "onprem", Labels: map[string]string{secrets.LabelGenerated: "true"}},
			Data: map[string][]byte{"username": []byte("postgres"), "password": []byte("admin")}})
	logins := &recordingLogins{c: c, failAt: 1}
	pw := 0
	o := CredentialsOptions{Client: c, Namespace: "onprem", Logins: logins, Engine: PostgreSQL, Services: []string{"audit-manager"},
		Password: func() ([]byte, error) { pw++; return []byte(fmt.Sprintf("New-Password-%d", pw)), nil }}

	_, err := Credentials(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "still uses its old one") || strings.Contains(err.Error(), "New-Password-1") {
		t.Fatalf("a grant that fails: %v (and never its password)", err)
	}
	logins.failAt = 0
	res, err := Credentials(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`grant audit_manager_2 owner audit_manager db audit_manager (Secret: audit_manager, next "audit_manager_2", retire "")`,
		`grant audit_manager_2 owner audit_manager db audit_manager (Secret: audit_manager, next "audit_manager_2", retire "")`,
		`revoke audit_manager (Secret: audit_manager_2, next "", retire "audit_manager")`,
	}
	if !reflect.DeepEqual(logins.calls, want) {
		t.Errorf("calls:\n%s\nwant\n%s", strings.Join(logins.calls, "\n"), strings.Join(want, "\n"))
	}
	if len(res.Logins) != 1 || res.Logins[0] != (LoginChange{Service: "audit-manager", Secret: "onprem-audit-manager-postgresql", From: "audit_manager", To: "audit_manager_2", Resumed: "granting"}) {
		t.Errorf("result: %+v", res.Logins)
	}
	s, _ := c.CoreV1().Secrets("onprem").Get(ctx, "onprem-audit-manager-postgresql", metav1.GetOptions{})
	if string(s.Data["password"]) != "New-Password-1" || string(s.Data[KeyOwner]) != "audit_manager" || s.Data[keyNextPassword] != nil ||
		s.Annotations[AnnotationRetire] != "" || s.Annotations[AnnotationRotatedAt] == "" ||
		s.Annotations[secrets.AnnotationPublicKeys] != "database,next-username,owner,username" {
		t.Errorf("the Secret after the rotation: keys %v, annotations %v", s.Data, s.Annotations)
	}
	other, _ := c.CoreV1().Secrets("onprem").Get(ctx, "onprem-analytics-reporter-postgresql", metav1.GetOptions{})
	if string(other.Data["username"]) != "analytics_reporter" || string(other.Data["password"]) != "Old-Password-analytics-reporter" {
		t.Error("a service not named was rotated")
	}

	// The next rotation goes back to the owner, with a new password.
	logins.calls = nil
	res, err = Credentials(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Logins[0].From != "audit_manager_2" || res.Logins[0].To != "audit_manager" || res.Logins[0].Resumed != "" || len(logins.calls) != 2 ||
		!strings.HasPrefix(logins.calls[1], "revoke audit_manager_2") {
		t.Errorf("the second rotation: %+v\n%s", res.Logins, strings.Join(logins.calls, "\n"))
	}
	s, _ = c.CoreV1().Secrets("onprem").Get(ctx, "onprem-audit-manager-postgresql", metav1.GetOptions{})
	if string(s.Data["username"]) != "audit_manager" || string(s.Data["password"]) != "New-Password-2" {
		t.Errorf("after the second rotation: %s", s.Data["username"])
	}

	// A run killed at the revocation is finished by the next, which does
	// not switch again.
	logins.calls, logins.failAt = nil, 2
	if _, err := Credentials(ctx, o); err == nil || !strings.Contains(err.Error(), "uses its new one") {
		t.Fatalf("a revocation that fails: %v", err)
	}
	logins.calls, logins.failAt = nil, 0
	res, err = Credentials(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if res.Logins[0].Resumed != "revoking" || len(logins.calls) != 1 || !strings.HasPrefix(logins.calls[0], "revoke audit_manager ") {
		t.Errorf("the resumed revocation: %+v\n%s", res.Logins, strings.Join(logins.calls, "\n"))
	}
}

// Refusals name the problem and change nothing.
func TestCredentialsRefusals(t *testing.T) {
	ctx := context.Background()
	own := serviceSecret("billing", "billing")
	delete(own.Labels, secrets.LabelGenerated)
	c := fake.NewSimpleClientset(serviceSecret("audit-manager", "audit_manager"), own)
	logins := &recordingLogins{c: c}
	for _, tc := range []struct {
		o    CredentialsOptions
		want string
	}{
		{CredentialsOptions{Engine: MongoDB}, "no service has a mongodb login"},
		{CredentialsOptions{Engine: "nats"}, `"nats"`},
		{CredentialsOptions{Engine: PostgreSQL, Services: []string{"nope"}}, `"nope" has no postgresql login of its own; these do: audit-manager`},
		{CredentialsOptions{Engine: PostgreSQL, Namespace: "elsewhere"}, "no service has a postgresql login"},
		{CredentialsOptions{Engine: PostgreSQL, Services: []string{"billing"}}, "onprem-billing-postgresql holds billing's postgresql login but is your own"},
	} {
		o := tc.o
		o.Client, o.Logins = c, logins
		if o.Namespace == "" {
			o.Namespace = "onprem"
		}
		_, err := Credentials(ctx, o)
		var re *RefusedError
		if !errors.As(err, &re) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want a refusal saying %q", tc.o, err, tc.want)
		}
	}
	if len(logins.calls) != 0 {
		t.Errorf("a refusal reached the database: %v", logins.calls)
	}
}

// Which Secrets a pod reads: environment, envFrom, volumes, projected
// volumes, init containers.
func TestSecretsRead(t *testing.T) {
	ref := func(n string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: n}, Key: "k"}}
	}
	p := &corev1.PodSpec{
		InitContainers: []corev1.Container{{Env: []corev1.EnvVar{{Name: "A", ValueFrom: ref("a")}}}},
		Containers: []corev1.Container{{EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "b"}}}}},
			{Env: []corev1.EnvVar{{Name: "X", Value: "c"}}}},
		Volumes: []corev1.Volume{{VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "d"}}},
			{VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "e"}}}}}}}},
	}
	if got := secretsRead(p, []string{"a", "b", "c", "d", "e", "f"}); !reflect.DeepEqual(got, []string{"a", "b", "d", "e"}) {
		t.Errorf("secretsRead = %v", got)
	}
}

// A rollout is over when every pod is of the new template and available:
// kubectl rollout status's rules.
func TestRolloutPending(t *testing.T) {
	three := int32(3)
	d := func(gen, observed int64, replicas, updated, available int32) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: gen}, Spec: appsv1.DeploymentSpec{Replicas: &three},
			Status: appsv1.DeploymentStatus{ObservedGeneration: observed, Replicas: replicas, UpdatedReplicas: updated, AvailableReplicas: available}}
	}
	for _, tc := range []struct {
		d    *appsv1.Deployment
		want string
	}{
		{d(2, 1, 3, 3, 3), "not seen"},
		{d(2, 2, 4, 2, 2), "2 of 3 pods updated"},
		{d(2, 2, 4, 3, 3), "1 old pods"},
		{d(2, 2, 3, 3, 2), "2 of 3 updated pods available"},
		{d(2, 2, 3, 3, 3), ""},
	} {
		if got := deploymentPending(tc.d); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: %q, want %q", tc.d.Status, got, tc.want)
		}
	}
	s := &appsv1.StatefulSet{Spec: appsv1.StatefulSetSpec{Replicas: &three},
		Status: appsv1.StatefulSetStatus{UpdatedReplicas: 3, ReadyReplicas: 3, CurrentRevision: "a", UpdateRevision: "b"}}
	if got := statefulSetPending(s); !strings.Contains(got, "previous revision") {
		t.Errorf("a StatefulSet mid-rollout: %q", got)
	}
	s.Status.CurrentRevision = "b"
	if got := statefulSetPending(s); got != "" {
		t.Errorf("a StatefulSet rolled out: %q", got)
	}
}

// psql's meta-command quoting keeps any value one argument.
func TestPsqlQuote(t *testing.T) {
	for in, want := range map[string]string{`plain`: `'plain'`, `it's`: `'it\'s'`, `back\slash`: `'back\\slash'`} {
		if got, err := psqlQuote(in); err != nil || got != want {
			t.Errorf("psqlQuote(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := psqlQuote("two\nlines"); err == nil {
		t.Error("a line break was quoted")
	}
}

// The listing names the command that rotates each login, the admins'
// included.
func TestRotateCommand(t *testing.T) {
	for name, want := range map[string]string{
		"onprem-audit-manager-postgresql": "onprem rotate credentials --component audit-manager --database postgresql",
		"onprem-pipelines-api-mongodb":    "onprem rotate credentials --component pipelines-api --database mongodb",
		"onprem-postgresql-admin":         "onprem rotate credentials --admin --database postgresql",
		"onprem-mongodb-admin":            "onprem rotate credentials --admin --database mongodb",
		"onprem-redis":                    "onprem rotate credentials --database redis",
		"onprem-rabbitmq":                 "onprem rotate credentials --database rabbitmq",
	} {
		if got := rotateCommand(KindCredential, name); got != want {
			t.Errorf("rotateCommand(%s) = %q, want %q", name, got, want)
		}
	}
}

// A rollout is not over while a replaced pod terminates: it may be
// finishing a request with the old login.
func TestTerminatingPods(t *testing.T) {
	now := metav1.Now()
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}
	pod := func(name string, deleted bool) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem", Labels: map[string]string{"app": "a"}, Finalizers: []string{"x"}}}
		if deleted {
			p.DeletionTimestamp = &now
		}
		return p
	}
	c := fake.NewSimpleClientset(pod("new", false), pod("old", true))
	if why, err := terminating(context.Background(), c, "onprem", sel); err != nil || why != "1 replaced pods still terminating" {
		t.Errorf("with a terminating pod: %q, %v", why, err)
	}
	c = fake.NewSimpleClientset(pod("new", false))
	if why, err := terminating(context.Background(), c, "onprem", sel); err != nil || why != "" {
		t.Errorf("without: %q, %v", why, err)
	}
}
