package upgrade

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/Masterminds/semver/v3"

	"onprem.dev/onprem/installer/release"
)

// rel is the part of a release manifest the graph reads.
type rel struct {
	version  string
	from     string // upgradeFrom; "" only a fresh install
	required bool
	min      string // minInstallerVersion; default 0.1.0
	kube     string // kubernetes; default ">= 1.30, < 1.40"
}

// buildSet writes small manifests and loads them the way a bundle is loaded.
func buildSet(t testing.TB, rels ...rel) *release.Set {
	t.Helper()
	fsys := fstest.MapFS{}
	for _, r := range rels {
		if r.min == "" {
			r.min = "0.1.0"
		}
		if r.kube == "" {
			r.kube = ">= 1.30, < 1.40"
		}
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: onprem.dev/v1alpha1\nkind: Release\nversion: %s\nminInstallerVersion: %s\nkubernetes: %q\n", r.version, r.min, r.kube)
		if r.from != "" {
			fmt.Fprintf(&b, "upgradeFrom: %q\n", r.from)
		}
		if r.required {
			b.WriteString("required: true\n")
		}
		fsys[r.version+".yaml"] = &fstest.MapFile{Data: []byte(b.String())}
	}
	set, err := release.LoadFS(fsys)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// testGraph has nine versions:
//
//	1.0.0  fresh only
//	1.1.0  from 1.0.x
//	1.2.0  from 1.0.0 .. 1.1.x
//	2.0.0  REQUIRED, from 1.1.0 .. 1.x (not from 1.0.0)
//	2.1.0  from anything since 1.0.0 (would let 1.x skip 2.0.0, but 2.0.0 is required)
//	2.1.1  from 2.1.0
//	2.2.0  from 2.1.x
//	3.0.0  from 2.2.5 .. 2.x: no such release is known, so unreachable
//	9.0.0  fresh only
func testGraph(t testing.TB) *release.Set {
	return buildSet(t,
		rel{version: "1.0.0"},
		rel{version: "1.1.0", from: ">= 1.0.0, < 1.1.0"},
		rel{version: "1.2.0", from: ">= 1.0.0, < 1.2.0"},
		rel{version: "2.0.0", from: ">= 1.1.0, < 2.0.0", required: true},
		rel{version: "2.1.0", from: ">= 1.0.0, < 2.1.0", min: "0.5.0", kube: ">= 1.32, < 1.36"},
		rel{version: "2.1.1", from: ">= 2.1.0, < 2.1.1"},
		rel{version: "2.2.0", from: ">= 2.1.0, < 2.2.0"},
		rel{version: "3.0.0", from: ">= 2.2.5, < 3.0.0"},
		rel{version: "9.0.0"},
	)
}

func versions(rs []*release.Release) string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Version
	}
	return strings.Join(out, " ")
}

func TestPath(t *testing.T) {
	set := testGraph(t)
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"direct edge", "1.1.0", "1.2.0", "1.2.0"},
		{"direct edge over a release", "1.0.0", "1.2.0", "1.2.0"},
		{"patch step", "2.1.0", "2.1.1", "2.1.1"},
		// 1.0.0 → 1.1.0 → 2.0.0 and 1.0.0 → 1.2.0 → 2.0.0 are both two
		// steps: the tie goes to the newer intermediate, 1.2.0.
		{"multi-step, tie toward newer", "1.0.0", "2.0.0", "1.2.0 2.0.0"},
		// 2.1.0 admits 1.2.0 directly, but 2.0.0 is required: the path
		// stops on it.
		{"required stop in the middle", "1.2.0", "2.1.0", "2.0.0 2.1.0"},
		{"required stop, long way", "1.0.0", "2.2.0", "1.2.0 2.0.0 2.1.0 2.2.0"},
		// From the required release itself it is no longer in the way.
		{"from the required release", "2.0.0", "2.1.0", "2.1.0"},
		// 2.2.0 admits 2.1.0 and 2.1.1: one step, 2.1.1 is not needed.
		{"fewest steps over newer", "2.1.0", "2.2.0", "2.2.0"},
		{"leading v", "v1.1.0", "v1.2.0", "1.2.0"},
		{"same version", "2.0.0", "v2.0.0", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Path(set, tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			if p == nil {
				t.Fatal("nil path; want an empty one")
			}
			if got := versions(p); got != tc.want {
				t.Errorf("Path(%s, %s) = %q, want %q", tc.from, tc.to, got, tc.want)
			}
		})
	}
}

func TestPathUnreachableTarget(t *testing.T) {
	set := testGraph(t)
	_, err := Path(set, "2.1.0", "3.0.0")
	var np *NoPathError
	if !errors.As(err, &np) {
		t.Fatalf("err = %v, want *NoPathError", err)
	}
	if np.Blocker != "3.0.0" || np.Constraint != ">= 2.2.5, < 3.0.0" || np.Farthest != "2.2.0" || np.Via != "2.2.0" {
		t.Errorf("NoPathError = %+v", np)
	}
	if len(np.Admitted) != 0 {
		t.Errorf("admitted = %v, want none", np.Admitted)
	}
	msg := err.Error()
	for _, want := range []string{
		"no upgrade path from 2.1.0 to 3.0.0",
		"3.0.0 can be upgraded to from >= 2.2.5, < 3.0.0",
		"2.1.0 reaches at most 2.2.0 (2.1.0 → 2.2.0)",
		"no known release satisfies >= 2.2.5, < 3.0.0",
		"Upgrade to 2.2.0 first, then use an onprem or a bundle that ships a release in >= 2.2.5, < 3.0.0",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q\ndoes not say %q", msg, want)
		}
	}

	// A release that can only be installed fresh.
	_, err = Path(set, "1.0.0", "9.0.0")
	if !errors.As(err, &np) {
		t.Fatalf("err = %v, want *NoPathError", err)
	}
	if np.Via != "2.2.0" || !strings.Contains(err.Error(), "9.0.0 cannot be upgraded to (it has no upgradeFrom: it can only be installed fresh)") ||
		!strings.Contains(err.Error(), "1.0.0 reaches at most 2.2.0 (1.0.0 → 1.2.0 → 2.0.0 → 2.1.0 → 2.2.0)") {
		t.Errorf("err = %v (via %q)", err, np.Via)
	}
}

// A required release that cannot be reached blocks everything above it,
// even a target whose own constraint admits the installed version.
func TestPathBlockedByRequiredRelease(t *testing.T) {
	set := buildSet(t,
		rel{version: "1.0.0"},
		rel{version: "1.1.0", from: ">= 1.0.0, < 1.1.0"},
		rel{version: "1.2.0", from: ">= 1.0.0, < 1.2.0"},
		rel{version: "2.0.0", from: ">= 1.5.0, < 2.0.0", required: true},
		rel{version: "2.1.0", from: ">= 1.0.0, < 2.1.0"},
		rel{version: "2.2.0", from: ">= 2.1.0, < 2.2.0"},
	)
	_, err := Path(set, "1.0.0", "2.2.0")
	var np *NoPathError
	if !errors.As(err, &np) {
		t.Fatalf("err = %v, want *NoPathError", err)
	}
	if np.Blocker != "2.0.0" || np.Via != "1.2.0" {
		t.Errorf("NoPathError = %+v", np)
	}
	want := "no upgrade path from 1.0.0 to 2.2.0: every path must stop at the required release 2.0.0, and " +
		"2.0.0 can be upgraded to from >= 1.5.0, < 2.0.0; 1.0.0 reaches at most 1.2.0 (1.0.0 → 1.2.0); " +
		"no known release satisfies >= 1.5.0, < 2.0.0. " +
		"Upgrade to 1.2.0 first, then use an onprem or a bundle that ships a release in >= 1.5.0, < 2.0.0"
	if err.Error() != want {
		t.Errorf("error:\n got %s\nwant %s", err, want)
	}

	// Past the required stop, a target that only admits versions below
	// it is unreachable, and the error says why.
	set = buildSet(t,
		rel{version: "1.0.0"},
		rel{version: "1.1.0", from: ">= 1.0.0, < 1.1.0"},
		rel{version: "2.0.0", from: ">= 1.0.0, < 2.0.0", required: true},
		rel{version: "2.0.1", from: ">= 2.0.0, < 2.0.1"},
		rel{version: "2.1.0", from: ">= 1.0.0, < 2.0.0"},
		rel{version: "2.2.0", from: ">= 2.0.0, < 2.2.0"},
	)
	_, err = Path(set, "1.0.0", "2.1.0")
	if !errors.As(err, &np) {
		t.Fatalf("err = %v, want *NoPathError", err)
	}
	if np.Blocker != "2.1.0" || np.Stop != "2.0.0" || np.Via != "2.0.1" ||
		!strings.Contains(err.Error(), "the known releases it admits (1.0.0, 1.1.0) are older than the required stop 2.0.0") {
		t.Errorf("err = %v; %+v", err, np)
	}
}

func TestPathDowngradeRefused(t *testing.T) {
	_, err := Path(testGraph(t), "2.1.0", "1.2.0")
	var de *DowngradeError
	if !errors.As(err, &de) || de.From != "2.1.0" || de.To != "1.2.0" {
		t.Fatalf("err = %v, want *DowngradeError 2.1.0 → 1.2.0", err)
	}
	if !strings.Contains(err.Error(), "does not downgrade") || !strings.Contains(err.Error(), "onprem rollback") {
		t.Errorf("err = %v", err)
	}
}

func TestPathUnknownVersions(t *testing.T) {
	set := testGraph(t)
	known := "1.0.0, 1.1.0, 1.2.0, 2.0.0, 2.1.0, 2.1.1, 2.2.0, 3.0.0, 9.0.0"

	_, err := Path(set, "0.9.0", "2.0.0")
	var ue *UnknownVersionError
	if !errors.As(err, &ue) || !ue.Installed || ue.Invalid {
		t.Fatalf("err = %v, want *UnknownVersionError for the installed version", err)
	}
	for _, want := range []string{`installed platform version "0.9.0"`, known, "use the onprem that installed it, or a bundle holding its release"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	_, err = Path(set, "1.0.0", "2.5.0")
	if !errors.As(err, &ue) || ue.Installed {
		t.Fatalf("err = %v, want *UnknownVersionError for the target", err)
	}
	for _, want := range []string{`target version "2.5.0"`, known, "reachable from the installed version: 1.1.0, 1.2.0, 2.0.0, 2.1.0, 2.1.1, 2.2.0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	// Both unknown: the installed one is reported first.
	if _, err = Path(set, "0.1.0", "5.0.0"); !errors.As(err, &ue) || !ue.Installed {
		t.Errorf("err = %v", err)
	}
	// Not a version, and a short form that semver would coerce.
	for _, bad := range []string{"banana", "2.1"} {
		if _, err = Path(set, "1.0.0", bad); !errors.As(err, &ue) || ue.Version != bad {
			t.Errorf("Path(1.0.0, %s): err = %v", bad, err)
		}
	}
	if !strings.Contains(err.Error(), "is not a semantic version") {
		t.Errorf("err = %v", err)
	}
}

func TestLatestAndReachable(t *testing.T) {
	set := testGraph(t)
	for from, want := range map[string]string{
		"1.0.0": "2.2.0", // 3.0.0 and 9.0.0 are unreachable
		"2.1.1": "2.2.0",
		"2.2.0": "2.2.0", // nothing newer: itself
		"9.0.0": "9.0.0",
	} {
		r, err := Latest(set, from)
		if err != nil {
			t.Fatal(err)
		}
		if r.Version != want {
			t.Errorf("Latest(%s) = %s, want %s", from, r.Version, want)
		}
	}
	rs, err := Reachable(set, "1.2.0")
	if err != nil {
		t.Fatal(err)
	}
	// 2.1.0 admits 1.2.0 but is reached only through 2.0.0: still reachable.
	if got := versions(rs); got != "2.0.0 2.1.0 2.1.1 2.2.0" {
		t.Errorf("Reachable(1.2.0) = %q", got)
	}
	if _, err := Latest(set, "7.0.0"); err == nil {
		t.Error("Latest of an unknown version: no error")
	}
}

// The releases shipped in the binary:
//
//	2.6.3  oldest, fresh install only
//	2.7.0  required, upgradeFrom >= 2.6.0, < 2.7.0
//	2.7.1  upgradeFrom >= 2.7.0, < 2.7.1
//	2.8.0  upgradeFrom >= 2.7.0, < 2.8.0
//
// From 2.6.3 only 2.7.0 admits it (2.7.1 and 2.8.0 want 2.7.0 or newer), and
// 2.7.0 is required anyway. From 2.7.0, 2.8.0 admits it directly, so the
// fewest steps are 2.6.3 → 2.7.0 → 2.8.0; going through 2.7.1 would be a
// step longer, so 2.7.1 is not on the path.
func TestEmbeddedReleases(t *testing.T) {
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"2.6.3", "2.8.0", "2.7.0 2.8.0"},
		{"2.6.3", "2.7.1", "2.7.0 2.7.1"},
		{"2.7.0", "2.8.0", "2.8.0"},
		{"2.7.1", "2.8.0", "2.8.0"},
		{"2.6.3", "2.7.0", "2.7.0"},
	} {
		p, err := Path(set, tc.from, tc.to)
		if err != nil {
			t.Fatalf("Path(%s, %s): %v", tc.from, tc.to, err)
		}
		if got := versions(p); got != tc.want {
			t.Errorf("Path(%s, %s) = %q, want %q", tc.from, tc.to, got, tc.want)
		}
	}
	if r, err := Latest(set, "2.6.3"); err != nil || r.Version != "2.8.0" {
		t.Errorf("Latest(2.6.3) = %v, %v", r, err)
	}
	if _, err := Path(set, "2.8.0", "2.7.1"); !errors.As(err, new(*DowngradeError)) {
		t.Errorf("2.8.0 → 2.7.1: err = %v, want a downgrade refusal", err)
	}
}

func TestCheck(t *testing.T) {
	set := testGraph(t)
	p, err := Path(set, "1.2.0", "2.2.0") // 2.0.0 2.1.0 2.2.0; 2.1.0 needs onprem 0.5.0 and Kubernetes >= 1.32, < 1.36
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(p, "0.5.0", "v1.33.4-eks-1234"); err != nil {
		t.Errorf("Check passing path: %v", err)
	}
	if err := Check(p, "0.5.0", ""); err != nil {
		t.Errorf("Check without Kubernetes: %v", err)
	}

	err = Check(p, "0.4.0", "")
	var se *StepError
	if !errors.As(err, &se) || se.N != 2 || se.Of != 3 || se.From != "2.0.0" || se.To != "2.1.0" {
		t.Fatalf("err = %v, want a *StepError for step 2 (2.0.0 → 2.1.0)", err)
	}
	for _, want := range []string{"step 2 of 3 (2.0.0 → 2.1.0)", "needs onprem 0.5.0 or newer", "this is onprem 0.4.0", "download a newer onprem"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	err = Check(p, "0.5.0", "v1.31.2")
	if !errors.As(err, &se) || se.N != 2 {
		t.Fatalf("err = %v, want a *StepError for step 2", err)
	}
	for _, want := range []string{"step 2 of 3 (2.0.0 → 2.1.0)", "Kubernetes v1.31.2 is too old for release 2.1.0, which supports >= 1.32, < 1.36", "upgrade the cluster into that range before this step"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	err = Check(p, "0.5.0", "1.37.0")
	if err == nil || !strings.Contains(err.Error(), "Kubernetes 1.37.0 is too new for release 2.1.0") {
		t.Errorf("err = %v", err)
	}

	// Every failing step is reported, the installer and Kubernetes alike.
	err = Check(p, "0.4.0", "1.29.0")
	var all interface{ Unwrap() []error }
	if !errors.As(err, &all) || len(all.Unwrap()) != 4 {
		t.Errorf("want 4 problems (3 Kubernetes, 1 onprem): %v", err)
	} else {
		for _, e := range all.Unwrap() {
			if !errors.As(e, &se) {
				t.Errorf("%v is not a *StepError", e)
			}
		}
	}

	if err := Check(p, "dev", ""); err == nil || !strings.Contains(err.Error(), "not a semantic version") {
		t.Errorf("bad installer version: %v", err)
	}
	if err := Check(p, "0.5.0", "latest"); err == nil {
		t.Error("bad Kubernetes version: no error")
	}
	if err := Check(nil, "0.1.0", "1.30.0"); err != nil {
		t.Errorf("empty path: %v", err)
	}
}

// The embedded path on a cluster the last step does not support: the error
// names that step.
func TestCheckEmbedded(t *testing.T) {
	set, err := release.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Path(set, "2.6.3", "2.8.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := Check(p, "0.1.0", "v1.34.1"); err != nil {
		t.Errorf("v1.34.1: %v", err)
	}
	err = Check(p, "0.1.0", "v1.31.5")
	if err == nil || !strings.Contains(err.Error(), "step 2 of 2 (2.7.0 → 2.8.0): Kubernetes v1.31.5 is too old for release 2.8.0") {
		t.Errorf("v1.31.5: %v", err)
	}
	err = Check(p, "0.1.0", "v1.38.0")
	if err == nil || !strings.Contains(err.Error(), "step 1 of 2 (upgrade to 2.7.0): Kubernetes v1.38.0 is too new for release 2.7.0") {
		t.Errorf("v1.38.0: %v", err)
	}
}

func TestSteps(t *testing.T) {
	set := testGraph(t)
	p, _ := Path(set, "1.0.0", "2.0.0")
	from, _ := set.Get("1.0.0")
	var got []string
	for _, s := range Steps(from, p) {
		got = append(got, s.String())
	}
	if strings.Join(got, ", ") != "1.0.0 → 1.2.0, 1.2.0 → 2.0.0" {
		t.Errorf("steps = %v", got)
	}
}

// Random graphs: every path Path returns is made of allowed edges, stops on
// every required release in between, is as short as any valid path and, of
// the shortest, the newest; every NoPathError is confirmed by exhaustive
// search.
func TestPathProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 2026))
	var found, multi, noPath int
	defer func() { t.Logf("%d paths (%d of several steps), %d without a path", found, multi, noPath) }()
	for g := 0; g < 150; g++ {
		rels := randomGraph(rng)
		set := buildSet(t, rels...)
		n := len(rels)
		vs := make([]*semver.Version, n)
		cs := make([]*semver.Constraints, n)
		for i, r := range rels {
			vs[i] = semver.MustParse(r.version)
			if r.from != "" {
				cs[i], _ = semver.NewConstraint(r.from)
			}
		}
		admits := func(u, v int) bool { return cs[v] != nil && cs[v].Check(vs[u]) }
		for k := 0; k < 30; k++ {
			f, to := rng.IntN(n), rng.IntN(n)
			p, err := Path(set, rels[f].version, rels[to].version)
			switch {
			case to < f:
				if !errors.As(err, new(*DowngradeError)) {
					t.Fatalf("graph %d %s → %s: err = %v, want downgrade", g, rels[f].version, rels[to].version, err)
				}
				continue
			case to == f:
				if err != nil || len(p) != 0 {
					t.Fatalf("same version: %v %v", p, err)
				}
				continue
			}
			best := bruteForce(rels, admits, f, to)
			ctx := fmt.Sprintf("graph %d %v: %s → %s", g, rels, rels[f].version, rels[to].version)
			if err != nil {
				var np *NoPathError
				if !errors.As(err, &np) {
					t.Fatalf("%s: err = %v", ctx, err)
				}
				if best != nil {
					t.Fatalf("%s: NoPathError %v, but %v is a valid path", ctx, err, best)
				}
				noPath++
				continue
			}
			// Edges and required stops, checked on the versions.
			idx := make([]int, len(p))
			prev := f
			for i, r := range p {
				idx[i] = slices.IndexFunc(rels, func(x rel) bool { return x.version == r.Version })
				if !admits(prev, idx[i]) || idx[i] <= prev {
					t.Fatalf("%s: step %s → %s not allowed by %q", ctx, rels[prev].version, r.Version, rels[idx[i]].from)
				}
				prev = idx[i]
			}
			if prev != to {
				t.Fatalf("%s: path %s ends elsewhere", ctx, versions(p))
			}
			for k := f + 1; k < to; k++ {
				if rels[k].required && !slices.Contains(idx, k) {
					t.Fatalf("%s: path %s skips required %s", ctx, versions(p), rels[k].version)
				}
			}
			if best == nil || !slices.Equal(idx, best) {
				t.Fatalf("%s: path %v, exhaustive search says %v", ctx, idx, best)
			}
			found++
			if len(p) > 1 {
				multi++
			}
		}
	}
}

// bruteForce tries every subset of the releases strictly between f and t as
// the intermediate stops and returns the best valid path (indices, ending
// with t): fewest steps, then newest at the first difference. nil: none.
func bruteForce(rels []rel, admits func(u, v int) bool, f, t int) []int {
	inner := t - f - 1
	var best []int
	for mask := 0; mask < 1<<inner; mask++ {
		path := []int{}
		for i := 0; i < inner; i++ {
			if mask&(1<<i) != 0 {
				path = append(path, f+1+i)
			}
		}
		path = append(path, t)
		ok := true
		for k := f + 1; k < t && ok; k++ {
			if rels[k].required && !slices.Contains(path, k) {
				ok = false
			}
		}
		prev := f
		for _, v := range path {
			if !ok {
				break
			}
			ok = admits(prev, v)
			prev = v
		}
		if !ok {
			continue
		}
		if best == nil || len(path) < len(best) || (len(path) == len(best) && slices.Compare(path, best) > 0) {
			best = path
		}
	}
	return best
}

// randomGraph makes 6 to 10 ascending versions; each after the first gets an
// UpgradeFrom range over older versions (sometimes none), and some are
// required.
func randomGraph(rng *rand.Rand) []rel {
	n := 6 + rng.IntN(5)
	major, minor, patch := 1, 0, 0
	var rels []rel
	for i := 0; i < n; i++ {
		if i > 0 {
			switch x := rng.IntN(10); {
			case x < 6:
				patch++
			case x < 9:
				minor, patch = minor+1, 0
			default:
				major, minor, patch = major+1, 0, 0
			}
		}
		r := rel{version: fmt.Sprintf("%d.%d.%d", major, minor, patch), required: rng.IntN(5) == 0}
		if i > 0 && rng.IntN(8) != 0 {
			lo := rng.IntN(i)
			if rng.IntN(2) == 0 {
				r.from = fmt.Sprintf(">= %s, < %s", rels[lo].version, r.version)
			} else {
				hi := lo + rng.IntN(i-lo)
				r.from = fmt.Sprintf(">= %s, <= %s", rels[lo].version, rels[hi].version)
			}
		}
		rels = append(rels, r)
	}
	return rels
}
