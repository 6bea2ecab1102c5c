//go:build linux

package secrets

import (
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/installer/credentials"
)

// TestEnsureAgainstAKubeAPIServer runs Ensure against a real control plane,
// one namespace per case.
func TestEnsureAgainstAKubeAPIServer(t *testing.T) {
	cluster := testcluster.Start(t)
	c := cluster.Client
	ctx := context.Background()

	namespace := func(t *testing.T, name string) string {
		t.Helper()
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return name
	}
	ensure := func(t *testing.T, c kubernetes.Interface, ns string, plan []credentials.Secret) Report {
		t.Helper()
		r, err := Ensure(ctx, c, ns, plan, opts)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// unchangedSince fails for every Secret of before whose data or
	// resourceVersion differs in after, except those named in except.
	unchangedSince := func(t *testing.T, before, after map[string]*corev1.Secret, except ...string) {
		t.Helper()
		for name, b := range before {
			if slices.Contains(except, name) {
				continue
			}
			a, ok := after[name]
			switch {
			case !ok:
				t.Errorf("%s is gone", name)
			case !sameData(a.Data, b.Data):
				t.Errorf("%s: values changed", name)
			case a.ResourceVersion != b.ResourceVersion:
				t.Errorf("%s: resourceVersion %s, was %s", name, a.ResourceVersion, b.ResourceVersion)
			}
		}
	}
	plan := fullPlan()

	t.Run("created once, kept on re-runs, one lost key restored", func(t *testing.T) {
		ns := namespace(t, "secrets-keep")
		r := ensure(t, c, ns, plan)
		if !slices.Equal(r.Created, names(plan)) || len(r.Unchanged)+len(r.Completed)+len(r.Provided) != 0 {
			t.Fatalf("first run: %+v", r)
		}
		first := snapshot(t, c, ns)
		for _, p := range plan {
			checkCreated(t, first[p.Name], p)
		}

		r = ensure(t, c, ns, plan)
		if !slices.Equal(r.Unchanged, names(plan)) || len(r.Created)+len(r.Completed) != 0 {
			t.Fatalf("second run: %+v", r)
		}
		unchangedSince(t, first, snapshot(t, c, ns))

		// Another operator's machine, through the kubeconfig file (a
		// reinstall after an uninstall without --purge finds the same).
		cfg, err := clientcmd.BuildConfigFromFlags("", cluster.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		other := kubernetes.NewForConfigOrDie(cfg)
		if r := ensure(t, other, ns, plan); !slices.Equal(r.Unchanged, names(plan)) {
			t.Fatalf("run from the kubeconfig: %+v", r)
		}
		unchangedSince(t, first, snapshot(t, c, ns))

		// One key lost: only it comes back.
		rmq := first[credentials.RabbitMQ].DeepCopy()
		delete(rmq.Data, "erlang-cookie")
		if _, err := c.CoreV1().Secrets(ns).Update(ctx, rmq, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, c, ns)
		r = ensure(t, c, ns, plan)
		if !slices.Equal(r.Completed, []string{credentials.RabbitMQ}) || len(r.Unchanged) != len(plan)-1 || len(r.Created) != 0 {
			t.Fatalf("after losing a key: %+v", r)
		}
		after := snapshot(t, c, ns)
		unchangedSince(t, before, after, credentials.RabbitMQ)
		got := after[credentials.RabbitMQ]
		for _, k := range []string{"username", "password"} {
			if string(got.Data[k]) != string(first[credentials.RabbitMQ].Data[k]) {
				t.Errorf("rabbitmq %s changed", k)
			}
		}
		if cookie := got.Data["erlang-cookie"]; len(cookie) != 32 || string(cookie) == string(first[credentials.RabbitMQ].Data["erlang-cookie"]) {
			t.Error("the erlang-cookie was not generated anew")
		}

		// A TLS pair that lost ca.crt cannot be completed (the CA's key is
		// gone): an error, and nothing changes.
		tlsSecret := after[credentials.TLS].DeepCopy()
		delete(tlsSecret.Data, "ca.crt")
		if _, err := c.CoreV1().Secrets(ns).Update(ctx, tlsSecret, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		before = snapshot(t, c, ns)
		_, err = Ensure(ctx, c, ns, plan, opts)
		if err == nil || !strings.Contains(err.Error(), "holds only part of its TLS pair") {
			t.Fatalf("partial TLS pair: %v", err)
		}
		noLeak(t, err, before)
		unchangedSince(t, before, snapshot(t, c, ns))

		// Values and Redact: a YAML dump of the namespace's Secrets keeps no
		// secret value in any form, and keeps the user names.
		vals, err := Values(ctx, c, ns, names(plan))
		if err != nil {
			t.Fatal(err)
		}
		if len(vals) != 12 { // with the CA's key
			t.Errorf("Values: %d values, want 12", len(vals))
		}
		list, err := c.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		dump, err := yaml.Marshal(list)
		if err != nil {
			t.Fatal(err)
		}
		redacted := Redact(string(dump), vals...)
		for _, v := range vals {
			if strings.Contains(redacted, string(v)) || strings.Contains(redacted, base64.StdEncoding.EncodeToString(v)) {
				t.Error("the redacted dump holds a secret value")
			}
		}
		if !strings.Contains(redacted, "username: "+base64.StdEncoding.EncodeToString([]byte("postgres"))) {
			t.Error("the redacted dump lost the public user name")
		}
	})

	t.Run("the operator's own Secret is never touched", func(t *testing.T) {
		ns := namespace(t, "secrets-operator")
		mine := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: credentials.Redis, Namespace: ns},
			Data:       map[string][]byte{"token": []byte("operators-own-token-value")},
		}
		mine, err := c.CoreV1().Secrets(ns).Create(ctx, mine, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = Ensure(ctx, c, ns, plan, opts)
		if err == nil {
			t.Fatal("accepted the operator's Secret without the password key")
		}
		for _, want := range []string{ns + "/" + credentials.Redis, "not generated by onprem", "lacks key(s) password", "Rename or delete it"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error does not say %q:\n%v", want, err)
			}
		}
		if strings.Contains(err.Error(), "operators-own-token-value") {
			t.Error("error holds the operator's value")
		}
		after := snapshot(t, c, ns)
		if len(after) != 1 {
			t.Errorf("Secrets were created despite the error: %v", slices.Sorted(maps.Keys(after)))
		}
		unchangedSince(t, map[string]*corev1.Secret{credentials.Redis: mine}, after)

		// The operator adds the key: their Secret is used as it is.
		mine.Data["password"] = []byte("operators-own-password")
		mine, err = c.CoreV1().Secrets(ns).Update(ctx, mine, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := ensure(t, c, ns, plan)
		if !slices.Equal(r.Provided, []string{credentials.Redis}) || len(r.Created) != len(plan)-1 {
			t.Fatalf("report %+v", r)
		}
		after = snapshot(t, c, ns)
		unchangedSince(t, map[string]*corev1.Secret{credentials.Redis: mine}, after)
		if after[credentials.Redis].Labels[LabelGenerated] != "" {
			t.Error("the operator's Secret got onprem's label")
		}
		// Values leaves the operator's Secret out.
		vals, err := Values(ctx, c, ns, []string{credentials.Redis})
		if err != nil || len(vals) != 0 {
			t.Errorf("Values of the operator's Secret: %d values, %v", len(vals), err)
		}
	})

	t.Run("a new service adds only its Secret", func(t *testing.T) {
		ns := namespace(t, "secrets-new-service")
		ensure(t, c, ns, plan)
		before := snapshot(t, c, ns)
		bigger := fullPlan("context-manager")
		r := ensure(t, c, ns, bigger)
		added := credentials.ServiceSecret("context-manager", "mongodb")
		if !slices.Equal(r.Created, []string{added}) || len(r.Unchanged) != len(plan) || len(r.Completed) != 0 {
			t.Fatalf("report %+v", r)
		}
		after := snapshot(t, c, ns)
		unchangedSince(t, before, after)
		checkCreated(t, after[added], planned(bigger, added))
		if string(after[added].Data["username"]) != "context_manager" {
			t.Errorf("username %q", after[added].Data["username"])
		}
	})

	t.Run("concurrent installers end with one set of values", func(t *testing.T) {
		const installers = 4
		clients := make([]kubernetes.Interface, installers)
		for i := range clients {
			clients[i] = kubernetes.NewForConfigOrDie(cluster.RESTConfig) // one connection each, like separate machines
		}
		race := func(ns string) []Report {
			reports := make([]Report, installers)
			errs := make([]error, installers)
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i := range installers {
				wg.Go(func() {
					<-start
					reports[i], errs[i] = Ensure(ctx, clients[i], ns, plan, opts)
				})
			}
			close(start)
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("installer %d: %v", i, err)
				}
			}
			return reports
		}
		// count says, per Secret, how many installers reported it in list.
		count := func(reports []Report, list func(Report) []string) map[string]int {
			out := map[string]int{}
			for _, r := range reports {
				for _, n := range list(r) {
					out[n]++
				}
			}
			return out
		}
		for round := range 3 {
			ns := namespace(t, fmt.Sprintf("secrets-race-%d", round))
			reports := race(ns)
			createdBy := count(reports, func(r Report) []string { return r.Created })
			unchanged := count(reports, func(r Report) []string { return r.Unchanged })
			for _, p := range plan {
				if createdBy[p.Name] != 1 || unchanged[p.Name] != installers-1 {
					t.Errorf("round %d: %s created by %d installers, unchanged for %d", round, p.Name, createdBy[p.Name], unchanged[p.Name])
				}
			}
			if n := len(count(reports, func(r Report) []string { return r.Completed })); n != 0 {
				t.Errorf("round %d: %d Secrets were completed, none should be", round, n)
			}
			created := snapshot(t, c, ns)
			for _, p := range plan {
				checkCreated(t, created[p.Name], p)
			}

			// Every installer sees the same values, and a re-run by any
			// of them keeps them.
			for i, cl := range clients {
				unchangedSince(t, created, snapshot(t, cl, ns))
				if r := ensure(t, cl, ns, plan); len(r.Unchanged) != len(plan) {
					t.Errorf("installer %d re-run: %+v", i, r)
				}
			}

			// Keys lost from three Secrets: each is completed by exactly one
			// installer, and the kept values stay.
			lost := map[string]string{credentials.RabbitMQ: "erlang-cookie", credentials.PlatformKeys: "encryption-key", credentials.MongoDBAdmin: "password"}
			for name, key := range lost {
				s := created[name].DeepCopy()
				delete(s.Data, key)
				if _, err := c.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, c, ns)
			reports = race(ns)
			completedBy := count(reports, func(r Report) []string { return r.Completed })
			for name := range lost {
				if completedBy[name] != 1 {
					t.Errorf("round %d: %s completed by %d installers, want 1", round, name, completedBy[name])
				}
			}
			if n := len(count(reports, func(r Report) []string { return r.Created })); n != 0 {
				t.Errorf("round %d: %d Secrets created", round, n)
			}
			after := snapshot(t, c, ns)
			unchangedSince(t, before, after, slices.Collect(maps.Keys(lost))...)
			for name, key := range lost {
				for k, v := range before[name].Data {
					if string(after[name].Data[k]) != string(v) {
						t.Errorf("round %d: %s/%s changed", round, name, k)
					}
				}
				if len(after[name].Data[key]) == 0 {
					t.Errorf("round %d: %s/%s not restored", round, name, key)
				}
			}
		}
	})

	t.Run("API errors name the Secret, never a value", func(t *testing.T) {
		_, err := Ensure(ctx, c, "no-such-namespace", plan, opts)
		if err == nil || !strings.Contains(err.Error(), "creating Secret no-such-namespace/"+plan[0].Name) {
			t.Fatalf("missing namespace: %v", err)
		}
	})
}
