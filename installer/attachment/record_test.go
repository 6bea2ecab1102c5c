package attachment

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/state"
)

func TestRecordedKubeconfigIsAbsolute(t *testing.T) {
	if got := RecordedKubeconfig(config.ClusterRef{}); got != "" {
		t.Errorf("no kubeconfig: %q", got)
	}
	got := RecordedKubeconfig(config.ClusterRef{Kubeconfig: "edge.kubeconfig", Context: "edge"})
	if !filepath.IsAbs(got) || filepath.Base(got) != "edge.kubeconfig" {
		t.Errorf("relative kubeconfig recorded as %q", got)
	}
}

// TestRecordBefore: the record is saved before the apply; when the save
// fails, a new record is taken back and an existing one stays.
func TestRecordBefore(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	p := &Platform{Namespace: "onprem", Store: state.NewStore(client, "onprem"), State: &state.State{Namespace: "onprem", Runners: map[string]state.Runner{}}}
	a := Attachment{Kind: "runner", Name: "gpu"}
	if err := RecordBefore(ctx, p, a, p.State.Runners, state.Runner{Namespace: "ci", Status: "pending"}, false); err != nil {
		t.Fatal(err)
	}
	st, err := p.Store.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Runners["gpu"].Status != "pending" {
		t.Fatalf("saved record: %+v", st.Runners)
	}

	client.PrependReactor("*", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("etcd is away")
	})
	err = RecordBefore(ctx, p, Attachment{Kind: "runner", Name: "new"}, p.State.Runners, state.Runner{Status: "pending"}, false)
	if err == nil || !strings.Contains(err.Error(), "runner new: recording it: ") || !strings.Contains(err.Error(), "etcd is away") {
		t.Errorf("failed save: %v", err)
	}
	if _, ok := p.State.Runners["new"]; ok {
		t.Error("a new record whose save failed was kept")
	}
	if err := RecordBefore(ctx, p, a, p.State.Runners, state.Runner{Namespace: "ci", Status: "deployed"}, true); err == nil {
		t.Error("failed save of an existing record: no error")
	}
	if _, ok := p.State.Runners["gpu"]; !ok {
		t.Error("an existing record was taken back after a failed save")
	}
}

func TestObservedInto(t *testing.T) {
	var reachable bool
	release, revision, problem := "", 3, ""
	if !(Observed{Reachable: true, Release: "deployed", Revision: 4}).Into(&reachable, &release, &revision, &problem) || !reachable || release != "deployed" || revision != 4 || problem != "" {
		t.Errorf("reached: %v %q %d %q", reachable, release, revision, problem)
	}
	// An unknown revision (0) keeps the recorded one.
	if (Observed{Problem: "the cluster at https://x is another one"}).Into(&reachable, &release, &revision, &problem) || reachable || release != "" || revision != 4 || problem == "" {
		t.Errorf("not reached: %v %q %d %q", reachable, release, revision, problem)
	}
}
