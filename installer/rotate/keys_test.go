package rotate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/secrets"
)

func keysSecret(generated bool) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: credentials.PlatformKeys, Namespace: "onprem"},
		Data: map[string][]byte{KeySigning: []byte("sign-0"), KeyEncryption: []byte("enc-0")}}
	if generated {
		s.Labels = map[string]string{secrets.LabelGenerated: "true"}
	}
	return s
}

// keysReader is a Deployment whose pods read the keys Secret, rolled out.
func keysReader(name string) *appsv1.Deployment {
	one := int32(1)
	env := corev1.EnvVar{Name: "SIGNING_KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: credentials.PlatformKeys}, Key: KeySigning}}}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "onprem"},
		Spec: appsv1.DeploymentSpec{Replicas: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "s", Env: []corev1.EnvVar{env}}}}}},
		Status: appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}}
}

// keysState is the Secret's keys and step, as one line.
func keysState(t *testing.T, c *fake.Clientset) string {
	t.Helper()
	// The tracker, not the client: reactors call this, holding the
	// client's lock.
	o, err := c.Tracker().Get(corev1.SchemeGroupVersion.WithResource("secrets"), "onprem", credentials.PlatformKeys)
	if err != nil {
		t.Fatal(err)
	}
	s := o.(*corev1.Secret)
	ring := func(k string) string { return strings.ReplaceAll(string(s.Data[k]), "\n", ",") }
	return fmt.Sprintf("sign %s [%s] enc %s [%s] step %q", s.Data[KeySigning], ring(KeySigningRing), s.Data[KeyEncryption], ring(KeyEncryptionRing), s.Annotations[AnnotationKeysStep])
}

// The overlap: the new keys join the rings (and every pod rolls) before
// they sign; a run killed at any write is finished by the next; retiring
// keeps only the current keys; nothing shows a key.
func TestKeysRingOverlapResumeAndRetire(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset(keysSecret(true), keysReader("pipelines-api"), keysReader("unrelated"))
	// The unrelated Deployment reads nothing of the keys.
	u, _ := c.AppsV1().Deployments("onprem").Get(ctx, "unrelated", metav1.GetOptions{})
	u.Spec.Template.Spec.Containers[0].Env = nil
	if _, err := c.AppsV1().Deployments("onprem").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var rolls []string
	c.PrependReactor("patch", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		rolls = append(rolls, a.(k8stesting.PatchAction).GetName()+" at "+keysState(t, c))
		return false, nil, nil
	})
	// failWrite fails the next Secret update that writes the step.
	failStep := ""
	c.PrependReactor("update", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		s := a.(k8stesting.UpdateAction).GetObject().(*corev1.Secret)
		if failStep != "" && s.Annotations[AnnotationKeysStep] == failStep {
			failStep = ""
			return true, nil, errors.New("killed")
		}
		return false, nil, nil
	})
	n := 0
	o := KeysOptions{Client: c, Namespace: "onprem", Key: func() ([]byte, error) { n++; return []byte(fmt.Sprintf("key-%d", n)), nil }}

	// A dry run writes nothing.
	dry := o
	dry.DryRun = true
	res, err := Keys(ctx, dry)
	if err != nil || !res.Changed || res.RingAfter != 2 || len(res.Restarted) != 1 || res.Restarted[0] != "Deployment/pipelines-api" {
		t.Fatalf("dry run: %+v, %v", res, err)
	}
	if got := keysState(t, c); got != `sign sign-0 [] enc enc-0 [] step ""` || len(rolls) != 0 {
		t.Fatalf("a dry run wrote: %s, rolled %v", got, rolls)
	}

	// Killed at the switch: the new keys are staged and every pod has them.
	failStep = KeysSwitched
	if _, err := Keys(ctx, o); err == nil || !strings.Contains(err.Error(), "switching to the new keys") {
		t.Fatalf("a run killed at the switch: %v", err)
	}
	if got, want := keysState(t, c), `sign sign-0 [key-1,sign-0] enc enc-0 [key-2,enc-0] step "staged"`; got != want {
		t.Fatalf("after the kill: %s, want %s", got, want)
	}
	// Retiring is refused while a rotation is unfinished.
	ret := o
	ret.Retire = true
	var re *RefusedError
	if _, err := Keys(ctx, ret); !errors.As(err, &re) || !strings.Contains(err.Error(), "unfinished") {
		t.Fatalf("retire during a rotation: %v", err)
	}
	// The next run finishes with the same keys and rolls the pods again.
	res, err = Keys(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keysState(t, c), `sign key-1 [key-1,sign-0] enc key-2 [key-2,enc-0] step ""`; got != want || n != 2 {
		t.Fatalf("finished: %s, want %s (keys made: %d)", got, want, n)
	}
	if res.Resumed != "staging the new keys" || res.RingBefore != 2 || res.RingAfter != 2 {
		t.Errorf("result of the resumed run: %+v", res)
	}
	want := []string{
		`pipelines-api at sign sign-0 [key-1,sign-0] enc enc-0 [key-2,enc-0] step "staged"`,
		`pipelines-api at sign key-1 [key-1,sign-0] enc key-2 [key-2,enc-0] step "switched"`,
	}
	if strings.Join(rolls, "\n") != strings.Join(want, "\n") {
		t.Errorf("rolls:\n%s\nwant (staged once, the resumed run not rolling again; then switched)\n%s", strings.Join(rolls, "\n"), strings.Join(want, "\n"))
	}

	// A second rotation: three keys in each ring.
	rolls = nil
	if _, err := Keys(ctx, o); err != nil {
		t.Fatal(err)
	}
	if got, want := keysState(t, c), `sign key-3 [key-3,key-1,sign-0] enc key-4 [key-4,key-2,enc-0] step ""`; got != want || len(rolls) != 2 {
		t.Fatalf("second rotation: %s, want %s; rolls %v", got, want, rolls)
	}

	// Retire: killed after its write, finished by the next run.
	rolls = nil
	killRoll := true
	c.PrependReactor("patch", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		if killRoll {
			killRoll = false
			return true, nil, errors.New("killed")
		}
		return false, nil, nil
	})
	if _, err := Keys(ctx, ret); err == nil {
		t.Fatal("a retirement killed at its rollout succeeded")
	}
	if got, want := keysState(t, c), `sign key-3 [key-3] enc key-4 [key-4] step "retiring"`; got != want {
		t.Fatalf("after a killed retirement: %s, want %s", got, want)
	}
	res, err = Keys(ctx, ret)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := keysState(t, c), `sign key-3 [key-3] enc key-4 [key-4] step ""`; got != want || res.Resumed != "retiring the older keys" || res.RingBefore != 1 {
		t.Fatalf("retired: %s, want %s; %+v", got, want, res)
	}
	res, err = Keys(ctx, ret)
	if err != nil || res.Changed {
		t.Fatalf("retiring again: %+v, %v, want nothing to do", res, err)
	}
	out, _ := json.Marshal(res)
	if strings.Contains(string(out), "key-") {
		t.Errorf("the result shows a key: %s", out)
	}
}

func TestKeysRefusals(t *testing.T) {
	ctx := context.Background()
	var re *RefusedError
	c := fake.NewClientset(keysSecret(false))
	if _, err := Keys(ctx, KeysOptions{Client: c, Namespace: "onprem"}); !errors.As(err, &re) || !strings.Contains(err.Error(), "your own") {
		t.Errorf("the operator's Secret: %v", err)
	}
	if got := keysState(t, c); got != `sign sign-0 [] enc enc-0 [] step ""` {
		t.Errorf("a refusal wrote: %s", got)
	}
	if _, err := Keys(ctx, KeysOptions{Client: fake.NewClientset(), Namespace: "onprem"}); !errors.As(err, &re) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("no keys Secret: %v", err)
	}
}
