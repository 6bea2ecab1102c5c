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
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/backup/backuptest"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/rotate"
	"onprem.dev/onprem/installer/state"
)

// loginServers are the real databases that stand for the platform's
// PostgreSQL and MongoDB pods, and a way to log in to them as a service.
type loginServers struct {
	*backuptest.Servers
}

func (s loginServers) pg(ctx context.Context, user, password, db string) (*pgx.Conn, error) {
	u := url.URL{Scheme: "postgres", User: url.UserPassword(user, password), Host: s.PostgreSQL, Path: "/" + db, RawQuery: "sslmode=disable"}
	return pgx.Connect(ctx, u.String())
}

func (s loginServers) mongo(ctx context.Context, user, password, db string) (*mongo.Client, error) {
	c, err := mongo.Connect(options.Client().SetHosts([]string{s.MongoDB}).SetDirect(true).SetServerSelectionTimeout(5 * time.Second).
		SetAuth(options.Credential{Username: user, Password: password, AuthSource: db}))
	if err != nil {
		return nil, err
	}
	if err := c.Ping(ctx, nil); err != nil {
		c.Disconnect(ctx)
		return nil, err
	}
	return c, nil
}

// canLogin says whether the engine accepts the login.
func (s loginServers) canLogin(ctx context.Context, engine, user, password, db string) bool {
	switch engine {
	case rotate.PostgreSQL:
		conn, err := s.pg(ctx, user, password, db)
		if err != nil {
			return false
		}
		conn.Close(ctx)
	default:
		c, err := s.mongo(ctx, user, password, db)
		if err != nil {
			return false
		}
		c.Disconnect(ctx)
	}
	return true
}

// record reads (value == "") or writes the record "before" as the login a
// Secret holds.
func (s loginServers) record(ctx context.Context, engine string, sec *corev1.Secret, value string) (string, error) {
	user, pw, db := string(sec.Data["username"]), string(sec.Data["password"]), string(sec.Data["database"])
	if engine == rotate.PostgreSQL {
		conn, err := s.pg(ctx, user, pw, db)
		if err != nil {
			return "", err
		}
		defer conn.Close(ctx)
		if value != "" {
			if _, err := conn.Exec(ctx, "CREATE TABLE records (k text PRIMARY KEY, v text)"); err != nil {
				return "", err
			}
			_, err = conn.Exec(ctx, "INSERT INTO records VALUES ('before', $1)", value)
			return value, err
		}
		err = conn.QueryRow(ctx, "SELECT v FROM records WHERE k = 'before'").Scan(&value)
		return value, err
	}
	c, err := s.mongo(ctx, user, pw, db)
	if err != nil {
		return "", err
	}
	defer c.Disconnect(ctx)
	coll := c.Database(db).Collection("records")
	if value != "" {
		_, err = coll.InsertOne(ctx, bson.D{{Key: "_id", Value: "before"}, {Key: "v", Value: value}})
		return value, err
	}
	var doc struct {
		V string `bson:"v"`
	}
	err = coll.FindOne(ctx, bson.D{{Key: "_id", Value: "before"}}).Decode(&doc)
	return doc.V, err
}

// Services' PostgreSQL and MongoDB logins rotated on an installed platform
// against a real PostgreSQL and a real MongoDB-protocol server (FerretDB)
// standing for its pods: provisioning by the chart's own scripts, a dry run
// that writes nothing, a rotation killed after PostgreSQL's switch and one
// killed before it (each finished by the next run, no service ever without
// a login its database accepts), the old logins refused, the records
// readable, what a second PostgreSQL login makes owned by the owner role,
// the workloads rolled, the history without a password, a converging
// install that keeps all of it, and refusals that change nothing.
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
	srv := loginServers{&backuptest.Servers{PGUser: "postgres", PGPass: "pg-Admin-Secret-1", MongoUser: "root", MongoPass: "mongo-Root-Secret-1"}}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); srv.MongoDB = testservers.MongoDB(t, srv.MongoUser, srv.MongoPass) }()
	srv.PostgreSQL = testservers.PostgreSQL(t, srv.PGUser, srv.PGPass)
	wg.Wait()
	ex := backuptest.NewExec(t, srv.Servers)
	engines := []string{rotate.PostgreSQL, rotate.MongoDB}

	// loginSecrets are the services' login Secrets, by engine and name.
	loginSecrets := func() map[string]map[string]*corev1.Secret {
		t.Helper()
		l, err := c.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "onprem.dev/generated=true"})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]map[string]*corev1.Secret{}
		for i, s := range l.Items {
			for _, e := range engines {
				if strings.HasSuffix(s.Name, "-"+e) && s.Data["database"] != nil {
					if out[e] == nil {
						out[e] = map[string]*corev1.Secret{}
					}
					out[e][s.Name] = &l.Items[i]
				}
			}
		}
		return out
	}
	orig := loginSecrets()
	for _, e := range engines {
		if len(orig[e]) == 0 {
			t.Fatalf("the platform has no service with a %s login", e)
		}
	}

	// What db-provision's Job does on a real cluster, with the chart's own
	// scripts: each service's login (and database); then a record.
	logins := rotate.PodLogins{Client: c.Client, Namespace: ns, Exec: ex}
	for _, e := range engines {
		for _, s := range orig[e] {
			u := string(s.Data["username"])
			if err := logins.Grant(ctx, e, rotate.Login{Username: u, Password: s.Data["password"], Database: string(s.Data["database"]), Owner: u}); err != nil {
				t.Fatalf("provisioning %s: %v", s.Name, err)
			}
			if _, err := srv.record(ctx, e, s, "written before the rotations"); err != nil {
				t.Fatalf("a record as %s's login: %v", s.Name, err)
			}
		}
	}
	// Every service holds a login its database accepts, whatever the step.
	everyServiceConnects := func(when string) {
		t.Helper()
		for e, set := range loginSecrets() {
			for name, s := range set {
				if !srv.canLogin(ctx, e, string(s.Data["username"]), string(s.Data["password"]), string(s.Data["database"])) {
					t.Errorf("%s: %s's login is refused by %s", when, name, e)
				}
			}
		}
	}
	rotateAll := func() (*RotateCredentialsResult, error) {
		// RabbitMQ's shared login has a test of its own
		// (TestRotateRabbitMQLogin).
		return (&RotateCredentials{Target: target, Engines: engines, Exec: ex, Timeout: time.Minute}).Run(ctx)
	}

	// A dry run says what would change and writes nothing.
	history := len(loadState(t, c.Client).History)
	dry, err := (&RotateCredentials{Target: target, Engines: engines, Exec: ex, DryRun: true}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(dry.Engines) != 2 || dry.Engines[0].Engine != rotate.PostgreSQL || dry.Engines[1].Engine != rotate.MongoDB {
		t.Fatalf("dry run: %+v", dry)
	}
	for _, er := range dry.Engines {
		if len(er.Logins) != len(orig[er.Engine]) || len(er.Restarted) == 0 {
			t.Errorf("dry run of %s: %+v", er.Engine, er)
		}
		for _, l := range er.Logins {
			if l.To != l.From+"_2" {
				t.Errorf("dry run: %s would switch %s → %s, want the second login", l.Service, l.From, l.To)
			}
		}
	}
	if !reflect.DeepEqual(loginData(loginSecrets()), loginData(orig)) || len(loadState(t, c.Client).History) != history {
		t.Fatal("a dry run changed a Secret or the history")
	}

	// A rotation killed after every service switched (PostgreSQL's and
	// MongoDB's: the engines switch together, then the services roll
	// once), before the old logins are revoked: every service has a login
	// that works, and the next run revokes the old ones without switching
	// again.
	var calls, failAt atomic.Int32
	ex.Before = func(_ podexec.Target, _ []string) error {
		if n := calls.Add(1); n == failAt.Load() {
			return errors.New("killed")
		}
		return nil
	}
	failAt.Store(int32(len(orig[rotate.PostgreSQL])+len(orig[rotate.MongoDB])) + 1) // the first revocation
	if _, err := rotateAll(); err == nil || !strings.Contains(err.Error(), "run the rotation again") {
		t.Fatalf("a rotation killed before revoking: %v", err)
	}
	mid := loginSecrets()
	for _, e := range engines {
		for name, s := range mid[e] {
			o := orig[e][name]
			if string(s.Data["username"]) != string(o.Data["username"])+"_2" || s.Annotations[rotate.AnnotationRetire] != string(o.Data["username"]) {
				t.Errorf("%s after the kill: login %s, to retire %q", name, s.Data["username"], s.Annotations[rotate.AnnotationRetire])
			}
		}
	}
	everyServiceConnects("killed before revoking")
	if st := loadState(t, c.Client); st.History[len(st.History)-1].Outcome != state.OutcomeFailed {
		t.Errorf("the killed rotation is recorded as %s", st.History[len(st.History)-1].Outcome)
	}

	failAt.Store(0)
	res, err := rotateAll()
	if err != nil {
		t.Fatalf("the run that finishes the rotation: %v", err)
	}
	for _, er := range res.Engines {
		for _, l := range er.Logins {
			want := "revoking"
			if l.Resumed != want || l.To != l.From+"_2" {
				t.Errorf("%s after the kill: %+v (resumed %q, want %q)", er.Engine, l, l.Resumed, want)
			}
		}
	}
	first := loginSecrets()
	for _, e := range engines {
		for name, s := range first[e] {
			o := orig[e][name]
			if string(s.Data["username"]) != string(o.Data["username"])+"_2" || s.Annotations[rotate.AnnotationRetire] != "" || s.Data["next-username"] != nil {
				t.Errorf("%s after the first rotation: login %s, annotations %v, keys %v", name, s.Data["username"], s.Annotations, dataKeys(s.Data))
			}
			if bytes.Equal(s.Data["password"], o.Data["password"]) || string(s.Data[rotate.KeyOwner]) != string(o.Data["username"]) {
				t.Errorf("%s: the password is the same, or the owner %q is not the first login", name, s.Data[rotate.KeyOwner])
			}
			if srv.canLogin(ctx, e, string(o.Data["username"]), string(o.Data["password"]), string(o.Data["database"])) {
				t.Errorf("%s: the old login is still accepted", name)
			}
		}
	}
	everyServiceConnects("after the first rotation")

	// The workloads that read those Secrets rolled onto them.
	rolled := map[string]bool{}
	for _, er := range res.Engines {
		for _, w := range er.Restarted {
			rolled[w] = true
		}
	}
	deps, err := c.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range deps.Items {
		reads := false
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
				(first[rotate.PostgreSQL][e.ValueFrom.SecretKeyRef.Name] != nil || first[rotate.MongoDB][e.ValueFrom.SecretKeyRef.Name] != nil) {
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
	// grants it and switches back to the first login.
	calls.Store(0)
	failAt.Store(1)
	if _, err := rotateAll(); err == nil || !strings.Contains(err.Error(), "still uses its old one") {
		t.Fatalf("a rotation killed before granting: %v", err)
	}
	everyServiceConnects("killed before granting")
	failAt.Store(0)
	res, err = rotateAll()
	if err != nil {
		t.Fatalf("the run that finishes the second rotation: %v", err)
	}
	if !slices.ContainsFunc(res.Engines[0].Logins, func(l rotate.LoginChange) bool { return l.Resumed == "granting" }) {
		t.Errorf("the second rotation did not resume a grant: %+v", res.Engines[0].Logins)
	}
	second := loginSecrets()
	for _, e := range engines {
		for name, s := range second[e] {
			o, f := orig[e][name], first[e][name]
			if string(s.Data["username"]) != string(o.Data["username"]) {
				t.Errorf("%s: the second rotation switched to %s, want the first login %s", name, s.Data["username"], o.Data["username"])
			}
			if srv.canLogin(ctx, e, string(f.Data["username"]), string(f.Data["password"]), string(f.Data["database"])) {
				t.Errorf("%s: the second login is still accepted after the second rotation", name)
			}
			if v, err := srv.record(ctx, e, s, ""); err != nil || v != "written before the rotations" {
				t.Errorf("%s: the record written before the rotations: %q, %v", name, v, err)
			}
		}
	}
	everyServiceConnects("after the second rotation")

	// PostgreSQL: what a second login creates belongs to the owner, which
	// the owner's login can change.
	for name, s := range second[rotate.PostgreSQL] {
		owner, db := string(s.Data[rotate.KeyOwner]), string(s.Data["database"])
		if err := logins.Grant(ctx, rotate.PostgreSQL, rotate.Login{Username: owner + "_2", Password: []byte("Second-Login-1"), Database: db, Owner: owner}); err != nil {
			t.Fatal(err)
		}
		conn, err := srv.pg(ctx, owner+"_2", "Second-Login-1", db)
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
		if err := logins.Revoke(ctx, rotate.PostgreSQL, rotate.Login{Username: owner + "_2", Database: db}); err != nil {
			t.Fatal(err)
		}
		conn, err = srv.pg(ctx, string(s.Data["username"]), string(s.Data["password"]), db)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "DROP TABLE made_by_second"); err != nil {
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
	if len(rotations) != 4 || !strings.Contains(rotations[3], "succeeded: credentials: postgresql ") || !strings.Contains(rotations[3], ", mongodb ") {
		t.Errorf("the history's rotations:\n%s", strings.Join(rotations, "\n"))
	}
	hist, _ := json.Marshal(st.History)
	for _, set := range []map[string]map[string]*corev1.Secret{orig, first, second} {
		for _, byName := range set {
			for name, s := range byName {
				if bytes.Contains(hist, s.Data["password"]) {
					t.Errorf("the history holds a password of %s", name)
				}
			}
		}
	}

	// A converging install keeps the rotated logins and the restarts.
	if _, err := (&Install{Source: src, Cluster: cl, Timeout: 2 * time.Minute}).Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(loginData(loginSecrets()), loginData(second)) {
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

	// spec.rotation.credentialsMaxAgeDays: an install rotates the logins
	// older than that (one of each engine, aged here), and only those.
	aged := map[string]bool{}
	for _, e := range engines {
		for name := range second[e] {
			s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			s.Annotations[rotate.AnnotationRotatedAt] = time.Now().Add(-10 * 24 * time.Hour).UTC().Format(time.RFC3339)
			if _, err := c.Client.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			aged[name] = true
			break
		}
	}
	src7, _ := clusterConfig(t, c, smallPlatform+"  rotation: {credentialsMaxAgeDays: 7}\n")
	inst, err := (&Install{Source: src7, Cluster: cl, Timeout: 2 * time.Minute, Exec: ex}).Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(inst.CredentialRotation, "rotated (spec.rotation.credentialsMaxAgeDays): ") || strings.Count(inst.CredentialRotation, "→") != 2 {
		t.Errorf("the install's credential rotation: %q", inst.CredentialRotation)
	}
	third := loginSecrets()
	for _, e := range engines {
		for name, s := range third[e] {
			o := second[e][name]
			switched := string(s.Data["username"]) != string(o.Data["username"])
			if switched != aged[name] {
				t.Errorf("%s (aged %v): switched %v by the install", name, aged[name], switched)
			}
			if aged[name] && srv.canLogin(ctx, e, string(o.Data["username"]), string(o.Data["password"]), string(o.Data["database"])) {
				t.Errorf("%s: the login the install rotated away from is still accepted", name)
			}
		}
	}
	everyServiceConnects("after the install's rotation")
	if again, err := (&Install{Source: src7, Cluster: cl, Timeout: 2 * time.Minute, Exec: ex}).Run(ctx); err != nil || again.CredentialRotation != "" {
		t.Errorf("an install with nothing due: rotation %q, %v", again.CredentialRotation, err)
	}
	second = third

	// Refusals: nothing changed, nothing recorded, exit code 2.
	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "onprem-billing-postgresql", Namespace: ns},
		Data: map[string][]byte{"username": []byte("billing"), "password": []byte("Operators-Own-1"), "database": []byte("billing")}}
	if _, err := c.Client.CoreV1().Secrets(ns).Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	history = len(loadState(t, c.Client).History)
	for _, tc := range []struct {
		r    *RotateCredentials
		want string
	}{
		{&RotateCredentials{Engines: []string{"consul"}}, `"consul"`},
		{&RotateCredentials{Components: []string{"no-such-service"}}, `"no-such-service" has no database login of its own`},
		{&RotateCredentials{Components: []string{"billing"}}, "onprem-billing-postgresql holds billing's postgresql login but is your own"},
		{&RotateCredentials{Admins: []string{rotate.Redis}}, "onprem rotates the admins of postgresql and mongodb"},
		{&RotateCredentials{Admin: true, Engines: []string{rotate.RabbitMQ}}, "--admin with --database rabbitmq"},
	} {
		tc.r.Target, tc.r.Exec = target, ex
		_, err := tc.r.Run(ctx)
		var ie *InputError
		if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rotating %v %v: %v, want an input error saying %s", tc.r.Engines, tc.r.Components, err, tc.want)
		}
	}
	if s, err := c.Client.CoreV1().Secrets(ns).Get(ctx, own.Name, metav1.GetOptions{}); err != nil || string(s.Data["password"]) != "Operators-Own-1" {
		t.Errorf("the operator's own Secret: %v", err)
	}
	if len(loadState(t, c.Client).History) != history || !reflect.DeepEqual(loginData(loginSecrets()), loginData(second)) {
		t.Error("a refused rotation changed a Secret or the history")
	}
}

func loginData(m map[string]map[string]*corev1.Secret) map[string]string {
	out := map[string]string{}
	for _, byName := range m {
		for name, s := range byName {
			for k, v := range s.Data {
				out[name+"/"+k] = string(v)
			}
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
