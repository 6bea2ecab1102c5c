package buildplan

import (
	"fmt"
	"sort"
	"time"
)

// always reports whether n runs every time (it has no Fresh).
func (n *node) always() bool { return n.Fresh == nil }

// coldEstimate is the measured cold duration of n on this machine, or its
// own estimate.
func (r *runner) coldEstimate(n *node) time.Duration {
	if d := r.stored[n.Name].Took; d > 0 {
		return d
	}
	return n.Estimate
}

// estimate is how long n should take in this run: its cold estimate, but
// nothing for a step that always runs and has run here before (its Run is
// cheap when there is nothing to do).
func (r *runner) estimate(n *node) time.Duration {
	if r.cold {
		return r.coldEstimate(n)
	}
	if n.always() && !r.stored[n.Name].When.IsZero() {
		return 0
	}
	return r.coldEstimate(n)
}

// prioritize gives every node the longest chain of estimated work from it
// to the end of the graph, counting only the steps in build.
func (r *runner) prioritize(build func(*node) bool) {
	for i := len(r.order) - 1; i >= 0; i-- {
		n := r.order[i]
		var longest time.Duration
		for _, d := range n.dependents {
			longest = max(longest, d.priority)
		}
		n.priority = longest
		if build(n) {
			n.priority += r.estimate(n)
		}
	}
}

// simulate estimates how long the steps in build take from now with the
// run's slots, the longest chain first; running maps the steps already
// running to how long they have run. Steps outside build take no time.
func (r *runner) simulate(build func(*node) bool, running map[*node]time.Duration) time.Duration {
	type job struct {
		n   *node
		end time.Duration
	}
	pending := map[*node]int{}
	var ready []*node
	var jobs []job
	used := map[Resource]int{}
	doneSet := map[*node]bool{}
	for _, n := range r.order {
		if d, ok := running[n]; ok {
			jobs = append(jobs, job{n, max(r.estimate(n)-d, 0)})
			for _, res := range n.Uses {
				used[res]++
			}
			continue
		}
		if !build(n) {
			doneSet[n] = true
			continue
		}
	}
	for _, n := range r.order {
		if doneSet[n] {
			continue
		}
		if _, ok := running[n]; ok {
			continue
		}
		c := 0
		for _, m := range n.needs {
			if !doneSet[m] {
				c++
			}
		}
		pending[n] = c
		if c == 0 {
			ready = append(ready, n)
		}
	}
	var now time.Duration
	for {
		sort.SliceStable(ready, func(i, j int) bool { return ready[i].priority > ready[j].priority })
		var rest []*node
		for _, n := range ready {
			if !r.fits(n, used) {
				rest = append(rest, n)
				continue
			}
			for _, res := range n.Uses {
				used[res]++
			}
			jobs = append(jobs, job{n, now + r.estimate(n)})
		}
		ready = rest
		if len(jobs) == 0 {
			return now
		}
		// The next job to end.
		sort.Slice(jobs, func(i, j int) bool { return jobs[i].end < jobs[j].end })
		j := jobs[0]
		jobs = jobs[1:]
		now = max(now, j.end)
		for _, res := range j.n.Uses {
			used[res]--
		}
		doneSet[j.n] = true
		for _, d := range j.n.dependents {
			if _, ok := pending[d]; !ok {
				continue
			}
			if pending[d]--; pending[d] == 0 {
				ready = append(ready, d)
			}
		}
	}
}

// roundEstimate rounds an estimate to what a person reads: seconds under
// a minute, whole minutes after.
func roundEstimate(d time.Duration) string {
	switch {
	case d <= 0:
		return "no time"
	case d < time.Minute:
		return d.Round(time.Second).String()
	default:
		return fmt.Sprintf("%d min", int((d+30*time.Second)/time.Minute))
	}
}
