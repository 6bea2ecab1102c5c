package action

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"onprem.dev/onprem/installer/backupfile"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
)

// What a restore finds in the namespace decides whether it may go on:
// nothing (an empty cluster), what an unfinished restore left (killed or
// failed: run it again), or a platform (only with --force and a
// confirmation, of the backup's version and installation).
func TestRestoreChecksItsTarget(t *testing.T) {
	m := &backupfile.Manifest{Header: backupfile.Header{Installation: "onprem", Version: "2.8.0", Created: time.Now()}}
	comps := map[string]state.Component{"mongodb": {}}
	op := func(kind, outcome string) state.Operation { return state.Operation{Kind: kind, Outcome: outcome} }
	for _, c := range []struct {
		name string
		st   state.State
		r    Restore
		want string // "" = allowed
	}{
		{"an empty cluster", state.State{}, Restore{}, ""},
		{"a restore that was killed", state.State{Components: comps, History: []state.Operation{op(state.KindRestore, state.OutcomeRunning)}}, Restore{}, ""},
		{"a restore that failed, then a backup", state.State{Components: comps, History: []state.Operation{op(state.KindRestore, state.OutcomeFailed), op(state.KindBackup, state.OutcomeSucceeded)}}, Restore{}, ""},
		{"an install that failed", state.State{Components: comps, History: []state.Operation{op(state.KindInstall, state.OutcomeFailed)}}, Restore{}, "never installed to the end"},
		{"the same, forced", state.State{Components: comps, History: []state.Operation{op(state.KindInstall, state.OutcomeFailed)}}, Restore{Force: true}, ""},
		{"a running platform", state.State{Installation: "onprem", Version: "2.8.0", Components: comps}, Restore{}, "--force"},
		{"forced, not confirmed", state.State{Installation: "onprem", Version: "2.8.0", Components: comps}, Restore{Force: true}, "--yes"},
		{"forced and confirmed", state.State{Installation: "onprem", Version: "2.8.0", Components: comps}, Restore{Force: true, Confirmed: true}, ""},
		{"another version", state.State{Installation: "onprem", Version: "2.7.1", Components: comps}, Restore{Force: true, Confirmed: true}, "fits only its own version"},
		{"another installation", state.State{Installation: "ci", Version: "2.8.0", Components: comps}, Restore{Force: true, Confirmed: true}, `installation "ci"`},
	} {
		err := c.r.checkTarget(&c.st, "onprem", "b.onprem-backup", m)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "":
			var ie *InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: %v, want an input error saying %q", c.name, err, c.want)
			}
		}
	}
}

// The backup's record was copied while that backup ran: after the restore
// the backup shows as the successful backup it is (named, with its
// destination), an operation that was running beside it as interrupted,
// and the restore stays the newest operation.
func TestMergeStateRestoredBackupSucceeded(t *testing.T) {
	started := time.Date(2026, 11, 20, 3, 0, 0, 0, time.UTC)
	saved := &state.State{History: []state.Operation{
		{ID: "a", Kind: state.KindInstall, Outcome: state.OutcomeSucceeded},
		{ID: "b", Kind: state.KindUpgrade, Outcome: state.OutcomeRunning},
		{ID: "c", Kind: state.KindBackup, Outcome: state.OutcomeRunning, Started: started, Message: "backing up to s3://b/p"},
	}}
	st := &state.State{History: []state.Operation{{ID: "r", Kind: state.KindRestore, Outcome: state.OutcomeRunning}}}
	finished := started.Add(time.Minute)
	made := &state.BackupRecord{Name: "onprem-20261120T030000Z.onprem-backup", Where: "s3://b/p", Trigger: backupfile.TriggerSchedule, Databases: 9, Version: "2.8.0"}
	mergeState(st, saved, "https://new:6443", made, finished)

	if n := len(st.History); n != 4 || st.History[n-1].ID != "r" {
		t.Fatalf("history %+v: the restore must be the newest of 4", st.History)
	}
	b := st.History[2]
	if b.Outcome != state.OutcomeSucceeded || !b.Finished.Equal(finished) || b.Backup == nil || b.Backup.Name != made.Name ||
		b.Backup.Trigger != backupfile.TriggerSchedule || !strings.Contains(b.Message, made.Name) {
		t.Errorf("the restored backup's record: %+v (backup %+v)", b, b.Backup)
	}
	if u := st.History[1]; u.Outcome != state.OutcomeFailed || u.Message != "running when the backup was made" {
		t.Errorf("the upgrade that ran beside the backup: %+v", u)
	}
	// The status reads it so.
	bs, err := backupStatus(t.Context(), fake.NewClientset(), "onprem", st)
	if err != nil {
		t.Fatal(err)
	}
	if bs == nil || bs.Last == nil || bs.Last.ID != "c" || bs.Last.Outcome != state.OutcomeSucceeded {
		t.Errorf("status's last backup: %+v", bs)
	}
}

// The restored record gets the backup's runners and runtimes it does not
// hold; those on the platform's cluster (no kubeconfig, no context) now
// run on the new cluster's server, the others stay where they were.
func TestMergeStateKeepsAttachmentsAndMovesThePlatformClusters(t *testing.T) {
	saved := &state.State{
		Runners: map[string]state.Runner{
			"default": {Server: "https://old:6443", Namespace: "onprem-runner-default"},
			"gpu":     {Server: "https://gpu:6443", Context: "gpu", Namespace: "ci"},
			"kept":    {Server: "https://old:6443", Namespace: "from-backup"},
		},
		Runtimes: map[string]state.Runtime{
			"codefresh": {Server: "https://old:6443", Namespace: "codefresh"},
			"edge":      {Server: "https://edge:6443", Kubeconfig: "/etc/edge.kubeconfig", Namespace: "edge"},
		},
	}
	st := &state.State{Runners: map[string]state.Runner{"kept": {Server: "https://new:6443", Namespace: "restored"}}}
	mergeState(st, saved, "https://new:6443", nil, time.Now())

	wantRunners := map[string]state.Runner{
		"default": {Server: "https://new:6443", Namespace: "onprem-runner-default"},
		"gpu":     {Server: "https://gpu:6443", Context: "gpu", Namespace: "ci"},
		"kept":    {Server: "https://new:6443", Namespace: "restored"},
	}
	if !reflect.DeepEqual(st.Runners, wantRunners) {
		t.Errorf("runners: %+v, want %+v", st.Runners, wantRunners)
	}
	wantRuntimes := map[string]state.Runtime{
		"codefresh": {Server: "https://new:6443", Namespace: "codefresh"},
		"edge":      {Server: "https://edge:6443", Kubeconfig: "/etc/edge.kubeconfig", Namespace: "edge"},
	}
	if !reflect.DeepEqual(st.Runtimes, wantRuntimes) {
		t.Errorf("runtimes: %+v, want %+v", st.Runtimes, wantRuntimes)
	}

	empty := &state.State{}
	mergeState(empty, &state.State{}, "https://new:6443", nil, time.Now())
	if empty.Runners != nil || empty.Runtimes != nil {
		t.Errorf("nothing to restore made maps: %+v %+v", empty.Runners, empty.Runtimes)
	}
}

// Before the data is back only the databases and what they need run: no
// service writes to them and no scheduled backup reads them (it would
// store them half restored); the services and the schedule come after.
func TestWithoutServicesLeavesOutTheScheduledBackup(t *testing.T) {
	res := &render.Result{Components: []*render.Component{
		{Name: "ingress", Group: release.GroupIngress},
		{Name: "postgresql", Group: release.GroupInfrastructure},
		{Name: render.ProvisionComponent, Group: release.GroupProvisioning},
		{Name: "pipelines-api", Group: release.GroupPipelines},
		{Name: "gitops-api", Group: release.GroupGitOps},
		{Name: render.BackupComponent, Group: release.GroupBackup},
	}}
	var got []string
	for _, c := range withoutServices(res).Components {
		got = append(got, c.Name)
	}
	if want := []string{"ingress", "postgresql", render.ProvisionComponent}; !slices.Equal(got, want) {
		t.Errorf("withoutServices kept %v, want %v", got, want)
	}
	if names := serviceNames(res); !slices.Equal(names, []string{"pipelines-api", "gitops-api"}) {
		t.Errorf("serviceNames = %v", names)
	}
	if len(res.Components) != 6 {
		t.Error("withoutServices changed the Result it was given")
	}
}

// A backup refuses while a restore or an availability move that did not
// finish has the databases half replaced, and says how to finish it.
func TestBackupRefusedWhileDatabasesAreReplaced(t *testing.T) {
	ctx := context.Background()
	done := &state.State{History: []state.Operation{{Kind: state.KindRestore, Outcome: state.OutcomeSucceeded}, {Kind: state.KindBackup, Outcome: state.OutcomeFailed}}}
	if err := databasesSettled(ctx, fake.NewClientset(), "onprem", done); err != nil {
		t.Fatalf("after a finished restore: %v", err)
	}
	interrupted := &state.State{History: []state.Operation{{Kind: state.KindRestore, Outcome: state.OutcomeRunning}, {Kind: state.KindBackup, Outcome: state.OutcomeSucceeded}}}
	err := databasesSettled(ctx, fake.NewClientset(), "onprem", interrupted)
	var in *InputError
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "run the same onprem restore again") {
		t.Errorf("after an interrupted restore: %v", err)
	}
	moving := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: MoveSecret, Namespace: "onprem"}})
	err = databasesSettled(ctx, moving, "onprem", done)
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "run onprem install again") || !strings.Contains(err.Error(), MoveSecret) {
		t.Errorf("during a move: %v", err)
	}
}
