package buildplan

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	"onprem.dev/onprem/internal/fsutil"
)

// StateDir is where the rings keep their build state:
// $ONPREM_CACHE/buildplan.
func StateDir() string { return filepath.Join(fsutil.CacheRoot(), "buildplan") }

// record is what StateDir keeps of a step.
type record struct {
	// Took is the last measured duration of the step's Run when it built;
	// for a step that always runs, the longest (its cold run).
	Took time.Duration `json:"took,omitempty"`
	When time.Time     `json:"when,omitzero"`
}

func (r *runner) stateFile() string { return filepath.Join(r.o.StateDir, "buildplan.json") }

func (r *runner) load() {
	r.stored = map[string]record{}
	if r.o.StateDir == "" {
		return
	}
	b, err := os.ReadFile(r.stateFile())
	if err != nil {
		return
	}
	if err := json.Unmarshal(b, &r.stored); err != nil {
		// A damaged state file costs a rebuild, never a wrong skip.
		r.logf("ignoring the damaged %s (%v): every step is checked again", r.stateFile(), err)
		r.stored = map[string]record{}
	}
}

// save merges what this run learned into the state file (other runs with
// other steps share it). Called under r.mu.
func (r *runner) save(n *node) {
	if r.o.StateDir == "" {
		return
	}
	if n.state != Built {
		return // nothing to remember
	}
	rec := r.stored[n.Name]
	if n.always() {
		rec.Took = max(rec.Took, n.took)
	} else {
		rec.Took = n.took
	}
	rec.When = time.Now().UTC()
	r.stored[n.Name] = rec
	if err := os.MkdirAll(r.o.StateDir, 0o755); err != nil {
		r.logf("cannot keep the build state in %s: %v", r.o.StateDir, err)
		return
	}
	onDisk := map[string]record{}
	if b, err := os.ReadFile(r.stateFile()); err == nil {
		_ = json.Unmarshal(b, &onDisk)
	}
	onDisk[n.Name] = rec
	b, err := json.MarshalIndent(onDisk, "", "  ")
	if err != nil {
		return
	}
	if err := fsutil.WriteFileAtomic(r.stateFile(), append(b, '\n'), 0o644); err != nil {
		r.logf("cannot keep the build state in %s: %v", r.o.StateDir, err)
	}
}

// cached reports whether n may be skipped: its outputs are current.
func (r *runner) cached(ctx context.Context, n *node) bool {
	return n.Fresh != nil && n.Fresh(ctx)
}
