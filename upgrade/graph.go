// Package upgrade plans and runs platform upgrades. This file holds the
// release graph: which release may follow which, and the path from the
// installed version to a target.
//
// The graph's nodes are the releases of a release.Set. There is an edge from
// u to v when v is newer than u, v's UpgradeFrom constraint admits u's
// version, and no release marked Required lies strictly between them (a
// required release may not be skipped, so every path from below it to above
// it stops on it). Edges only go up: there is no downgrade.
package upgrade

import (
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"

	"onprem.dev/onprem/installer/release"
)

// Step is one edge of an upgrade path: the platform goes from From to To.
type Step struct {
	From, To *release.Release
}

func (s Step) String() string { return s.From.Version + " → " + s.To.Version }

// Steps pairs the releases of a path (as returned by Path) with the version
// each one is applied on, starting from the installed release.
func Steps(installed *release.Release, path []*release.Release) []Step {
	steps := make([]Step, 0, len(path))
	prev := installed
	for _, r := range path {
		steps = append(steps, Step{From: prev, To: r})
		prev = r
	}
	return steps
}

// Path returns the releases to apply, in order, to go from the installed
// version from to the version to (both semver; a leading v is accepted).
// The installed release itself is not part of the path. Each step is an edge
// allowed by the next release's UpgradeFrom constraint, and every release
// marked Required that lies strictly between from and to is on the path.
//
// Among the allowed paths, Path returns one with the fewest steps. Ties are
// broken toward newer intermediate versions: at each step it takes the newest
// release that still reaches the target in the fewest steps (so of two
// shortest paths, the one whose first differing release is newer wins; a
// newer patch release carries more fixes into the next step).
//
// Errors: *UnknownVersionError when a version is not in the set (an installed
// version must be known: its manifest says what is running), *DowngradeError
// when to is older than from, *NoPathError when the constraints allow no
// path. to == from returns an empty path and no error.
func Path(set *release.Set, from, to string) ([]*release.Release, error) {
	g, err := newGraph(set)
	if err != nil {
		return nil, err
	}
	f, err := g.lookup(from, true, "")
	if err != nil {
		return nil, err
	}
	t, err := g.lookup(to, false, from)
	if err != nil {
		return nil, err
	}
	switch {
	case t < f:
		return nil, &DowngradeError{From: g.rels[f].Version, To: g.rels[t].Version}
	case t == f:
		return []*release.Release{}, nil
	}
	if p := g.shortest(f, t); p != nil {
		return p, nil
	}
	return nil, g.noPath(f, t)
}

// Reachable returns the releases newer than from that some upgrade path
// reaches, oldest first (empty when from is the newest it can be).
func Reachable(set *release.Set, from string) ([]*release.Release, error) {
	g, err := newGraph(set)
	if err != nil {
		return nil, err
	}
	f, err := g.lookup(from, true, "")
	if err != nil {
		return nil, err
	}
	reach := g.reach(f, len(g.rels))
	var out []*release.Release
	for i := f + 1; i < len(g.rels); i++ {
		if reach[i] {
			out = append(out, g.rels[i])
		}
	}
	return out, nil
}

// Latest returns the newest release reachable from the installed version
// from: the default target of an upgrade. When nothing newer is reachable it
// returns from's own release (the caller compares versions to say "up to
// date").
func Latest(set *release.Set, from string) (*release.Release, error) {
	rs, err := Reachable(set, from)
	if err != nil {
		return nil, err
	}
	if len(rs) > 0 {
		return rs[len(rs)-1], nil
	}
	return set.Get(from)
}

// UnknownVersionError says that a version of an upgrade has no release
// manifest in the set.
type UnknownVersionError struct {
	// Version as given.
	Version string
	// Installed is true for the installed version (from), false for the
	// target.
	Installed bool
	// Known lists the versions of the set, oldest first.
	Known []string
	// Reachable lists the versions reachable from the installed one, when
	// the target is the unknown one and the installed version is known.
	Reachable []string
	// Invalid is set when Version is not a semantic version at all.
	Invalid bool
}

func (e *UnknownVersionError) Error() string {
	var b strings.Builder
	if e.Installed {
		fmt.Fprintf(&b, "installed platform version %q", e.Version)
	} else {
		fmt.Fprintf(&b, "target version %q", e.Version)
	}
	if e.Invalid {
		b.WriteString(" is not a semantic version (like 2.7.0)")
	} else {
		b.WriteString(" has no release manifest here")
	}
	if e.Installed {
		fmt.Fprintf(&b, " (known versions: %s)", strings.Join(e.Known, ", "))
		if !e.Invalid {
			b.WriteString(": an installed version must be known; use the onprem that installed it, or a bundle holding its release")
		}
		return b.String()
	}
	fmt.Fprintf(&b, "; known versions: %s", strings.Join(e.Known, ", "))
	if e.Reachable != nil {
		if len(e.Reachable) == 0 {
			b.WriteString("; nothing newer is reachable from the installed version")
		} else {
			fmt.Fprintf(&b, "; reachable from the installed version: %s", strings.Join(e.Reachable, ", "))
		}
	}
	return b.String()
}

// DowngradeError refuses a target older than the installed version.
type DowngradeError struct {
	From, To string
}

func (e *DowngradeError) Error() string {
	return fmt.Sprintf("cannot go from %s to %s: %s is older than the installed version and onprem does not downgrade; "+
		"to undo the last upgrade step, use onprem rollback", e.From, e.To, e.To)
}

// NoPathError says that no allowed path leads from the installed version to
// the target, and why: the first release the path cannot get to (the target
// itself, or a required release before it), the constraint that blocks it,
// and how far the installed version gets.
type NoPathError struct {
	From, To string
	// Blocker is the release no path reaches: To, or a required release
	// between From and To that every path would have to stop on.
	Blocker string
	// Constraint is Blocker's UpgradeFrom ("" when it can only be installed
	// fresh).
	Constraint string
	// Stop is the last required release before Blocker that every path
	// passes ("" when there is none): only releases from it on may lead to
	// Blocker.
	Stop string
	// Farthest is the newest release below Blocker that From reaches (From
	// itself when it reaches none), and Route the releases applied to get
	// there.
	Farthest string
	Route    []string
	// Admitted lists the known releases that Constraint admits; none of
	// them can be reached from From (or from Stop).
	Admitted []string
	// Via is the intermediate version to upgrade to first ("" when there is
	// none): the farthest reachable release towards the target.
	Via string
}

func (e *NoPathError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "no upgrade path from %s to %s: ", e.From, e.To)
	if e.Blocker != e.To {
		fmt.Fprintf(&b, "every path must stop at the required release %s, and ", e.Blocker)
	}
	if e.Constraint == "" {
		fmt.Fprintf(&b, "%s cannot be upgraded to (it has no upgradeFrom: it can only be installed fresh)", e.Blocker)
	} else {
		fmt.Fprintf(&b, "%s can be upgraded to from %s", e.Blocker, e.Constraint)
	}
	if e.Farthest != e.From {
		fmt.Fprintf(&b, "; %s reaches at most %s (%s)", e.From, e.Farthest, strings.Join(append([]string{e.From}, e.Route...), " → "))
	} else {
		fmt.Fprintf(&b, "; %s does not satisfy it and reaches no newer release on the way", e.From)
	}
	if e.Constraint != "" {
		switch {
		case len(e.Admitted) == 0:
			fmt.Fprintf(&b, "; no known release satisfies %s", e.Constraint)
		case e.Stop != "" && older(e.Admitted[len(e.Admitted)-1], e.Stop):
			fmt.Fprintf(&b, "; the known releases it admits (%s) are older than the required stop %s", strings.Join(e.Admitted, ", "), e.Stop)
		case older(e.Admitted[len(e.Admitted)-1], e.From):
			fmt.Fprintf(&b, "; the known releases it admits (%s) are older than %s", strings.Join(e.Admitted, ", "), e.From)
		default:
			fmt.Fprintf(&b, "; the known releases it admits (%s) cannot be reached from %s", strings.Join(e.Admitted, ", "), e.From)
		}
	}
	switch {
	case e.Via != "" && e.Constraint != "" && len(e.Admitted) == 0:
		fmt.Fprintf(&b, ". Upgrade to %s first, then use an onprem or a bundle that ships a release in %s", e.Via, e.Constraint)
	case e.Via != "":
		fmt.Fprintf(&b, ". Upgrade to %s first", e.Via)
	case e.Constraint != "" && len(e.Admitted) == 0:
		fmt.Fprintf(&b, ". Use an onprem or a bundle that ships a release in %s", e.Constraint)
	}
	return b.String()
}

// older reports a < b for two versions known to be valid.
func older(a, b string) bool {
	va, errA := semver.NewVersion(a)
	vb, errB := semver.NewVersion(b)
	return errA == nil && errB == nil && va.LessThan(vb)
}

// graph is a release.Set with parsed versions and constraints, indexed in
// version order (oldest first).
type graph struct {
	rels []*release.Release
	vers []*semver.Version
	from []*semver.Constraints // nil: only a fresh install
}

func newGraph(set *release.Set) (*graph, error) {
	if set == nil {
		return nil, fmt.Errorf("no releases")
	}
	g := &graph{rels: set.All()}
	for _, r := range g.rels {
		v, err := semver.StrictNewVersion(r.Version)
		if err != nil {
			return nil, fmt.Errorf("release %s: version: %w", r.Version, err)
		}
		var c *semver.Constraints
		if strings.TrimSpace(r.UpgradeFrom) != "" {
			if c, err = semver.NewConstraint(r.UpgradeFrom); err != nil {
				return nil, fmt.Errorf("release %s: upgradeFrom %q: %w", r.Version, r.UpgradeFrom, err)
			}
		}
		g.vers = append(g.vers, v)
		g.from = append(g.from, c)
	}
	return g, nil
}

func (g *graph) versions() []string {
	out := make([]string, len(g.rels))
	for i, r := range g.rels {
		out[i] = r.Version
	}
	return out
}

// lookup finds version v (a leading v accepted). installedFrom, for a target,
// is the installed version, used to list what is reachable in the error.
func (g *graph) lookup(v string, installed bool, installedFrom string) (int, error) {
	s := strings.TrimPrefix(strings.TrimSpace(v), "v")
	want, err := semver.StrictNewVersion(s)
	if err == nil {
		for i, have := range g.vers {
			if have.Equal(want) && have.Metadata() == want.Metadata() {
				return i, nil
			}
		}
	}
	e := &UnknownVersionError{Version: v, Installed: installed, Known: g.versions(), Invalid: err != nil}
	if !installed {
		if f, ferr := g.lookup(installedFrom, true, ""); ferr == nil {
			reach := g.reach(f, len(g.rels))
			e.Reachable = []string{}
			for i := f + 1; i < len(g.rels); i++ {
				if reach[i] {
					e.Reachable = append(e.Reachable, g.rels[i].Version)
				}
			}
		}
	}
	return -1, e
}

// admits reports whether release v's UpgradeFrom admits release u (u < v).
func (g *graph) admits(u, v int) bool {
	return u < v && g.from[v] != nil && g.from[v].Check(g.vers[u])
}

// edge reports whether u may be upgraded to v directly: v admits u and no
// required release lies strictly between them.
func (g *graph) edge(u, v int) bool {
	if !g.admits(u, v) {
		return false
	}
	for k := u + 1; k < v; k++ {
		if g.rels[k].Required {
			return false
		}
	}
	return true
}

// reach marks the releases in [f, limit) that some path from f reaches (f
// itself included).
func (g *graph) reach(f, limit int) []bool {
	reach := make([]bool, len(g.rels))
	reach[f] = true
	for v := f + 1; v < limit; v++ {
		for u := f; u < v && !reach[v]; u++ {
			reach[v] = reach[u] && g.edge(u, v)
		}
	}
	return reach
}

// shortest returns the path f → t (f < t) with the fewest steps, ties broken
// toward the newest next release at each step; nil when there is none.
func (g *graph) shortest(f, t int) []*release.Release {
	const none = -1
	// dist[v]: fewest steps from v to t; the graph is a DAG in version
	// order, so one pass from t downwards computes it.
	dist := make([]int, len(g.rels))
	for i := range dist {
		dist[i] = none
	}
	dist[t] = 0
	for v := t - 1; v >= f; v-- {
		for w := v + 1; w <= t; w++ {
			if dist[w] != none && g.edge(v, w) && (dist[v] == none || dist[w]+1 < dist[v]) {
				dist[v] = dist[w] + 1
			}
		}
	}
	if dist[f] == none {
		return nil
	}
	path := make([]*release.Release, 0, dist[f])
	for cur := f; cur != t; {
		for w := t; w > cur; w-- { // newest first
			if dist[w] == dist[cur]-1 && g.edge(cur, w) {
				cur = w
				break
			}
		}
		path = append(path, g.rels[cur])
	}
	return path
}

// noPath explains why no path leads from f to t.
func (g *graph) noPath(f, t int) *NoPathError {
	reach := g.reach(f, t)
	// The gates every path must pass, in order: the required releases
	// between f and t, then t. Reaching a gate means passing every gate
	// before it, so the first one not reached is what blocks.
	blocker, stop := t, f
	for k := f + 1; k < t; k++ {
		if !g.rels[k].Required {
			continue
		}
		if !reach[k] {
			blocker = k
			break
		}
		stop = k
	}
	// Only releases from the last passed stop on may lead to the blocker
	// (an edge from below would skip the stop).
	farthest := f
	for u := blocker - 1; u >= stop; u-- {
		if reach[u] {
			farthest = u
			break
		}
	}
	e := &NoPathError{
		From:       g.rels[f].Version,
		To:         g.rels[t].Version,
		Blocker:    g.rels[blocker].Version,
		Constraint: g.rels[blocker].UpgradeFrom,
		Farthest:   g.rels[farthest].Version,
		Route:      []string{},
	}
	if stop != f {
		e.Stop = g.rels[stop].Version
	}
	if farthest != f {
		for _, r := range g.shortest(f, farthest) {
			e.Route = append(e.Route, r.Version)
		}
		e.Via = e.Farthest
	}
	for u := 0; u < blocker; u++ {
		if g.admits(u, blocker) {
			e.Admitted = append(e.Admitted, g.rels[u].Version)
		}
	}
	return e
}
