package action

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/backup/backuptest"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/rotate"
	"onprem.dev/onprem/installer/state"
)

// pgLogin connects to database as the login a service Secret holds.
func pgLogin(ctx context.Context, addr string, s *corev1.Secret) (*pgx.Conn, error) {
	return pgLoginAs(ctx, addr, string(s.Data["username"]), string(s.Data["password"]), string(s.Data["database"]))
}

func pgLoginAs(ctx context.Context, addr, user, password, db string) (*pgx.Conn, error) {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: addr, Path: "/" + db, RawQuery: "sslmode=disable"}
	return pgx.Connect(ctx, u.String())
}

// Services' PostgreSQL logins rotated on an installed platform against a
// real PostgreSQL standing for its pod: provisioning by the chart's own
// script, a dry run that writes nothing, a rotation killed after the
// switch and one killed before it (each finished by the next run, no
// service ever without a login the database accepts), the old logins
// refused, the records readable and what the new login makes owned by
// the service's owner role, the workloads rolled, the history without a
// password, a converging install that keeps all of it, and refusals that
// change nothing.
func TestRotateCredentials(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testcluster.Start(t)
	src, cl := clusterConfig(t, c, smallPlatform)
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	const ns = "onprem"
	target := Target{Cluster: cl, ConfigPath: src.ConfigPath}
	servers := &backuptest.Servers{PGUser: "postgres", PGPass: "pg-Admin-Secret-1"}
	servers.PostgreSQL = testservers.PostgreSQL(t, servers.PGUser, servers.PGPass)
	ex := backuptest.NewExec(t, servers)

	pgSecrets := func() map[string]*corev1.Secret {
		t.Helper()
		l, err := c.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "onprem.dev/generated=true"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*corev1.Secret{}
		for i, s := range l.Items {
			if strings.HasSuffix(s.Name, "-postgresql") && s.Data["database"] != nil {
				out[s.Name] = &l.Items[i]
			}
		}
		return out
	}
	orig := pgSecrets()
	if len(orig) == 0 {
		t.Fatal("the platform has no service with a PostgreSQL login")
	}

	// What db-provision's Job does on a real cluster, with the chart's own
	// script: each service's login and database; then a table of records.
	logins := rotate.PodLogins{Client: c.Client, Namespace: ns, Exec: ex}
	for _, s := range orig {
		u := string(s.Data["username"])
		if err := logins.Grant(ctx, rotate.PostgreSQL, rotate.Login{Username: u, Password: s.Data["password"], Database: string(s.Data["database"]), Owner: u}); err != nil {
			t.Fatalf("provisioning %s: %v", s.Name, err)
		}
		conn, err := pgLogin(ctx, servers.PostgreSQL, s)
		if err != nil {
			t.Fatalf("the provisioned login of %s: %v", s.Name, err)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE records (k text PRIMARY KEY, v text); INSERT INTO records VALUES ('before', 'rotation')"); err != nil {
			t.Fatal(err)
		}
		conn.Close(ctx)
	}
	canLogin := func(user, password, db string) bool {
		conn, err := pgLoginAs(ctx, servers.PostgreSQL, user, password, db)
		if err != nil {
			return false
		}
		conn.Close(ctx)
		return true
	}
	// Every service holds a login the database accepts, whatever the step.
	everyServiceConnects := func(when string) {
		t.Helper()
		for name, s := range pgSecrets() {
			if !canLogin(string(s.Data["username"]), string(s.Data["password"]), string(s.Data["database"])) {
				t.Errorf("%s: %s's login is refused by the database", when, name)
			}
		}
	}

	// A dry run says what would change and writes nothing.
	history := len(loadState(t, c.Client).History)
	dry, err := (&RotateCredentials{Target: target, Exec: ex, Engine: rotate.PostgreSQL, DryRun: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Logins) != len(orig) || len(dry.Restarted) == 0 {
		t.Fatalf("dry run: %+v", dry)
	}
	for _, l := range dry.Logins {
		if l.To != l.From+"_2" {
			t.Errorf("dry run: %s would switch %s → %s, want the second login", l.Service, l.From, l.To)
		}
	}
	if !reflect.DeepEqual(loginData(pgSecrets()), loginData(orig)) || len(loadState(t, c.Client).History) != history {
		t.Fatal("a dry run changed a Secret or the history")
	}

	// A rotation killed after the services switched, before the old logins
	// are revoked: every service has a login that works, and the next run
	// revokes the old ones without switching again.
	var calls, failAt atomic.Int32
	ex.Before = func(_ podexec.Target, _ []string) error {
		if n := calls.Add(1); n == failAt.Load() {
			return errors.New("killed")
		}
		return nil
	}
	failAt.Store(int32(len(orig)) + 1) // the first revocation
	if _, err := (&RotateCredentials{Target: target, Exec: ex, Engine: rotate.PostgreSQL, Timeout: time.Minute}).Run(ctx); err == nil || !strings.Contains(err.Error(), "run the rotation again") {
		t.Fatalf("a rotation killed before revoking: %v", err)
	}
	mid := pgSecrets()
	for name, s := range mid {
		o := orig[name]
		if string(s.Data["username"]) != string(o.Data["username"])+"_2" || s.Annotations[rotate.AnnotationRetire] != string(o.Data["username"]) {
			t.Errorf("%s after the kill: login %s, to retire %q", name, s.Data["username"], s.Annotations[rotate.AnnotationRetire])
		}
	}
	everyServiceConnects("killed before revoking")
	if st := loadState(t, c.Client); st.History[len(st.History)-1].Outcome != state.OutcomeFailed {
		t.Errorf("the killed rotation is recorded as %s", st.History[len(st.History)-1].Outcome)
	}

	failAt.Store(0)
	res, err := (&RotateCredentials{Target: target, Exec: ex, Engine: rotate.PostgreSQL, Timeout: time.Minute}).Run(ctx)
	if err != nil {
		t.Fatalf("the run that finishes the rotation: %v", err)
	}
	for _, l := range res.Logins {
		if l.Resumed != "revoking" || l.To != l.From+"_2" {
			t.Errorf("resumed: %+v", l)
		}
	}
	first := pgSecrets()
	for name, s := range first {
		o := orig[name]
		if string(s.Data["username"]) != string(mid[name].Data["username"]) || s.Annotations[rotate.AnnotationRetire] != "" || s.Data["next-username"] != nil {
			t.Errorf("%s after the resumed run: login %s, annotations %v, keys %v", name, s.Data["username"], s.Annotations, dataKeys(s.Data))
		}
		if bytes.Equal(s.Data["password"], o.Data["password"]) || string(s.Data[rotate.KeyOwner]) != string(o.Data["username"]) {
			t.Errorf("%s: the password is the same, or the owner %q is not the first login", name, s.Data[rotate.KeyOwner])
		}
		if canLogin(string(o.Data["username"]), string(o.Data["password"]), string(o.Data["database"])) {
			t.Errorf("%s: the old login is still accepted", name)
		}
	}
	everyServiceConnects("after the first rotation")

	// The workloads that read those Secrets rolled onto them.
	rolled := map[string]bool{}
	for _, w := range res.Restarted {
		rolled[w] = true
	}
	deps, err := c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		reads := false
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && first[e.ValueFrom.SecretKeyRef.Name] != nil {
				reads = true
			}
		}
		annotated := d.Spec.Template.Annotations[rotate.AnnotationCredentials] != ""
		if reads != rolled["Deployment/"+d.Name] || reads != annotated {
			t.Errorf("Deployment %s: reads a rotated Secret %v, restarted %v, annotated %v", d.Name, reads, rolled["Deployment/"+d.Name], annotated)
		}
		if reads && (d.Status.UpdatedReplicas != *d.Spec.Replicas || d.Status.Replicas != d.Status.UpdatedReplicas) {
			t.Errorf("Deployment %s has not rolled out: %+v", d.Name, d.Status)
		}
	}

	// A second rotation killed before its first grant: the next login is
	// in the Secret, the service still on its current one; the next run
	// grants it and switches back to the owner.
	calls.Store(0)
	failAt.Store(1)
	if _, err := (&RotateCredentials{Target: target, Exec: ex, Engine: rotate.PostgreSQL, Timeout: time.Minute}).Run(ctx); err == nil || !strings.Contains(err.Error(), "still uses its old one") {
		t.Fatalf("a rotation killed before granting: %v", err)
	}
	everyServiceConnects("killed before granting")
	failAt.Store(0)
	res, err = (&RotateCredentials{Target: target, Exec: ex, Engine: rotate.PostgreSQL, Timeout: time.Minute}).Run(ctx)
	if err != nil {
		t.Fatalf("the run that finishes the second rotation: %v", err)
	}
	if !slices.ContainsFunc(res.Logins, func(l rotate.LoginChange) bool { return l.Resumed == "granting" }) {
		t.Errorf("the second rotation did not resume a grant: %+v", res.Logins)
	}
	second := pgSecrets()
	for name, s := range second {
		o, f := orig[name], first[name]
		if string(s.Data["username"]) != string(o.Data["username"]) {
			t.Errorf("%s: the second rotation switched to %s, want the owner %s", name, s.Data["username"], o.Data["username"])
		}
		if canLogin(string(f.Data["username"]), string(f.Data["password"]), string(f.Data["database"])) {
			t.Errorf("%s: the second login is still accepted after the second rotation", name)
		}
	}
	everyServiceConnects("after the second rotation")

	// The data: the records are there for the new login, and what a
	// second login creates belongs to the owner.
	for name, s := range first {
		conn, err := pgLogin(ctx, servers.PostgreSQL, second[name])
		if err != nil {
			t.Fatal(err)
		}
		var v string
		if err := conn.QueryRow(ctx, "SELECT v FROM records WHERE k = 'before'").Scan(&v); err != nil || v != "rotation" {
			t.Errorf("%s: the record written before the rotations: %q, %v", name, v, err)
		}
		conn.Close(ctx)
		// The second login, granted again as provisioning would, makes a
		// table: the owner's, which the owner's login can change.
		owner := string(s.Data[rotate.KeyOwner])
		if err := logins.Grant(ctx, rotate.PostgreSQL, rotate.Login{Username: owner + "_2", Password: []byte("Second-Login-1"), Database: string(s.Data["database"]), Owner: owner}); err != nil {
			t.Fatal(err)
		}
		conn, err = pgLoginAs(ctx, servers.PostgreSQL, owner+"_2", "Second-Login-1", string(s.Data["database"]))
		if err != nil {
			t.Fatal(err)
		}
		var tableOwner string
		if _, err := conn.Exec(ctx, "CREATE TABLE made_by_second (k text)"); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, "SELECT tableowner FROM pg_tables WHERE tablename = 'made_by_second'").Scan(&tableOwner); err != nil || tableOwner != owner {
			t.Errorf("%s: a table made by the second login belongs to %q (%v), want %s", name, tableOwner, err, owner)
		}
		conn.Close(ctx)
		if err := logins.Revoke(ctx, rotate.PostgreSQL, owner+"_2"); err != nil {
			t.Fatal(err)
		}
		conn, err = pgLogin(ctx, servers.PostgreSQL, second[name])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "DROP TABLE made_by_second; INSERT INTO records VALUES ('after', 'rotation')"); err != nil {
			t.Errorf("%s: the owner's login cannot change what the second login made: %v", name, err)
		}
		conn.Close(ctx)
	}

	// The history names the logins, never a password.
	st := loadState(t, c.Client)
	var rotations []string
	for _, op := range st.History {
		if op.Kind == state.KindRotate {
			rotations = append(rotations, op.Outcome+": "+op.Message)
		}
	}
	if len(rotations) != 4 || !strings.Contains(rotations[3], "succeeded: credentials (postgresql): ") {
		t.Errorf("the history's rotations:\n%s", strings.Join(rotations, "\n"))
	}
	hist, _ := json.Marshal(st.History)
	for _, set := range []map[string]*corev1.Secret{orig, first, second} {
		for name, s := range set {
			if bytes.Contains(hist, s.Data["password"]) {
				t.Errorf("the history holds a password of %s", name)
			}
		}
	}

	// A converging install keeps the rotated logins and the restarts.
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(loginData(pgSecrets()), loginData(second)) {
		t.Error("a converging install changed a rotated Secret")
	}
	deps, err = c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		if rolled["Deployment/"+d.Name] && d.Spec.Template.Annotations[rotate.AnnotationCredentials] == "" {
			t.Errorf("a converging install dropped %s's restart annotation (its pods would roll back to the old login's digest)", d.Name)
		}
	}

	// Refusals: nothing changed, nothing recorded, exit code 2.
	history = len(loadState(t, c.Client).History)
	for _, r := range []*RotateCredentials{
		{Engine: rotate.MongoDB},
		{Engine: "redis"},
		{Engine: rotate.PostgreSQL, Components: []string{"no-such-service"}},
	} {
		r.Target = target
		_, err := r.Run(ctx)
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Errorf("rotating %s %v: %v, want an input error", r.Engine, r.Components, err)
		}
	}
	if len(loadState(t, c.Client).History) != history || !reflect.DeepEqual(loginData(pgSecrets()), loginData(second)) {
		t.Error("a refused rotation changed a Secret or the history")
	}
}

func loginData(m map[string]*corev1.Secret) map[string]string {
	out := map[string]string{}
	for name, s := range m {
		for k, v := range s.Data {
			out[name+"/"+k] = string(v)
		}
	}
	return out
}

func dataKeys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
