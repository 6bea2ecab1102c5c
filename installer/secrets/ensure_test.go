package secrets

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/credentials"
)

const ns = "onprem"

var secretsGVR = corev1.SchemeGroupVersion.WithResource("secrets")

func fullPlan(mongoUsers ...string) []credentials.Secret {
	return credentials.Plan(credentials.Needs{
		Internal:        map[string]bool{"mongodb": true, "postgresql": true, "redis": true, "rabbitmq": true},
		MongoDBUsers:    append([]string{"pipelines-api", "gitops-api"}, mongoUsers...),
		PostgreSQLUsers: []string{"audit-manager"},
		PlatformKeys:    true,
		SelfSignedTLS:   true,
	})
}

func names(plan []credentials.Secret) []string {
	var out []string
	for _, s := range plan {
		out = append(out, s.Name)
	}
	return out
}

func planned(plan []credentials.Secret, name string) credentials.Secret {
	for _, s := range plan {
		if s.Name == name {
			return s
		}
	}
	panic("not planned: " + name)
}

var opts = GenerateOptions{Domain: testDomain}

// snapshot reads every Secret of the namespace.
func snapshot(t *testing.T, c kubernetes.Interface, namespace string) map[string]*corev1.Secret {
	t.Helper()
	list, err := c.CoreV1().Secrets(namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Secret{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

func sameData(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, bytes.Equal)
}

// noLeak fails when the error's message holds any value of any Secret.
func noLeak(t *testing.T, err error, secrets map[string]*corev1.Secret) {
	t.Helper()
	if err == nil {
		return
	}
	for name, s := range secrets {
		for k, v := range s.Data {
			if len(v) >= 8 && strings.Contains(err.Error(), string(v)) {
				t.Errorf("error message holds the value of %s/%s", name, k)
			}
		}
	}
}

func checkCreated(t *testing.T, s *corev1.Secret, p credentials.Secret) {
	t.Helper()
	for k, v := range map[string]string{LabelManagedBy: "onprem", LabelPartOf: "onprem", LabelGenerated: "true"} {
		if s.Labels[k] != v {
			t.Errorf("%s: label %s = %q, want %q", s.Name, k, s.Labels[k], v)
		}
	}
	if s.Annotations[AnnotationPurpose] != p.Purpose || p.Purpose == "" {
		t.Errorf("%s: purpose %q, want %q", s.Name, s.Annotations[AnnotationPurpose], p.Purpose)
	}
	if string(s.Type) != p.Type {
		t.Errorf("%s: type %s, want %s", s.Name, s.Type, p.Type)
	}
	want := len(p.Keys)
	if slices.ContainsFunc(p.Keys, func(k credentials.Key) bool { return k.Name == KeyCACert && k.Kind == credentials.TLSPair }) {
		want++ // the CA's key, kept beside its certificate
	}
	if len(s.Data) != want {
		t.Errorf("%s: %d keys, want %d", s.Name, len(s.Data), want)
	}
	for _, k := range p.Keys {
		v := s.Data[k.Name]
		switch k.Kind {
		case credentials.Password:
			if len(v) != 32 || bytes.Count(v, []byte{0}) > 0 {
				t.Errorf("%s/%s: not a password", s.Name, k.Name)
			}
		case credentials.Fixed:
			if string(v) != k.Value {
				t.Errorf("%s/%s = %q, want %q", s.Name, k.Name, v, k.Value)
			}
		case credentials.RandomKey:
			if len(v) != 44 {
				t.Errorf("%s/%s: not a base64 key", s.Name, k.Name)
			}
		case credentials.TLSPair:
			if !bytes.HasPrefix(v, []byte("-----BEGIN ")) {
				t.Errorf("%s/%s: not PEM", s.Name, k.Name)
			}
		}
	}
}

func TestEnsureCreatesOnceAndKeeps(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	plan := fullPlan()
	r, err := Ensure(ctx, c, ns, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Created, names(plan)) || len(r.Unchanged)+len(r.Completed)+len(r.Provided) != 0 {
		t.Fatalf("first run: %+v", r)
	}
	first := snapshot(t, c, ns)
	for _, p := range plan {
		checkCreated(t, first[p.Name], p)
	}
	if got := first[credentials.MongoDBAdmin].Annotations[AnnotationPublicKeys]; got != "username" {
		t.Errorf("public keys of the MongoDB admin: %q", got)
	}
	if got := first[credentials.TLS].Annotations[AnnotationPublicKeys]; got != "ca.crt,tls.crt" {
		t.Errorf("public keys of the TLS pair: %q", got)
	}
	if _, ok := first[credentials.Redis].Annotations[AnnotationPublicKeys]; ok {
		t.Error("the Redis Secret has public keys")
	}

	c.ClearActions()
	r, err = Ensure(ctx, c, ns, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Unchanged, names(plan)) || len(r.Created)+len(r.Completed) != 0 {
		t.Fatalf("second run: %+v", r)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("second run did %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	for name, s := range snapshot(t, c, ns) {
		if !sameData(s.Data, first[name].Data) {
			t.Errorf("%s changed", name)
		}
	}
}

// Another installer creates the Secret between our Get and our Create: its
// values are kept and reported as unchanged.
func TestEnsureLosingTheCreateRace(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	plan := fullPlan()
	theirs := newSecret(ns, planned(plan, credentials.Redis), map[string][]byte{"password": []byte("their-password-0123456789abcdefg")})
	raced := false
	c.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*corev1.Secret)
		if obj.Name != credentials.Redis || raced {
			return false, nil, nil
		}
		raced = true
		if err := c.Tracker().Create(secretsGVR, theirs.DeepCopy(), ns); err != nil {
			t.Fatal(err)
		}
		return true, nil, apierrors.NewAlreadyExists(secretsGVR.GroupResource(), obj.Name)
	})
	r, err := Ensure(ctx, c, ns, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !raced || !slices.Equal(r.Unchanged, []string{credentials.Redis}) || slices.Contains(r.Created, credentials.Redis) || len(r.Created) != len(plan)-1 {
		t.Fatalf("report %+v", r)
	}
	got := snapshot(t, c, ns)[credentials.Redis]
	if !sameData(got.Data, theirs.Data) {
		t.Error("the other installer's password was overwritten")
	}
}

// rabbitMQWithoutCookie is a generated RabbitMQ Secret that lost its
// erlang-cookie key.
func rabbitMQWithoutCookie(plan []credentials.Secret) *corev1.Secret {
	return newSecret(ns, planned(plan, credentials.RabbitMQ), map[string][]byte{
		"username": []byte("onprem"), "password": []byte("keep-this-password-0123456789abc")})
}

func TestEnsureCompletesOnlyMissingKeys(t *testing.T) {
	ctx := context.Background()
	plan := fullPlan()
	old := rabbitMQWithoutCookie(plan)
	c := fake.NewClientset(old.DeepCopy())
	r, err := Ensure(ctx, c, ns, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Completed, []string{credentials.RabbitMQ}) || len(r.Created) != len(plan)-1 {
		t.Fatalf("report %+v", r)
	}
	got := snapshot(t, c, ns)[credentials.RabbitMQ]
	if string(got.Data["password"]) != string(old.Data["password"]) || string(got.Data["username"]) != "onprem" {
		t.Error("an existing value changed")
	}
	if len(got.Data["erlang-cookie"]) != 32 {
		t.Error("the erlang-cookie was not added")
	}
}

// Another installer completes the Secret between our Get and our Update:
// the Update fails with a conflict, and on re-reading nothing is missing.
func TestEnsureLosingTheUpdateRace(t *testing.T) {
	ctx := context.Background()
	plan := fullPlan()
	c := fake.NewClientset(rabbitMQWithoutCookie(plan))
	theirs := rabbitMQWithoutCookie(plan)
	theirs.Data["erlang-cookie"] = []byte("their-cookie-0123456789abcdefghi")
	updates := 0
	c.PrependReactor("update", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		if updates == 1 {
			if err := c.Tracker().Update(secretsGVR, theirs.DeepCopy(), ns); err != nil {
				t.Fatal(err)
			}
			return true, nil, apierrors.NewConflict(secretsGVR.GroupResource(), credentials.RabbitMQ, nil)
		}
		return false, nil, nil
	})
	r, err := Ensure(ctx, c, ns, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	if updates != 1 || !slices.Equal(r.Unchanged, []string{credentials.RabbitMQ}) || len(r.Completed) != 0 {
		t.Fatalf("%d updates, report %+v", updates, r)
	}
	if got := snapshot(t, c, ns)[credentials.RabbitMQ]; !sameData(got.Data, theirs.Data) {
		t.Error("the other installer's cookie was overwritten")
	}
}

// A conflict caused by an unrelated change is retried on the fresh object,
// which keeps the other change.
func TestEnsureRetriesAnUnrelatedConflict(t *testing.T) {
	ctx := context.Background()
	plan := fullPlan()
	c := fake.NewClientset(rabbitMQWithoutCookie(plan))
	updates := 0
	c.PrependReactor("update", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		if updates == 1 {
			other := rabbitMQWithoutCookie(plan)
			other.Labels["team"] = "platform"
			if err := c.Tracker().Update(secretsGVR, other, ns); err != nil {
				t.Fatal(err)
			}
			return true, nil, apierrors.NewConflict(secretsGVR.GroupResource(), credentials.RabbitMQ, nil)
		}
		return false, nil, nil
	})
	r, err := Ensure(ctx, c, ns, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	if updates != 2 || !slices.Equal(r.Completed, []string{credentials.RabbitMQ}) {
		t.Fatalf("%d updates, report %+v", updates, r)
	}
	got := snapshot(t, c, ns)[credentials.RabbitMQ]
	if got.Labels["team"] != "platform" || len(got.Data["erlang-cookie"]) != 32 || string(got.Data["password"]) != "keep-this-password-0123456789abc" {
		t.Errorf("after the retry: labels %v, keys %v", got.Labels, slices.Sorted(maps.Keys(got.Data)))
	}
}

func TestEnsureGivesUpOnEndlessConflicts(t *testing.T) {
	plan := fullPlan()
	c := fake.NewClientset(rabbitMQWithoutCookie(plan))
	updates := 0
	c.PrependReactor("update", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		updates++
		return true, nil, apierrors.NewConflict(secretsGVR.GroupResource(), credentials.RabbitMQ, nil)
	})
	_, err := Ensure(context.Background(), c, ns, plan, opts)
	if err == nil || !strings.Contains(err.Error(), "kept changing") || updates != maxAttempts {
		t.Fatalf("%d updates: %v", updates, err)
	}
	noLeak(t, err, snapshot(t, c, ns))
}

func operatorSecret(name string, typ corev1.SecretType, data map[string]string) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"owner": "ops"}},
		Type: typ, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func TestEnsureNeverTouchesTheOperatorsSecret(t *testing.T) {
	ctx := context.Background()
	plan := fullPlan()
	mine := operatorSecret(credentials.RabbitMQ, corev1.SecretTypeOpaque, map[string]string{"username": "ops-user", "password": "ops-password-value-123"})
	c := fake.NewClientset(mine.DeepCopy())
	r, err := Ensure(ctx, c, ns, plan, opts)
	if err == nil {
		t.Fatalf("accepted an operator's Secret without every key: %+v", r)
	}
	msg := err.Error()
	for _, want := range []string{"onprem/onprem-rabbitmq", "not generated by onprem", "Rename or delete", "erlang-cookie", "username, password, erlang-cookie", "no Secret was changed"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not say %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "ops-password") {
		t.Error("error holds the operator's password")
	}
	after := snapshot(t, c, ns)
	if len(after) != 1 || !sameData(after[credentials.RabbitMQ].Data, mine.Data) || after[credentials.RabbitMQ].Labels[LabelGenerated] != "" {
		t.Errorf("Ensure changed something: %v", slices.Sorted(maps.Keys(after)))
	}

	// With every key it is the operator's value, used as it is.
	mine.Data["erlang-cookie"] = []byte("ops-cookie-value-123456")
	c = fake.NewClientset(mine.DeepCopy())
	r, err = Ensure(ctx, c, ns, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Provided, []string{credentials.RabbitMQ}) || len(r.Created) != len(plan)-1 {
		t.Errorf("report %+v", r)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "update" {
			t.Error("an update was made")
		}
	}
	if got := snapshot(t, c, ns)[credentials.RabbitMQ]; !sameData(got.Data, mine.Data) {
		t.Error("the operator's Secret changed")
	}

	// The wrong type is refused.
	tlsMine := operatorSecret(credentials.TLS, corev1.SecretTypeOpaque, map[string]string{"tls.crt": "x", "tls.key": "y", "ca.crt": "z"})
	c = fake.NewClientset(tlsMine)
	if _, err := Ensure(ctx, c, ns, plan, opts); err == nil || !strings.Contains(err.Error(), "kubernetes.io/tls") {
		t.Errorf("operator's TLS Secret of type Opaque: %v", err)
	}
}

func TestEnsureRefusesWhatItCannotComplete(t *testing.T) {
	ctx := context.Background()
	plan := fullPlan()
	wrongType := newSecret(ns, planned(plan, credentials.Redis), map[string][]byte{"password": []byte("redis-password-0123456789abcdefg")})
	wrongType.Type = "example.com/other"

	pair, err := Generate(planned(plan, credentials.TLS), opts)
	if err != nil {
		t.Fatal(err)
	}
	delete(pair, "tls.key")
	partialTLS := newSecret(ns, planned(plan, credentials.TLS), pair)

	immutable := rabbitMQWithoutCookie(plan)
	yes := true
	immutable.Immutable = &yes

	c := fake.NewClientset(wrongType, partialTLS, immutable)
	before := snapshot(t, c, ns)
	c.ClearActions()
	_, err = Ensure(ctx, c, ns, plan, opts)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		"onprem/onprem-redis was generated by onprem with type example.com/other but the Redis password needs type Opaque",
		"onprem/onprem-tls holds only part of its TLS pair (has tls.crt, ca.crt, lacks tls.key)",
		"onprem/onprem-rabbitmq is immutable and lacks key(s) erlang-cookie",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q:\n%v", want, err)
		}
	}
	noLeak(t, err, before)
	for _, a := range c.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("%s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

func TestEnsureRejectsABadPlanBeforeTouchingAnything(t *testing.T) {
	for name, plan := range map[string][]credentials.Secret{
		"unknown kind": append(fullPlan(), oneKey("magic", "")),
		"twice":        append(fullPlan(), planned(fullPlan(), credentials.Redis)),
		"bad key":      {{Name: "onprem-x", Keys: []credentials.Key{{Name: "a/b", Kind: credentials.Password}}}},
		"bad tls key":  {{Name: "onprem-x", Keys: []credentials.Key{{Name: "cert", Kind: credentials.TLSPair}}}},
		"fixed empty":  {{Name: "onprem-x", Keys: []credentials.Key{{Name: "user", Kind: credentials.Fixed}}}},
		"no keys":      {{Name: "onprem-x"}},
		"bad name":     {{Name: "Onprem_X", Keys: []credentials.Key{{Name: "p", Kind: credentials.Password}}}},
	} {
		c := fake.NewClientset()
		if _, err := Ensure(context.Background(), c, ns, plan, opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
		if len(c.Actions()) != 0 {
			t.Errorf("%s: %d API calls", name, len(c.Actions()))
		}
	}
}

// Without a domain the TLS pair cannot be made: the Secrets before it in
// the plan are created, the error says why, and a later run with the domain
// finishes the job without changing them.
func TestEnsureWithoutDomain(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	plan := fullPlan()
	_, err := Ensure(ctx, c, ns, plan, GenerateOptions{})
	if err == nil || !strings.Contains(err.Error(), "domain") {
		t.Fatalf("no domain: %v", err)
	}
	before := snapshot(t, c, ns)
	r, err := Ensure(ctx, c, ns, plan, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Created, []string{credentials.TLS}) {
		t.Errorf("report %+v", r)
	}
	for name, s := range before {
		if !sameData(s.Data, snapshot(t, c, ns)[name].Data) {
			t.Errorf("%s changed", name)
		}
	}
}

func TestValues(t *testing.T) {
	ctx := context.Background()
	plan := fullPlan()
	c := fake.NewClientset(operatorSecret("ops-db", corev1.SecretTypeOpaque, map[string]string{"password": "ops-password-value"}))
	if _, err := Ensure(ctx, c, ns, plan, opts); err != nil {
		t.Fatal(err)
	}
	all := snapshot(t, c, ns)
	vals, err := Values(ctx, c, ns, append(names(plan), "ops-db", "absent", credentials.Redis))
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	for _, name := range slices.Sorted(maps.Keys(all)) {
		if name == "ops-db" {
			continue
		}
		s := all[name]
		for _, k := range slices.Sorted(maps.Keys(s.Data)) {
			switch k {
			case "username", "database", "tls.crt", "ca.crt":
			default:
				want = append(want, s.Data[k])
			}
		}
	}
	if !slices.EqualFunc(vals, want, bytes.Equal) {
		t.Errorf("Values gave %d values, want %d (passwords, keys, tls.key and ca.key of the generated Secrets)", len(vals), len(want))
	}
	// 9 Secrets: 8 passwords (root, postgres, redis, rabbitmq x2, 3 services), 2 keys, tls.key, ca.key.
	if len(vals) != 12 {
		t.Errorf("%d values, want 12", len(vals))
	}
}
