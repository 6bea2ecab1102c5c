// Package preflight holds the checks that run before an install or an
// upgrade touches anything: each has a stable ID, a one-line title, the
// severity of its failure, and on every run a result, a message and a
// remediation that tells the operator what to do. All checks run (in
// parallel, bounded), the report is printed, and nothing is changed if any
// check fails.
package preflight

import (
	"context"

	"fmt"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

// Result of one check.
type Result string

// Results, from best to worst.
const (
	Pass    Result = "pass"
	Skipped Result = "skipped" // the operator skipped it (--skip-check)
	Warn    Result = "warn"
	Fail    Result = "fail"
)

// Severity is what a check that does not pass means.
type Severity string

// Severities.
const (
	// Blocking: the install cannot succeed; the check fails.
	Blocking Severity = "blocking"
	// Advisory: the install can go on, but the operator should look; the
	// check warns.
	Advisory Severity = "advisory"
)

// Env is what checks read: the configuration, its release and rendered
// objects, and the cluster.
type Env struct {
	Installation *config.Installation
	Release      *release.Release
	Releases     *release.Set
	Rendered     *render.Result
	Cluster      *kube.Cluster
	// Now is this machine's clock (tests replace it).
	Now func() time.Time
	// Provided are Secrets of the platform namespace that the operation
	// itself brings (a restore brings the backup's): checks read them
	// where the cluster does not have them yet.
	Provided map[string]*corev1.Secret
	// MovesAvailability says the operation moves installed databases
	// between a single server and a replicated cluster when
	// spec.availability changes (install does); any other operation is
	// refused such a change.
	MovesAvailability bool
}

// Secret returns the Secret name of the platform namespace ns: the
// cluster's, else the one the operation brings (Provided), else the
// cluster's NotFound error.
func (e *Env) Secret(ctx context.Context, ns, name string) (*corev1.Secret, error) {
	sec, err := e.Cluster.Client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if p, ok := e.Provided[name]; ok {
			return p, nil
		}
	}
	return sec, err
}

// Outcome is what one run of a check found.
type Outcome struct {
	Result      Result   `json:"result"`
	Message     string   `json:"message"`
	Remediation string   `json:"remediation,omitempty"`
	Details     []string `json:"details,omitempty"`
}

// Passed is a passing outcome.
func Passed(format string, a ...any) Outcome {
	return Outcome{Result: Pass, Message: fmt.Sprintf(format, a...)}
}

// Check is one preflight check.
type Check struct {
	// ID is stable: operators skip checks by it and scripts read it.
	ID string
	// Title is the one-line explanation shown by `onprem preflight --list`.
	Title string
	// Severity of a failure: Blocking checks fail, Advisory ones warn.
	Severity Severity
	// Run performs the check. It reports a problem through the outcome,
	// never by panicking; a check that cannot run (no permission, a
	// timeout) says so in a Warn or Fail outcome.
	Run func(ctx context.Context, env *Env) Outcome
}

// Finding is a check's outcome in a report.
type Finding struct {
	ID       string        `json:"id"`
	Title    string        `json:"title"`
	Severity Severity      `json:"severity"`
	Elapsed  time.Duration `json:"elapsed"`
	Outcome
}

// Report is the result of every check, in ID order.
type Report struct {
	Findings []Finding `json:"checks"`
	Skipped  []string  `json:"skipped,omitempty"`
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool {
	for _, f := range r.Findings {
		if f.Result == Fail {
			return true
		}
	}
	return false
}

// Options tunes Run.
type Options struct {
	// Skip lists check IDs not to run; they are reported as skipped.
	Skip []string
	// Concurrency bounds the checks run at once (default 8).
	Concurrency int
	// Timeout bounds each check (default 20s): a check that takes longer
	// is reported as not having completed, with its severity.
	Timeout time.Duration
}

// UnknownCheckError names a --skip-check ID that does not exist.
type UnknownCheckError struct {
	ID    string
	Known []string
}

func (e *UnknownCheckError) Error() string {
	return fmt.Sprintf("--skip-check %s: no such check; checks: %v", e.ID, e.Known)
}

// Run runs every check except the skipped ones and returns the report.
func Run(ctx context.Context, env *Env, checks []Check, o Options) (*Report, error) {
	if o.Concurrency <= 0 {
		o.Concurrency = 8
	}
	if o.Timeout <= 0 {
		o.Timeout = 20 * time.Second
	}
	if env.Now == nil {
		env.Now = time.Now
	}
	known := map[string]bool{}
	var ids []string
	for _, c := range checks {
		known[c.ID] = true
		ids = append(ids, c.ID)
	}
	sort.Strings(ids)
	skip := map[string]bool{}
	for _, id := range o.Skip {
		if !known[id] {
			return nil, &UnknownCheckError{ID: id, Known: ids}
		}
		skip[id] = true
	}
	findings := make([]Finding, len(checks))
	var wg sync.WaitGroup
	slots := make(chan struct{}, o.Concurrency)
	for i, c := range checks {
		findings[i] = Finding{ID: c.ID, Title: c.Title, Severity: c.Severity}
		if skip[c.ID] {
			findings[i].Outcome = Outcome{Result: Skipped, Message: "skipped by --skip-check " + c.ID}
			continue
		}
		wg.Add(1)
		go func(i int, c Check) {
			defer wg.Done()
			slots <- struct{}{}
			defer func() { <-slots }()
			start := time.Now()
			findings[i].Outcome = runOne(ctx, env, c, o.Timeout)
			findings[i].Elapsed = time.Since(start)
		}(i, c)
	}
	wg.Wait()
	sort.SliceStable(findings, func(a, b int) bool { return findings[a].ID < findings[b].ID })
	rep := &Report{Findings: findings}
	for _, id := range ids {
		if skip[id] {
			rep.Skipped = append(rep.Skipped, id)
		}
	}
	return rep, nil
}

// notPassing is the result of a problem for a check of severity s.
func notPassing(s Severity) Result {
	if s == Advisory {
		return Warn
	}
	return Fail
}

// runOne runs a check with a timeout, turning a panic or an overrun into
// an outcome of the check's severity.
func runOne(ctx context.Context, env *Env, c Check, timeout time.Duration) (out Outcome) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan Outcome, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				done <- Outcome{Result: notPassing(c.Severity),
					Message:     fmt.Sprintf("the check could not run: it crashed (%v)", r),
					Remediation: "report this as a bug in onprem, with the output of 'onprem preflight -o json'; skip the check with --skip-check " + c.ID + " if you are sure it does not apply",
					Details:     []string{string(debug.Stack())}}
			}
		}()
		done <- c.Run(ctx, env)
	}()
	select {
	case out = <-done:
	case <-ctx.Done():
		out = Outcome{Result: notPassing(c.Severity),
			Message:     fmt.Sprintf("the check did not complete within %s", timeout),
			Remediation: "check the connectivity it needs (cluster, registry, databases) and run preflight again"}
	}
	if out.Result == "" {
		out.Result = notPassing(c.Severity)
		out.Message = "the check returned no result (a bug in onprem)"
	}
	// A check's own problem never exceeds its severity: advisory checks
	// warn, they do not fail.
	if out.Result == Fail && c.Severity == Advisory {
		out.Result = Warn
	}
	return out
}
