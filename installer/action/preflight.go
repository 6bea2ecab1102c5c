package action

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/preflight"
)

// Preflight runs every check that can fail an install, changing nothing.
type Preflight struct {
	Source
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn *Configuration
	Set  []string
	// Skip lists check IDs not to run (--skip-check).
	Skip []string
	// Concurrency and Timeout tune the checks (defaults in preflight).
	Concurrency int
	Timeout     time.Duration
}

// PreflightFailedError says that checks failed; the report has the
// details and the fixes.
type PreflightFailedError struct {
	Report *preflight.Report
}

func (e *PreflightFailedError) Error() string {
	var ids []string
	for _, f := range e.Report.Findings {
		if f.Result == preflight.Fail {
			ids = append(ids, f.ID)
		}
	}
	return fmt.Sprintf("preflight: %d check(s) failed (%s); nothing was changed. Fix them and run again, or skip a check you are sure does not apply with --skip-check ID", len(ids), strings.Join(ids, ", "))
}

// Checks lists every check (for --list).
func (p *Preflight) Checks() []preflight.Check { return preflight.All() }

// Run runs the checks. It returns the report, and a
// *PreflightFailedError when a check failed.
func (p *Preflight) Run(ctx context.Context) (*preflight.Report, error) {
	l, err := p.Source.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	res, err := render.Render(ctx, l.RenderOptions(p.Set))
	if err != nil {
		if render.IsInputError(err) {
			return nil, inputErr(err)
		}
		return nil, err
	}
	cl, err := connect(ctx, p.Conn, p.Cluster)
	if err != nil {
		return nil, err
	}
	return runPreflight(ctx, &preflight.Env{Installation: l.Installation, Release: l.Release, Releases: l.Releases, Rendered: res, Cluster: cl,
		MovesAvailability: true}, // the checks install runs: it moves databases between single and high
		preflight.Options{Skip: p.Skip, Concurrency: p.Concurrency, Timeout: p.Timeout})
}

func runPreflight(ctx context.Context, env *preflight.Env, o preflight.Options) (*preflight.Report, error) {
	rep, err := preflight.Run(ctx, env, preflight.All(), o)
	if err != nil {
		var ue *preflight.UnknownCheckError
		if errors.As(err, &ue) {
			return nil, inputErr(err)
		}
		return nil, err
	}
	if rep.Failed() {
		return rep, &PreflightFailedError{Report: rep}
	}
	return rep, nil
}
