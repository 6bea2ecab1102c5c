package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/version"
)

// fill sets every field of v (recursively, one element per slice and map)
// to a non-zero value, so that no field hides behind omitempty.
func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0))
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k)
		fill(e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	}
}

// jsonKeys collects every object key of a decoded JSON document.
func jsonKeys(v any, keys map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			keys[k] = true
			jsonKeys(e, keys)
		}
	case []any:
		for _, e := range v {
			jsonKeys(e, keys)
		}
	}
}

// TestNoSecretFields fails when a field that looks like it holds a secret
// value is added to the record: the state Secret must never contain one.
func TestNoSecretFields(t *testing.T) {
	var st State
	fill(reflect.ValueOf(&st).Elem())
	data, err := json.Marshal(&st)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	jsonKeys(doc, keys)
	delete(keys, "x") // the component name filled in by fill
	secretLike := regexp.MustCompile(`(?i)pass(word|wd|phrase)?|secret|token|key|credential|cert|private|salt|auth`)
	for k := range keys {
		if secretLike.MatchString(k) {
			t.Errorf("the state record has a field %q: it must not hold secret values (see the package documentation)", k)
		}
	}
	// Every field made it into the JSON (the check above saw them all).
	for _, want := range []string{"installation", "configDigest", "components", "chartVersion", "revision", "history",
		"fromVersion", "finished", "installer", "skippedChecks", "updatedAt", "bundles", "signer", "trustedBy", "unverified"} {
		if !keys[want] {
			t.Errorf("key %q missing from %s", want, data)
		}
	}
}

func newFakeStore() (*Store, *fake.Clientset) {
	c := fake.NewClientset()
	s := NewStore(c, "platform")
	return s, c
}

func TestLoadMissing(t *testing.T) {
	s, _ := newFakeStore()
	st, err := s.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Namespace != "platform" || st.Version != "" || st.Components == nil || len(st.History) != 0 || st.Stored() {
		t.Errorf("empty state = %+v", st)
	}
}

func TestSaveShape(t *testing.T) {
	s, c := newFakeStore()
	ctx := context.Background()
	st, _ := s.Load(ctx)
	st.Installation = "acme"
	st.Components["mongodb"] = Component{Chart: "mongodb", ChartVersion: "1.2.3", Release: "mongodb", Revision: 2, Digest: "sha256:ab", Status: "deployed"}
	if err := s.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	sec, err := c.CoreV1().Secrets("platform").Get(ctx, SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if sec.Type != "onprem.dev/state" || sec.Labels["app.kubernetes.io/managed-by"] != "onprem" || len(sec.Data) != 1 {
		t.Errorf("secret = type %q labels %v data keys %d", sec.Type, sec.Labels, len(sec.Data))
	}
	data := string(sec.Data["state.json"])
	if !strings.Contains(data, "\n  \"installation\": \"acme\"") || !strings.Contains(data, `"chartVersion": "1.2.3"`) {
		t.Errorf("state.json is not indented JSON of the state:\n%s", data)
	}
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Installation != "acme" || got.Components["mongodb"].Revision != 2 || !got.Stored() {
		t.Errorf("loaded %+v", got)
	}
}

func TestLoadCorrupt(t *testing.T) {
	for name, sec := range map[string]*corev1.Secret{
		"invalid JSON": {Type: SecretType, Data: map[string][]byte{DataKey: []byte(`{"version": "1.0",`)}},
		"wrong types":  {Type: SecretType, Data: map[string][]byte{DataKey: []byte(`{"history": {"a": 1}}`)}},
		"not object":   {Type: SecretType, Data: map[string][]byte{DataKey: []byte(`null`)}},
		"empty":        {Type: SecretType, Data: map[string][]byte{DataKey: nil}},
		"missing key":  {Type: SecretType, Data: map[string][]byte{"other": []byte(`{}`)}},
		"wrong type":   {Type: corev1.SecretTypeOpaque, Data: map[string][]byte{DataKey: []byte(`{}`)}},
	} {
		t.Run(name, func(t *testing.T) {
			sec.Name, sec.Namespace = SecretName, "platform"
			c := fake.NewClientset(sec)
			_, err := NewStore(c, "platform").Load(context.Background())
			var ce *CorruptError
			if !errors.As(err, &ce) {
				t.Fatalf("Load = %T %v, want *CorruptError", err, err)
			}
			want := `kubectl -n platform get secret onprem-state -o jsonpath='{.data.state\.json}' | base64 -d`
			if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "platform/onprem-state") {
				t.Errorf("message %q does not say how to inspect the Secret (%s)", err, want)
			}
		})
	}
}

func TestBeginFinish(t *testing.T) {
	s, _ := newFakeStore()
	ctx := context.Background()
	st, _ := s.Load(ctx)

	if err := s.Finish(ctx, st, OutcomeSucceeded, ""); err == nil {
		t.Error("Finish without Begin must fail")
	}
	if err := s.Begin(ctx, st, Operation{Kind: "deploy"}); err == nil {
		t.Error("Begin with an unknown kind must fail")
	}

	if err := s.Begin(ctx, st, Operation{Kind: KindInstall, Version: "1.0.0", Components: []string{"mongodb"}}); err != nil {
		t.Fatal(err)
	}
	op := st.History[0]
	if op.Outcome != OutcomeRunning || op.ID == "" || op.Started.IsZero() || op.Installer != version.Version || op.Host == "" || st.Running() == nil {
		t.Errorf("begun op = %+v", op)
	}
	if st.Version != "" {
		t.Error("Version set before success")
	}
	if err := s.Finish(ctx, st, "done", ""); err == nil {
		t.Error("Finish with an unknown outcome must fail")
	}
	if err := s.Finish(ctx, st, OutcomeSucceeded, "installed"); err != nil {
		t.Fatal(err)
	}
	if st.Version != "1.0.0" || st.History[0].Outcome != OutcomeSucceeded || st.History[0].Finished.IsZero() || st.Running() != nil {
		t.Errorf("after success: version %q op %+v", st.Version, st.History[0])
	}

	// An upgrade that fails leaves the version; FromVersion defaults to it.
	if err := s.Begin(ctx, st, Operation{Kind: KindUpgrade, Version: "1.1.0"}); err != nil {
		t.Fatal(err)
	}
	if st.History[1].FromVersion != "1.0.0" {
		t.Errorf("FromVersion = %q", st.History[1].FromVersion)
	}
	if err := s.Finish(ctx, st, OutcomeFailed, "mongodb not ready"); err != nil {
		t.Fatal(err)
	}
	if st.Version != "1.0.0" {
		t.Errorf("a failed upgrade changed Version to %q", st.Version)
	}

	// The record in the cluster matches.
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != "1.0.0" || len(got.History) != 2 || got.History[1].Message != "mongodb not ready" {
		t.Errorf("loaded %+v", got)
	}

	// A successful uninstall clears the version.
	if err := s.Begin(ctx, got, Operation{Kind: KindUninstall}); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(ctx, got, OutcomeSucceeded, ""); err != nil {
		t.Fatal(err)
	}
	if got.Version != "" {
		t.Errorf("Version after uninstall = %q", got.Version)
	}
}

func TestBeginClosesInterrupted(t *testing.T) {
	s, _ := newFakeStore()
	ctx := context.Background()
	st, _ := s.Load(ctx)
	if err := s.Begin(ctx, st, Operation{Kind: KindInstall, Version: "1.0.0"}); err != nil {
		t.Fatal(err)
	}
	// That onprem was killed; a new one loads the state and begins again.
	st2, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Begin(ctx, st2, Operation{Kind: KindInstall, Version: "1.0.0"}); err != nil {
		t.Fatal(err)
	}
	first, second := st2.History[0], st2.History[1]
	if first.Outcome != OutcomeFailed || !strings.Contains(first.Message, "interrupted") || !strings.Contains(first.Message, second.ID) || first.Finished.IsZero() {
		t.Errorf("interrupted op = %+v", first)
	}
	if second.Outcome != OutcomeRunning || st2.Running().ID != second.ID {
		t.Errorf("new op = %+v", second)
	}
}

func TestHistoryBounded(t *testing.T) {
	s, _ := newFakeStore()
	ctx := context.Background()
	st, _ := s.Load(ctx)
	ids := map[string]bool{}
	for i := range MaxHistory + 50 {
		if err := s.Begin(ctx, st, Operation{Kind: KindUpgrade, Version: fmt.Sprintf("1.%d.0", i)}); err != nil {
			t.Fatal(err)
		}
		id := st.History[len(st.History)-1].ID
		if ids[id] {
			t.Fatalf("duplicate operation ID %s", id)
		}
		ids[id] = true
		if err := s.Finish(ctx, st, OutcomeSucceeded, ""); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.History) != MaxHistory {
		t.Fatalf("history has %d operations, want %d", len(got.History), MaxHistory)
	}
	if first, last := got.History[0].Version, got.History[MaxHistory-1].Version; first != "1.50.0" || last != "1.249.0" {
		t.Errorf("history keeps %s..%s, want the newest 1.50.0..1.249.0", first, last)
	}
	if got.Version != "1.249.0" {
		t.Errorf("Version = %s", got.Version)
	}
}

func TestRecordSizeBounded(t *testing.T) {
	st := &State{Namespace: "platform"}
	big := strings.Repeat("m", 10<<10)
	for range MaxHistory {
		st.History = append(st.History, Operation{Kind: KindInstall, Outcome: OutcomeFailed, Message: big})
	}
	data, err := encode(st)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > maxRecordBytes || len(st.History) == 0 || len(st.History) == MaxHistory {
		t.Errorf("record of %d bytes with %d operations", len(data), len(st.History))
	}
}

func TestSaveFailureLeavesState(t *testing.T) {
	s, c := newFakeStore()
	ctx := context.Background()
	st, _ := s.Load(ctx)
	if err := s.Save(ctx, st); err != nil {
		t.Fatal(err)
	}
	// Someone deletes the record: Begin's save fails as a conflict and the
	// in-memory state is unchanged.
	if err := c.CoreV1().Secrets("platform").Delete(ctx, SecretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := s.Begin(ctx, st, Operation{Kind: KindInstall})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("Begin = %v, want a conflict", err)
	}
	if len(st.History) != 0 {
		t.Errorf("history after a failed Begin: %+v", st.History)
	}
	if err := s.Delete(ctx); err != nil {
		t.Errorf("Delete of a missing record = %v", err)
	}
}
