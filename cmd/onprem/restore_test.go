package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"onprem.dev/onprem/installer/action"
)

// The summary of a restore onto an empty cluster tells the platform's own
// recovery time apart from the runners' and runtimes' installs after it.
func TestPrintRestoreSeparatesThePlatformFromItsAttachments(t *testing.T) {
	res := &action.RestoreResult{
		Backup: "onprem-20261202T060305Z.onprem-backup", Version: "2.7.1", Namespace: "onprem", Mode: action.RestoreEmptyCluster,
		Databases: []string{"postgresql/audit"},
		Runners:   []action.AttachmentResult{{Name: "default", Outcome: "installed", Elapsed: 22400 * time.Millisecond}},
		Runtimes: []action.AttachmentResult{
			{Name: "codefresh", Outcome: "installed", Message: "0 Git source(s), 0 managed cluster(s) restored", Elapsed: 195600 * time.Millisecond},
			{Name: "remote", Outcome: "left", Message: "runs on another cluster (https://10.0.0.1:6443): not lost"},
		},
		Serving: 143 * time.Second,
		Elapsed: 361 * time.Second,
	}
	var b bytes.Buffer
	printRestore(&b, res, true)
	out := b.String()
	for _, want := range []string{
		"  runner default: installed in 22.4s\n",
		"  runtime codefresh: installed in 3m15.6s: 0 Git source(s), 0 managed cluster(s) restored\n",
		"  runtime remote: left: runs on another cluster (https://10.0.0.1:6443): not lost\n",
		"  in 6m1s (the platform served again after 2m23s; then its runners and runtimes); check it with: onprem status --namespace onprem\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}

	// Without a runner or runtime installed again, the whole time is the
	// platform's: one figure.
	res.Runners, res.Runtimes = nil, res.Runtimes[1:]
	res.Elapsed = res.Serving
	b.Reset()
	printRestore(&b, res, true)
	if want := "  in 2m23s; check it with"; !strings.Contains(b.String(), want) || strings.Contains(b.String(), "served again") {
		t.Errorf("want %q and no second figure in:\n%s", want, b.String())
	}
}
