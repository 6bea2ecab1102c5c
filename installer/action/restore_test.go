package action

import (
	"errors"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/installer/backupfile"
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
