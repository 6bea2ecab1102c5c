//go:build linux

package platform

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/release"
)

// timing holds the figures of one run: each component's time from apply
// to Ready in the install, the install's total, and the longest
// dependency chain.
type timing struct {
	version    string
	components map[string]time.Duration
	order      []string
	install    time.Duration
	chain      []string
	chainTime  time.Duration
	total      time.Duration
	steps      []stepTime
	// recovery is the restore onto an empty cluster: from the command's
	// start to the platform serving its data; recoveryAll to the end of
	// the command, its runner and runtime installed again.
	recovery, recoveryAll time.Duration
	// supportBundle and supportSize: the support bundle of the whole
	// platform with a runner and a runtime, default log limits.
	supportBundle time.Duration
	supportSize   int64
	supportFiles  int
	// traffic: requests read through the ingress controller during the
	// operations that must keep serving (or whose interruption is
	// measured).
	traffic []trafficResult
	// failovers: the high-availability step's node losses.
	failovers []failover
	// drain: the high-availability step's upgrade while draining.
	drain *upgradeDrainFigures
	// move: how long the services were stopped while install moved the
	// databases from single servers to their replicated form.
	move time.Duration
}

// record takes the install's result and computes the critical path: the
// chain of dependsOn edges whose components' own apply-to-Ready times add
// up to the most.
func (tm *timing) record(rel *release.Release, res action.InstallResult) {
	tm.version = rel.Version
	tm.install = res.Elapsed
	tm.components = map[string]time.Duration{}
	for _, c := range res.Components {
		tm.components[c.Name] = c.Elapsed
		tm.order = append(tm.order, c.Name)
	}
	deps := map[string][]string{}
	for name := range tm.components {
		if c, ok := rel.Component(name); ok {
			for _, d := range c.DependsOn {
				if _, ok := tm.components[d]; ok {
					deps[name] = append(deps[name], d)
				}
			}
		}
	}
	tm.chain, tm.chainTime = criticalPath(tm.components, deps)
}

// criticalPath returns the heaviest chain of the DAG (weights on nodes),
// from its first component to its last.
func criticalPath(weight map[string]time.Duration, deps map[string][]string) ([]string, time.Duration) {
	best := map[string]time.Duration{}
	prev := map[string]string{}
	var visit func(n string, seen map[string]bool) time.Duration
	visit = func(n string, seen map[string]bool) time.Duration {
		if d, ok := best[n]; ok {
			return d
		}
		if seen[n] { // a cycle cannot happen in a validated release
			return 0
		}
		seen[n] = true
		var longest time.Duration
		for _, d := range deps[n] {
			if w := visit(d, seen); w > longest || prev[n] == "" {
				longest, prev[n] = w, d
			}
		}
		best[n] = longest + weight[n]
		return best[n]
	}
	var end string
	names := make([]string, 0, len(weight))
	for n := range weight {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if visit(n, map[string]bool{}) > best[end] || end == "" {
			end = n
		}
	}
	if end == "" {
		return nil, 0
	}
	var chain []string
	for n := end; n != ""; n = prev[n] {
		chain = append([]string{n}, chain...)
	}
	return chain, best[end]
}

// write writes the figures to $ONPREM_CACHE/e2e/NAME (the checkout of a
// CI run is thrown away) and returns the path and the text.
func (tm *timing) write(t *testing.T, name string) (string, string) {
	var b strings.Builder
	fmt.Fprintf(&b, "onprem kind e2e, %s\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "install of %s, time from apply to Ready per component (apply order):\n", tm.version)
	for _, n := range tm.order {
		fmt.Fprintf(&b, "  %-20s %6.1f s\n", n, tm.components[n].Seconds())
	}
	fmt.Fprintf(&b, "\ntotal install time (onprem install, preflight included): %.1f s\n", tm.install.Seconds())
	fmt.Fprintf(&b, "true critical path (the longest chain of the release's real dependencies, each link's own apply-to-Ready time): %s = %.1f s\n",
		strings.Join(tm.chain, " → "), tm.chainTime.Seconds())
	if tm.chainTime > 0 {
		fmt.Fprintf(&b, "install wall time / true critical path = %.2f (target ≤ 1.10)\n", tm.install.Seconds()/tm.chainTime.Seconds())
	}
	if len(tm.traffic) > 0 {
		fmt.Fprintf(&b, "\nrequests through the ingress controller (%d per second) during:\n", trafficRate)
		for _, r := range tm.traffic {
			fmt.Fprintf(&b, "  %s\n", r)
		}
	}
	if tm.move > 0 {
		fmt.Fprintf(&b, "\nsingle → high by onprem install (PostgreSQL, RabbitMQ, Redis moved): the services stopped %.1f s\n", tm.move.Seconds())
	}
	if len(tm.failovers) > 0 {
		fmt.Fprintf(&b, "\nnode losses with availability high (a node killed under traffic; serving again: every request sent after it succeeded):\n")
		for _, f := range tm.failovers {
			fmt.Fprintf(&b, "  %s leader's node %s: NotReady after %.1f s, led again after %.1f s, served again after %.1f s (the last failed request ended at %.1f s)\n",
				f.DB, f.Node, f.NotReady.Seconds(), f.Led.Seconds(), f.Served.Seconds(), f.Ended.Seconds())
		}
	}
	if d := tm.drain; d != nil {
		fmt.Fprintf(&b, "\nupgrade to %s with availability high while every worker was drained in turn: upgrade apply %.1f s\n", d.Version, d.Upgrade.Seconds())
		for _, n := range d.Drains {
			fmt.Fprintf(&b, "  %s drained %.1f s after the upgrade began, in %.1f s (%d pods); every pod ready again %.1f s after its drain began\n",
				n.Node, n.Began.Seconds(), n.Drained.Seconds(), n.Evicted, n.Back.Seconds())
		}
		for _, db := range []string{"postgresql", "redis", "rabbitmq"} {
			fmt.Fprintf(&b, "  %s: %d switchovers %v\n", db, len(d.Switchovers[db]), d.Switchovers[db])
		}
	}
	if tm.recovery > 0 {
		fmt.Fprintf(&b, "\nrecovery onto an empty cluster (onprem restore from the bucket, to every component Ready with its data): %.1f s; with the runner and the GitOps runtime installed again: %.1f s\n",
			tm.recovery.Seconds(), tm.recoveryAll.Seconds())
	}
	if tm.supportBundle > 0 {
		fmt.Fprintf(&b, "\nsupport bundle of the whole platform (runner and runtime included, default log limits): %.1f s, %.2f MB, %d files (targets: under 20 s, under 10 MB)\n",
			tm.supportBundle.Seconds(), float64(tm.supportSize)/1e6, tm.supportFiles)
	}
	fmt.Fprintf(&b, "\nsteps of the test:\n")
	for _, s := range tm.steps {
		fmt.Fprintf(&b, "  %-55s %7.1f s\n", s.Name, s.Took.Seconds())
	}
	fmt.Fprintf(&b, "whole test: %.1f s\n", tm.total.Seconds())
	path := filepath.Join(outputDir(), name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Errorf("timing file: %v", err)
	} else if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Errorf("timing file: %v", err)
	}
	return path, b.String()
}

func TestCriticalPath(t *testing.T) {
	s := time.Second
	weight := map[string]time.Duration{"ingress": 10 * s, "mongodb": 20 * s, "redis": 5 * s, "db-provision": 8 * s, "api": 3 * s, "ui": 30 * s}
	deps := map[string][]string{
		"mongodb":      {"ingress"},
		"redis":        {"ingress"},
		"db-provision": {"mongodb"},
		"api":          {"db-provision", "redis"},
		"ui":           {"ingress"},
	}
	chain, d := criticalPath(weight, deps)
	if got := strings.Join(chain, ","); got != "ingress,mongodb,db-provision,api" || d != 41*s {
		t.Errorf("critical path %s = %s, want ingress,mongodb,db-provision,api = 41s", got, d)
	}
}
