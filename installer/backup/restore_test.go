package backup

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/backupfile"
)

func saved(name string, operator bool, data map[string]string) SavedSecret {
	s := SavedSecret{Namespace: "old-ns", Name: name, Type: "Opaque", Operator: operator, Data: map[string][]byte{}}
	for k, v := range data {
		s.Data[k] = []byte(v)
	}
	return s
}

func secretValue(t *testing.T, c *fake.Clientset, namespace, name, key string) string {
	t.Helper()
	s, err := c.CoreV1().Secrets(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Secret %s/%s: %v", namespace, name, err)
	}
	return string(s.Data[key])
}

// With SecretsRefuse, one Secret with other values stops the restore
// before any Secret is written, the missing ones included.
func TestRestoreSecretsRefusesConflictsBeforeWriting(t *testing.T) {
	c := fake.NewClientset(
		secret(ns, "same", nil, nil, map[string]string{"password": "a"}),
		secret(ns, "changed", nil, nil, map[string]string{"password": "live"}),
	)
	in := []SavedSecret{saved("missing", false, map[string]string{"password": "m"}), saved("same", false, map[string]string{"password": "a"}),
		saved("changed", false, map[string]string{"password": "backup"})}
	rep, err := RestoreSecrets(context.Background(), c, ns, in, SecretsRefuse)
	var ce *SecretConflictError
	if !errors.As(err, &ce) || !slices.Equal(ce.Names, []string{"changed"}) || ce.Namespace != ns {
		t.Fatalf("RestoreSecrets: %v, %v; want a conflict on changed", rep, err)
	}
	if !strings.Contains(err.Error(), "--force") {
		t.Errorf("the refusal does not say how to go on: %v", err)
	}
	if _, err := c.CoreV1().Secrets(ns).Get(context.Background(), "missing", metav1.GetOptions{}); err == nil {
		t.Error("a missing Secret was created although the restore was refused")
	}
	if got := secretValue(t, c, ns, "changed", "password"); got != "live" {
		t.Errorf("the conflicting Secret was changed to %q", got)
	}
}

func TestRestoreSecretsModes(t *testing.T) {
	for _, tc := range []struct {
		mode        SecretsMode
		wantChanged string
		want        SecretsReport
	}{
		{SecretsMissing, "live", SecretsReport{Created: []string{"missing"}, Unchanged: []string{"same"}, Kept: []string{"changed"}}},
		{SecretsReplace, "backup", SecretsReport{Created: []string{"missing"}, Unchanged: []string{"same"}, Replaced: []string{"changed"}}},
	} {
		c := fake.NewClientset(
			secret(ns, "same", nil, nil, map[string]string{"password": "a"}),
			secret(ns, "changed", map[string]string{"keep": "me"}, nil, map[string]string{"password": "live"}),
		)
		in := []SavedSecret{saved("missing", false, map[string]string{"password": "m"}), saved("same", false, map[string]string{"password": "a"}),
			saved("changed", false, map[string]string{"password": "backup"})}
		rep, err := RestoreSecrets(context.Background(), c, ns, in, tc.mode)
		if err != nil {
			t.Fatalf("mode %d: %v", tc.mode, err)
		}
		if !slices.Equal(rep.Created, tc.want.Created) || !slices.Equal(rep.Unchanged, tc.want.Unchanged) ||
			!slices.Equal(rep.Kept, tc.want.Kept) || !slices.Equal(rep.Replaced, tc.want.Replaced) {
			t.Errorf("mode %d: report %+v, want %+v", tc.mode, *rep, tc.want)
		}
		// Created in the namespace restored into, not the one saved.
		if got := secretValue(t, c, ns, "missing", "password"); got != "m" {
			t.Errorf("mode %d: created Secret holds %q", tc.mode, got)
		}
		if got := secretValue(t, c, ns, "changed", "password"); got != tc.wantChanged {
			t.Errorf("mode %d: changed Secret holds %q, want %q", tc.mode, got, tc.wantChanged)
		}
	}
}

// The operator's own Secrets are only ever created where missing, even
// when the generated ones are replaced; Secrets of other namespaces (a
// runtime's) are not restored with the platform's.
func TestOpenedRestoreSecretsKeepsTheOperatorsSecrets(t *testing.T) {
	o := &Opened{Manifest: &backupfile.Manifest{Header: backupfile.Header{Namespace: "old-ns"}}, Secrets: []SavedSecret{
		saved("onprem-x", false, map[string]string{"password": "backup"}),
		saved("operator-tls", true, map[string]string{"tls.key": "backup"}),
		saved("operator-pull", true, map[string]string{"auth": "backup"}),
		{Namespace: "rt", Name: "cluster-prod", Data: map[string][]byte{"server": []byte("x")}},
	}}
	c := fake.NewClientset(
		secret(ns, "onprem-x", nil, nil, map[string]string{"password": "live"}),
		secret(ns, "operator-tls", nil, nil, map[string]string{"tls.key": "live"}),
	)
	rep, err := o.RestoreSecrets(context.Background(), c, ns, SecretsReplace)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Replaced, []string{"onprem-x"}) || !slices.Equal(rep.Kept, []string{"operator-tls"}) || !slices.Equal(rep.Created, []string{"operator-pull"}) {
		t.Errorf("report %+v", *rep)
	}
	if got := secretValue(t, c, ns, "operator-tls", "tls.key"); got != "live" {
		t.Errorf("the operator's Secret was replaced: %q", got)
	}
	if _, err := c.CoreV1().Secrets("rt").Get(context.Background(), "cluster-prod", metav1.GetOptions{}); err == nil {
		t.Error("a runtime's Secret was restored with the platform's")
	}
	if got := o.RuntimeSecrets("rt"); len(got) != 1 || got[0].Name != "cluster-prod" {
		t.Errorf("RuntimeSecrets(rt) = %v", got)
	}
}

// Close forgets the Secrets' values.
func TestOpenedCloseClearsValues(t *testing.T) {
	s := saved("x", false, map[string]string{"password": "secret"})
	o := &Opened{Secrets: []SavedSecret{s}}
	o.Close()
	if string(s.Data["password"]) == "secret" {
		t.Error("Close left a Secret's value in memory")
	}
}

func TestSameData(t *testing.T) {
	a := map[string][]byte{"k": []byte("v")}
	for _, tc := range []struct {
		b    map[string][]byte
		want bool
	}{
		{map[string][]byte{"k": []byte("v")}, true},
		{map[string][]byte{"k": []byte("w")}, false},
		{map[string][]byte{"j": []byte("v")}, false},
		{map[string][]byte{"k": []byte("v"), "j": nil}, false},
		{nil, false},
	} {
		if got := sameData(a, tc.b); got != tc.want {
			t.Errorf("sameData(%v, %v) = %v", a, tc.b, got)
		}
	}
}
