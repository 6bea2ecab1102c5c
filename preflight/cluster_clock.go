package preflight

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

const clockSkewID = "clock.skew"

// Clock skew thresholds: above clockWarn the check warns, above clockFail
// it fails (certificates onprem generates and the lock's lease are dated).
const (
	clockWarn = 30 * time.Second
	clockFail = 5 * time.Minute
)

// clockSkewCheck compares this machine's clock with the API server's (the
// Date header of its /version answer).
func clockSkewCheck() Check {
	return Check{
		ID:       clockSkewID,
		Title:    "this machine's clock agrees with the API server's",
		Severity: Blocking,
		Run:      runClockSkew,
	}
}

// serverDate GETs /version and returns the Date header of the answer with
// this machine's clock before and after the request.
func serverDate(ctx context.Context, cfg *rest.Config, now func() time.Time) (date, before, after time.Time, err error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return date, before, after, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/version", nil)
	if err != nil {
		return date, before, after, err
	}
	before = now()
	resp, err := hc.Do(req)
	after = now()
	if err != nil {
		return date, before, after, err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	h := resp.Header.Get("Date")
	if h == "" {
		return date, before, after, fmt.Errorf("the answer (%s) has no Date header", resp.Status)
	}
	date, err = http.ParseTime(h)
	if err != nil {
		return date, before, after, fmt.Errorf("the Date header %q cannot be read: %w", h, err)
	}
	return date, before, after, nil
}

// skewOf is how far the server's clock is from ours: the Date header has a
// resolution of a second, so the skew is counted from the middle of the
// request and half a second of rounding is forgiven.
func skewOf(date, before, after time.Time) time.Duration {
	mid := before.Add(after.Sub(before) / 2)
	d := date.Sub(mid)
	if d < 0 {
		d = -d
	}
	d -= 500 * time.Millisecond
	if d < 0 {
		d = 0
	}
	return d.Round(time.Second)
}

func runClockSkew(ctx context.Context, env *Env) Outcome {
	if env.Cluster == nil || env.Cluster.Config == nil {
		return missingInput(Blocking, "the cluster connection")
	}
	now := env.Now
	if now == nil {
		now = time.Now
	}
	date, before, after, err := serverDate(ctx, env.Cluster.Config, now)
	if err != nil {
		return cannotRun(Blocking, clockSkewID, "read the API server's time", err)
	}
	skew := skewOf(date, before, after)
	dir := "ahead of"
	if date.Before(before) {
		dir = "behind"
	}
	rem := "synchronise this machine's clock and the cluster nodes' clocks with NTP (e.g. timedatectl set-ntp true; chronyc tracking)"
	switch {
	case skew > clockFail:
		return Outcome{Result: Fail,
			Message:     fmt.Sprintf("the API server's clock is %s %s this machine's (more than %s): generated certificates would not be valid yet or already expired, and the installation's lock lease would be misjudged", skew, dir, clockFail),
			Remediation: rem}
	case skew > clockWarn:
		return Outcome{Result: Warn,
			Message:     fmt.Sprintf("the API server's clock is %s %s this machine's (more than %s)", skew, dir, clockWarn),
			Remediation: rem}
	}
	return Passed("the API server's clock is within %s of this machine's (%s)", clockWarn, skew)
}
