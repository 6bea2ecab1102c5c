package runner

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/state"
)

func tokenOf(t *testing.T, c *fake.Clientset, ns string) []byte {
	t.Helper()
	s, err := c.CoreV1().Secrets(ns).Get(context.Background(), TokenSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Data[TokenKey]
}

// The token is generated once, from 256 random bits, and never changed:
// not by a re-run, nor when the runner's Secret is lost while the platform
// still has the registration.
func TestTokenGeneratedOnce(t *testing.T) {
	ctx := context.Background()
	remote, platform := fake.NewClientset(), fake.NewClientset()

	tok, created, err := ensureToken(ctx, remote, "ci", "gpu", nil)
	if err != nil || !created {
		t.Fatalf("first: created %v, %v", created, err)
	}
	if len(tok) != 43 || strings.ContainsAny(string(tok), "+/=") {
		t.Errorf("token is %d characters, or not base64url; want 43 base64url characters", len(tok))
	}
	if err := register(ctx, platform, "onprem", "gpu", tok); err != nil {
		t.Fatal(err)
	}
	first := bytes.Clone(tok)

	again, created, err := ensureToken(ctx, remote, "ci", "gpu", first)
	if err != nil || created || !bytes.Equal(again, first) {
		t.Fatalf("second: created %v, same %v, %v", created, bytes.Equal(again, first), err)
	}
	if err := register(ctx, platform, "onprem", "gpu", again); err != nil {
		t.Fatal(err)
	}
	rv := func() string {
		s, _ := platform.CoreV1().Secrets("onprem").Get(ctx, Registrations, metav1.GetOptions{})
		return s.ResourceVersion
	}
	before := rv()
	if err := register(ctx, platform, "onprem", "gpu", first); err != nil || rv() != before {
		t.Errorf("registering the same token again changed the Secret (%v)", err)
	}

	// The runner's namespace was deleted by hand: the registered token
	// comes back, not a new one.
	if err := remote.CoreV1().Secrets("ci").Delete(ctx, TokenSecret, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	reg, err := registeredToken(ctx, platform, "onprem", "gpu")
	if err != nil || !bytes.Equal(reg, first) {
		t.Fatalf("registered = %v", err)
	}
	restored, created, err := ensureToken(ctx, remote, "ci", "gpu", reg)
	if err != nil || created || !bytes.Equal(restored, first) || !bytes.Equal(tokenOf(t, remote, "ci"), first) {
		t.Errorf("restored: created %v, %v", created, err)
	}

	// Two runners get two tokens; the Secret keys them by name.
	other, _, err := ensureToken(ctx, remote, "ci-b", "b", nil)
	if err != nil || bytes.Equal(other, first) {
		t.Fatalf("second runner: %v", err)
	}
	if err := register(ctx, platform, "onprem", "b", other); err != nil {
		t.Fatal(err)
	}
	s, _ := platform.CoreV1().Secrets("onprem").Get(ctx, Registrations, metav1.GetOptions{})
	if len(s.Data) != 2 || !bytes.Equal(s.Data["gpu"], first) || !bytes.Equal(s.Data["b"], other) || s.Labels["onprem.dev/generated"] != "true" {
		t.Errorf("registrations = %d keys, labels %v", len(s.Data), s.Labels)
	}
	if err := unregister(ctx, platform, "onprem", "gpu"); err != nil {
		t.Fatal(err)
	}
	if err := unregister(ctx, platform, "onprem", "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := platform.CoreV1().Secrets("onprem").Get(ctx, Registrations, metav1.GetOptions{}); err == nil {
		t.Error("the registrations Secret outlived its last runner")
	}
}

// A token that differs between the two sides is an error that changes
// neither and shows neither.
func TestTokenMismatch(t *testing.T) {
	ctx := context.Background()
	remote := fake.NewClientset()
	tok, _, err := ensureToken(ctx, remote, "ci", "gpu", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ensureToken(ctx, remote, "ci", "gpu", []byte("something-else-entirely-registered-by-hand"))
	var tm *TokenMismatchError
	if !errors.As(err, &tm) || strings.Contains(err.Error(), string(tok)) || strings.Contains(err.Error(), "something-else") {
		t.Fatalf("err = %v", err)
	}
	if !bytes.Equal(tokenOf(t, remote, "ci"), tok) {
		t.Error("the runner's token changed")
	}
}

func TestCheckPlace(t *testing.T) {
	p := &Platform{
		Cluster:   &kube.Cluster{Server: "https://platform"},
		Namespace: "onprem",
		State: &state.State{Runners: map[string]state.Runner{
			"gpu": {Server: "https://gpu", Context: "gpu", Namespace: "onprem-runner-gpu", EngineNamespace: "onprem-runner-gpu-engine"},
			"a":   {Server: "https://platform", Namespace: "ci", EngineNamespace: "ci-engine"},
		}},
	}
	for _, c := range []struct {
		name, server, ns string
		want             string // "" ok
	}{
		{"gpu", "https://gpu", "onprem-runner-gpu", ""},
		{"gpu", "https://platform", "onprem-runner-gpu", `runner gpu is already installed on the cluster at https://gpu (context "gpu") in namespace onprem-runner-gpu`},
		{"gpu", "https://gpu", "other", "already installed"},
		{"b", "https://platform", "onprem", "the platform's own"},
		{"b", "https://platform", "ci", "runner a's"},
		{"b", "https://platform", "ci-engine", "runner a's"},
		{"b", "https://gpu", "ci", ""},
		{"a", "https://platform", "ci", ""},
	} {
		err := CheckPlace(p, c.name, c.server, c.ns)
		var ce *attachment.ConflictError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s at %s/%s: %v", c.name, c.server, c.ns, err)
		case c.want != "" && (!errors.As(err, &ce) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s at %s/%s: %v, want %q", c.name, c.server, c.ns, err, c.want)
		}
	}
}

// The token Secret is labelled for cleanup and says what it is, but its
// value is its only secret.
func TestTokenSecretShape(t *testing.T) {
	remote := fake.NewClientset()
	if _, _, err := ensureToken(context.Background(), remote, "ci", "gpu", nil); err != nil {
		t.Fatal(err)
	}
	s, _ := remote.CoreV1().Secrets("ci").Get(context.Background(), TokenSecret, metav1.GetOptions{})
	if s.Type != corev1.SecretTypeOpaque || s.Labels[LabelRunner] != "gpu" || s.Labels["app.kubernetes.io/managed-by"] != "onprem" || len(s.Data) != 1 {
		t.Errorf("secret = %+v", s.ObjectMeta)
	}
}
