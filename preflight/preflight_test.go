package preflight

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRunReportsEveryCheckAndSkipsAndContainsFailures(t *testing.T) {
	var running, peak atomic.Int32
	slow := func(res Result) func(context.Context, *Env) Outcome {
		return func(context.Context, *Env) Outcome {
			n := running.Add(1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(20 * time.Millisecond)
			running.Add(-1)
			return Outcome{Result: res, Message: string(res)}
		}
	}
	checks := []Check{
		{ID: "b-pass", Severity: Blocking, Run: slow(Pass)},
		{ID: "a-fail", Severity: Blocking, Run: slow(Fail)},
		{ID: "c-advisory-fails", Severity: Advisory, Run: slow(Fail)},
		{ID: "d-panics", Severity: Blocking, Run: func(context.Context, *Env) Outcome { panic("boom") }},
		{ID: "e-hangs", Severity: Advisory, Run: func(ctx context.Context, _ *Env) Outcome { <-ctx.Done(); time.Sleep(time.Hour); return Outcome{} }},
		{ID: "f-skipped", Severity: Blocking, Run: func(context.Context, *Env) Outcome { t.Error("a skipped check ran"); return Outcome{} }},
		{ID: "g-empty", Severity: Blocking, Run: func(context.Context, *Env) Outcome { return Outcome{} }},
	}
	rep, err := Run(context.Background(), &Env{}, checks, Options{Skip: []string{"f-skipped"}, Concurrency: 2, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Result{}
	var order []string
	for _, f := range rep.Findings {
		got[f.ID] = f.Result
		order = append(order, f.ID)
	}
	want := map[string]Result{"a-fail": Fail, "b-pass": Pass, "c-advisory-fails": Warn, "d-panics": Fail, "e-hangs": Warn, "f-skipped": Skipped, "g-empty": Fail}
	for id, r := range want {
		if got[id] != r {
			t.Errorf("%s: %s, want %s", id, got[id], r)
		}
	}
	if strings.Join(order, ",") != "a-fail,b-pass,c-advisory-fails,d-panics,e-hangs,f-skipped,g-empty" {
		t.Errorf("order = %v", order)
	}
	if !rep.Failed() || len(rep.Skipped) != 1 {
		t.Errorf("failed=%v skipped=%v", rep.Failed(), rep.Skipped)
	}
	if peak.Load() > 2 {
		t.Errorf("%d checks ran at once, bound 2", peak.Load())
	}
	for _, f := range rep.Findings {
		if f.ID == "d-panics" && !strings.Contains(f.Message, "crashed") {
			t.Errorf("panic message: %s", f.Message)
		}
		if f.ID == "e-hangs" && !strings.Contains(f.Message, "did not complete") {
			t.Errorf("timeout message: %s", f.Message)
		}
	}
}

func TestRunRefusesUnknownSkip(t *testing.T) {
	_, err := Run(context.Background(), &Env{}, []Check{{ID: "x", Run: func(context.Context, *Env) Outcome { return Passed("ok") }}}, Options{Skip: []string{"y"}})
	var ue *UnknownCheckError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "[x]") {
		t.Errorf("err = %v", err)
	}
}
