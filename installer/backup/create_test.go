package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/backupstore"
	"onprem.dev/onprem/installer/dbdump"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/secrets"
	"onprem.dev/onprem/installer/state"
)

const ns = "platform"

func secret(namespace, name string, labels, annotations map[string]string, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels, Annotations: annotations},
		Type: corev1.SecretTypeOpaque, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

var generatedLabel = map[string]string{secrets.LabelGenerated: "true"}

// platformObjects are a platform's objects as a backup reads them: its
// configuration, generated Secrets (two with a database, one without), an
// operator's Secret the configuration names, a Secret onprem did not
// generate, a runtime's managed cluster, and PostgreSQL's pod.
func platformObjects() []runtime.Object {
	return []runtime.Object{
		secret(ns, ConfigSecret, nil, map[string]string{
			GeneratedSecretsAnnotation:  "onprem-pipelines-api-mongodb,onprem-audit-postgresql,onprem-redis",
			ReferencedSecretsAnnotation: "operator-tls,operator-gone",
		}, map[string]string{ConfigKey: "apiVersion: onprem.dev/v1alpha1\nkind: Installation\n"}),
		secret(ns, "onprem-pipelines-api-mongodb", generatedLabel, nil, map[string]string{"database": "pipelines_api", "password": "mongo-pw"}),
		secret(ns, "onprem-audit-postgresql", generatedLabel, nil, map[string]string{"database": "audit", "password": "pg-pw"}),
		secret(ns, "onprem-redis", generatedLabel, nil, map[string]string{"password": "redis-pw"}),
		secret(ns, "operator-tls", nil, nil, map[string]string{"tls.crt": "CERT", "tls.key": "KEY"}),
		secret(ns, "not-ours", nil, nil, map[string]string{"x": "y"}),
		secret("rt", "cluster-prod", map[string]string{argoSecretType: "cluster", labelRuntime: "rt1", labelManagedCluster: "prod"}, nil,
			map[string]string{"server": "https://prod", "config": "{\"bearerToken\":\"t\"}"}),
		&appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "postgresql", Namespace: ns, Labels: map[string]string{componentLabel: "postgresql"}},
			Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "pg"}}}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "postgresql-0", Namespace: ns, Labels: map[string]string{"app": "pg"}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}},
	}
}

func gitSource() *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("argoproj.io/v1alpha1")
	u.SetKind("Application")
	u.SetName("apps-repo")
	u.SetNamespace("rt")
	u.SetLabels(map[string]string{labelGitSource: "apps-repo"})
	u.SetResourceVersion("42")
	u.Object["spec"] = map[string]any{"source": map[string]any{"repoURL": "https://git.example/apps"}}
	u.Object["status"] = map[string]any{"sync": "Synced"}
	return u
}

func dynamicClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{applications: "ApplicationList"}, objs...)
}

// platformState: PostgreSQL runs in the cluster, MongoDB is external; a
// runtime on the platform's cluster and one on another.
func platformState() *state.State {
	return &state.State{Installation: "acme", Namespace: ns, Version: "1.2.3",
		Components: map[string]state.Component{"postgresql": {Chart: "postgresql"}, "pipelines-api": {Chart: "pipelines"}},
		Runtimes: map[string]state.Runtime{
			"rt1":    {Namespace: "rt"},
			"remote": {Namespace: "rt-remote", Kubeconfig: "/elsewhere"},
		},
	}
}

// fakeExec stands for the database pods: a command without stdin is a
// dump and writes dumps[db]; one with stdin is a restore and keeps what
// it read.
type fakeExec struct {
	mu       sync.Mutex
	dumps    map[string][]byte
	fail     error
	calls    []string
	restored map[string][]byte
}

func (f *fakeExec) Exec(ctx context.Context, t podexec.Target, cmd []string, stdin io.Reader, stdout io.Writer) error {
	f.mu.Lock()
	f.calls = append(f.calls, t.Pod+"/"+t.Container)
	f.mu.Unlock()
	if f.fail != nil {
		return f.fail
	}
	db := ""
	for name := range f.dumps {
		if slices.ContainsFunc(cmd, func(a string) bool { return strings.Contains(a, name) }) {
			db = name
		}
	}
	if stdin == nil {
		_, err := stdout.Write(f.dumps[db])
		return err
	}
	b, err := io.ReadAll(stdin)
	f.mu.Lock()
	if f.restored == nil {
		f.restored = map[string][]byte{}
	}
	f.restored[db] = b
	f.mu.Unlock()
	return err
}

func newIdentity(t *testing.T) *age.X25519Identity {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// A backup written by Create is read back whole by Open with the right
// key: the configuration, the state, the Secrets (generated, the
// operator's, the managed cluster's), the registrations and the dump of
// the internal database, which RestoreData streams back unchanged.
func TestCreateOpenRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	dump := make([]byte, backupfile.PartSize+12345) // more than one part
	if _, err := rand.Read(dump); err != nil {
		t.Fatal(err)
	}
	ex := &fakeExec{dumps: map[string][]byte{"audit": dump}}
	id := newIdentity(t)
	store := backupstore.Dir{Path: t.TempDir()}
	var events []Progress
	res, err := Create(ctx, CreateOptions{
		Client: fake.NewClientset(platformObjects()...), Dynamic: dynamicClient(gitSource()), Exec: ex,
		Namespace: ns, State: platformState(), Recipients: []age.Recipient{id.Recipient()}, Store: store,
		Name: "acme-test" + backupfile.Extension, Progress: func(p Progress) { events = append(events, p) },
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range res.Manifest.Entries {
		names = append(names, e.Name)
	}
	want := []string{entryConfig, entryState, entrySecrets, entryRegistrations, "databases/postgresql/audit.pgdump"}
	if !slices.Equal(names, want) {
		t.Errorf("entries %v, want %v (no dump of the external MongoDB)", names, want)
	}
	if res.Manifest.Trigger != backupfile.TriggerManual || res.Manifest.Version != "1.2.3" {
		t.Errorf("header: trigger %q version %q", res.Manifest.Trigger, res.Manifest.Version)
	}
	if e := res.Manifest.Entry("databases/postgresql/audit.pgdump"); e == nil || e.Service != "audit" || e.Size != int64(len(dump)) {
		t.Errorf("the dump's entry: %+v", e)
	}
	if !slices.ContainsFunc(events, func(p Progress) bool { return p.Item == dbdump.MongoDB && p.Phase == PhaseSkipped }) {
		t.Error("no progress event says the external MongoDB was skipped")
	}
	raw, err := os.ReadFile(store.Path + "/" + res.Name)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("pg-pw")) || bytes.Contains(raw, []byte("apiVersion: onprem.dev")) {
		t.Error("the backup file holds plain text: it is not encrypted")
	}
	if res.Size != int64(len(raw)) {
		t.Errorf("Result.Size %d, file %d bytes", res.Size, len(raw))
	}

	o, err := Open(ctx, store, res.Name, OpenOptions{Identities: []age.Identity{id}})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if o.State.Version != "1.2.3" || o.State.Installation != "acme" {
		t.Errorf("state read back: %+v", o.State)
	}
	if !strings.Contains(string(o.Config[ConfigKey]), "kind: Installation") {
		t.Errorf("configuration read back: %q", o.Config[ConfigKey])
	}
	got := map[string]SavedSecret{}
	for _, s := range o.Secrets {
		got[s.Namespace+"/"+s.Name] = s
	}
	for _, name := range []string{ns + "/onprem-pipelines-api-mongodb", ns + "/onprem-audit-postgresql", ns + "/onprem-redis", ns + "/operator-tls", "rt/cluster-prod"} {
		if _, ok := got[name]; !ok {
			t.Errorf("Secret %s is not in the backup", name)
		}
	}
	if _, ok := got[ns+"/not-ours"]; ok {
		t.Error("a Secret onprem did not generate and the configuration does not name is in the backup")
	}
	if !got[ns+"/operator-tls"].Operator || got[ns+"/onprem-redis"].Operator {
		t.Error("the operator's Secret is not marked Operator, or a generated one is")
	}
	if string(got[ns+"/onprem-audit-postgresql"].Data["password"]) != "pg-pw" {
		t.Error("a Secret's value did not survive the round trip")
	}
	r := o.Registrations
	if len(r.GitSources["rt1"]) != 1 || len(r.GitSources) != 1 {
		t.Fatalf("Git sources %v, want the one of the platform cluster's runtime", r.GitSources)
	}
	app := r.GitSources["rt1"][0]
	if _, ok := app["status"]; ok {
		t.Error("a Git source keeps its status")
	}
	if md := app["metadata"].(map[string]any); md["name"] != "apps-repo" || md["resourceVersion"] != nil {
		t.Errorf("a Git source's metadata: %v", md)
	}
	if !slices.Equal(r.ManagedClusters["rt1"], []string{"prod"}) {
		t.Errorf("managed clusters %v", r.ManagedClusters)
	}
	if !slices.ContainsFunc(r.NotCollected, func(s string) bool { return strings.Contains(s, "operator-gone") }) {
		t.Errorf("a named Secret that is missing is not reported: %v", r.NotCollected)
	}

	rex := &fakeExec{dumps: map[string][]byte{"audit": nil}}
	err = o.RestoreData(ctx, DataOptions{Client: fake.NewClientset(platformObjects()...), Exec: rex, Namespace: ns,
		Engines: map[string]bool{dbdump.PostgreSQL: true}})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rex.restored["audit"], dump) {
		t.Errorf("restored %d bytes, want the %d bytes dumped", len(rex.restored["audit"]), len(dump))
	}
	if !slices.Equal(o.Engines(), []string{dbdump.PostgreSQL}) {
		t.Errorf("Engines = %v", o.Engines())
	}

	// An engine external in the restoring installation is skipped.
	rex = &fakeExec{}
	var skipped []string
	err = o.RestoreData(ctx, DataOptions{Client: fake.NewClientset(), Exec: rex, Namespace: ns, Engines: map[string]bool{},
		Progress: func(p Progress) {
			if p.Phase == PhaseSkipped {
				skipped = append(skipped, p.Item)
			}
		}})
	if err != nil || len(rex.calls) != 0 || !slices.Equal(skipped, []string{"postgresql/audit"}) {
		t.Errorf("restore with PostgreSQL external: err %v, calls %v, skipped %v", err, rex.calls, skipped)
	}
}

// Open refuses a backup it cannot trust before anything is changed: the
// wrong key, a truncated file, a name that is not there.
func TestOpenRefusals(t *testing.T) {
	ctx := context.Background()
	id := newIdentity(t)
	store := backupstore.Dir{Path: t.TempDir()}
	res, err := Create(ctx, CreateOptions{Client: fake.NewClientset(platformObjects()...), Dynamic: dynamicClient(),
		Exec: &fakeExec{dumps: map[string][]byte{"audit": []byte("dump")}}, Namespace: ns, State: platformState(),
		Recipients: []age.Recipient{id.Recipient()}, Store: store, Name: "b" + backupfile.Extension})
	if err != nil {
		t.Fatal(err)
	}

	if _, err := Open(ctx, store, res.Name, OpenOptions{Identities: []age.Identity{newIdentity(t)}}); !backupfile.IsRefusal(err) {
		t.Errorf("Open with another key: %v, want a refusal", err)
	}
	if _, err := Open(ctx, store, "missing"+backupfile.Extension, OpenOptions{Identities: []age.Identity{id}}); err == nil {
		t.Error("Open of a missing name succeeded")
	}
	raw, err := os.ReadFile(store.Path + "/" + res.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(store.Path+"/cut"+backupfile.Extension, raw[:len(raw)-100], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenFile(ctx, store.Path+"/cut"+backupfile.Extension, OpenOptions{Identities: []age.Identity{id}}); !backupfile.IsRefusal(err) {
		t.Errorf("Open of a truncated file: %v, want a refusal", err)
	}
}

// A backup file without one of the entries a restore needs is refused as
// corrupt, naming the entry.
func TestOpenRefusesABackupWithoutItsState(t *testing.T) {
	id := newIdentity(t)
	dir := t.TempDir()
	f, err := os.Create(dir + "/partial" + backupfile.Extension)
	if err != nil {
		t.Fatal(err)
	}
	w, err := backupfile.NewWriter(f, []age.Recipient{id.Recipient()}, backupfile.Header{Installation: "acme", Namespace: ns, Version: "1.2.3", Created: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range []backupfile.Entry{{Name: entryConfig, Kind: backupfile.KindConfig}, {Name: entrySecrets, Kind: backupfile.KindSecrets}, {Name: entryRegistrations, Kind: backupfile.KindRegistrations}} {
		data := []byte("{}")
		if e.Name == entrySecrets {
			data = []byte("[]")
		}
		if _, err := w.Add(e, data); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = OpenFile(context.Background(), dir+"/partial"+backupfile.Extension, OpenOptions{Identities: []age.Identity{id}})
	var ce *backupfile.CorruptError
	if !errors.As(err, &ce) || ce.Entry != entryState {
		t.Fatalf("Open of a backup without %s: %v, want a CorruptError naming it", entryState, err)
	}
}

// Create refuses to back up nothing, or a platform halfway through another
// operation (unless it is the upgrade that backs up between its steps).
func TestCreateRefusals(t *testing.T) {
	ctx := context.Background()
	running := platformState()
	running.History = []state.Operation{{ID: "op-1", Kind: state.KindUpgrade, Outcome: state.OutcomeRunning, Started: time.Now()}}
	for _, tc := range []struct {
		name string
		st   *state.State
		want string
	}{
		{"no state", nil, "no platform is installed"},
		{"never installed", &state.State{Installation: "acme"}, "no platform is installed"},
		{"upgrade running", running, "operation op-1 (upgrade"},
	} {
		store := backupstore.Dir{Path: t.TempDir()}
		_, err := Create(ctx, CreateOptions{Client: fake.NewClientset(platformObjects()...), Dynamic: dynamicClient(), Exec: &fakeExec{},
			Namespace: ns, State: tc.st, Recipients: []age.Recipient{newIdentity(t).Recipient()}, Store: store})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
		if ents, _ := os.ReadDir(store.Path); len(ents) != 0 {
			t.Errorf("%s: the destination holds %d files", tc.name, len(ents))
		}
	}

	// The upgrade's own backup between its steps goes ahead.
	store := backupstore.Dir{Path: t.TempDir()}
	if _, err := Create(ctx, CreateOptions{Client: fake.NewClientset(platformObjects()...), Dynamic: dynamicClient(),
		Exec: &fakeExec{dumps: map[string][]byte{"audit": []byte("d")}}, Namespace: ns, State: running, BetweenSteps: true,
		Recipients: []age.Recipient{newIdentity(t).Recipient()}, Store: store, Name: "b" + backupfile.Extension}); err != nil {
		t.Errorf("a backup between an upgrade's steps: %v", err)
	}
}

// Without the configuration in the cluster nor given, Create says how to
// get one.
func TestCreateWithoutConfiguration(t *testing.T) {
	objs := platformObjects()[1:] // no ConfigSecret
	_, err := Create(context.Background(), CreateOptions{Client: fake.NewClientset(objs...), Dynamic: dynamicClient(), Exec: &fakeExec{},
		Namespace: ns, State: platformState(), Recipients: []age.Recipient{newIdentity(t).Recipient()}, Store: backupstore.Dir{Path: t.TempDir()}})
	if err == nil || !strings.Contains(err.Error(), "-c onprem.yaml") {
		t.Fatalf("Create without a configuration: %v", err)
	}
}

// A dump that fails leaves nothing at the destination.
func TestCreateFailureKeepsNothing(t *testing.T) {
	store := backupstore.Dir{Path: t.TempDir()}
	var failed []Progress
	_, err := Create(context.Background(), CreateOptions{Client: fake.NewClientset(platformObjects()...), Dynamic: dynamicClient(),
		Exec: &fakeExec{fail: errors.New("pg_dump: connection refused")}, Namespace: ns, State: platformState(),
		Recipients: []age.Recipient{newIdentity(t).Recipient()}, Store: store, Name: "b" + backupfile.Extension,
		Progress: func(p Progress) {
			if p.Phase == PhaseFailed {
				failed = append(failed, p)
			}
		}})
	if err == nil || !strings.Contains(err.Error(), "backing up postgresql/audit") || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("Create with a failing dump: %v", err)
	}
	if len(failed) != 1 || failed[0].Item != "postgresql/audit" {
		t.Errorf("failed events %+v", failed)
	}
	ents, _ := os.ReadDir(store.Path)
	for _, e := range ents {
		t.Errorf("the destination keeps %s", e.Name())
	}
}

// Where the backup may not list Secrets (the scheduled backup's Role names
// each one), it reads the generated Secrets one by one by the names the
// configuration Secret keeps, and only those that carry the label.
func TestGeneratedSecretsWhenListingIsForbidden(t *testing.T) {
	objs := append(platformObjects(),
		secret(ns, runnerRegistrations, generatedLabel, nil, map[string]string{"r1": "token"}))
	cfg := objs[0].(*corev1.Secret)
	cfg.Annotations[GeneratedSecretsAnnotation] += ",not-ours,onprem-missing"
	c := fake.NewClientset(objs...)
	c.PrependReactor("list", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == ns {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, "", errors.New("no list"))
		}
		return false, nil, nil
	})
	got, err := generatedSecrets(context.Background(), c, ns, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	want := []string{"onprem-pipelines-api-mongodb", "onprem-audit-postgresql", "onprem-redis", runnerRegistrations}
	if !slices.Equal(names, want) {
		t.Errorf("read %v, want %v", names, want)
	}

	// Without the configuration Secret's names, a forbidden list is an
	// error.
	if _, err := generatedSecrets(context.Background(), c, ns, nil); err == nil {
		t.Error("a forbidden list without the configuration Secret was not an error")
	}
}

func TestDatabases(t *testing.T) {
	objs := append(platformObjects(),
		secret(ns, "onprem-gitops-api-mongodb", generatedLabel, nil, map[string]string{"database": "gitops"}),
		secret(ns, "onprem-broken-mongodb", generatedLabel, nil, map[string]string{"password": "no database key"}),
		secret(ns, "other-x-postgresql", generatedLabel, nil, map[string]string{"database": "not_prefixed"}))
	got, err := Databases(context.Background(), fake.NewClientset(objs...), ns)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{dbdump.MongoDB: {"gitops", "pipelines_api"}, dbdump.PostgreSQL: {"audit"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Databases = %v, want %v", got, want)
	}
}

func TestSplitPath(t *testing.T) {
	for in, want := range map[string][2]string{
		"b.onprem-backup":        {".", "b.onprem-backup"},
		"/b.onprem-backup":       {"/", "b.onprem-backup"},
		"/srv/x/b.onprem-backup": {"/srv/x", "b.onprem-backup"},
		"rel/b":                  {"rel", "b"},
	} {
		if d, n := splitPath(in); d != want[0] || n != want[1] {
			t.Errorf("splitPath(%q) = %q, %q; want %q", in, d, n, want)
		}
	}
}
