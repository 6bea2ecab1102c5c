//go:build linux

package platform

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/installer/snapshot"
	"onprem.dev/onprem/installer/support"
	"onprem.dev/onprem/installer/support/supporttest"
	"onprem.dev/onprem/preflight"
)

// doctorFinding runs onprem doctor until it reports a finding of analyzer
// about component whose title holds text (for at most a minute: the
// failure it looks for is already there), checks its severity, its fix and
// (for an error) doctor's exit code, and returns it.
func (e *env) doctorFinding(analyzer, component, text string, severity doctor.Severity) doctor.Finding {
	e.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		stdout, _, err := e.run("doctor", "-o", "json", "--no-preflight", "--kubeconfig", e.kubeconfig)
		var rep doctor.Report
		if jerr := json.Unmarshal([]byte(stdout), &rep); jerr == nil {
			for _, f := range rep.Findings {
				if f.Analyzer == analyzer && f.Component == component && strings.Contains(f.Title, text) {
					if f.Severity != severity || f.Remediation == "" || severity == doctor.Error && err == nil {
						e.t.Fatalf("doctor's finding %+v: exit %v", f, exitOf(err))
					}
					e.t.Logf("doctor: [%s] %s\n\tevidence: %s\n\tfix: %s", f.Severity, f.Title, strings.Join(f.Evidence, "; "), f.Remediation)
					return f
				}
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("doctor did not name %s of %s in a minute (last answer: %s)", text, component, tailLines(stdout, 40))
		}
		time.Sleep(2 * time.Second)
	}
}

// progressAt returns the time (seconds since the command began) of the
// first progress line of component (any, when "") that says what, or of
// the last such line when last is set.
func progressAt(stderr, component, what string, last bool) (float64, bool) {
	at, found := 0.0, false
	for _, line := range strings.Split(stderr, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || !strings.HasSuffix(fields[0], "s") || (component != "" && fields[1] != component) || !strings.Contains(line, what) {
			continue
		}
		s, err := strconv.ParseFloat(strings.TrimSuffix(fields[0], "s"), 64)
		if err != nil {
			continue
		}
		at, found = s, true
		if !last {
			break
		}
	}
	return at, found
}

// supportBundle writes a support bundle of the whole platform (with
// attachments: a runner and a runtime included), greps it for every secret
// value of the cluster, analyzes it offline, and records its time and
// size (of the first).
func (e *env) supportBundle(ctx context.Context, bundle string, attachments bool) {
	e.t.Helper()
	file := filepath.Join(e.dir, "support.tar.gz")
	if !attachments {
		file = filepath.Join(e.dir, "support-ha.tar.gz")
	}
	t0 := time.Now()
	e.onprem("support-bundle", "--file", file, "--kubeconfig", e.kubeconfig, "--bundle", bundle, "--public-key", e.publicKeyFile)
	took := time.Since(t0)
	st, err := os.Stat(file)
	if err != nil {
		e.t.Fatal(err)
	}
	files, err := support.Open(file)
	if err != nil {
		e.t.Fatal(err)
	}
	if e.timing.supportBundle == 0 {
		e.timing.supportBundle, e.timing.supportSize, e.timing.supportFiles = took, st.Size(), len(files)
	}
	e.t.Logf("support bundle: %s, %d bytes, %d files", took.Round(100*time.Millisecond), st.Size(), len(files))

	needles, generated, err := supporttest.Needles(ctx, e.cluster.Client)
	if err != nil {
		e.t.Fatal(err)
	}
	if generated < 10 {
		e.t.Fatalf("only %d generated secret values to look for", generated)
	}
	for _, l := range supporttest.Leaks(files, needles) {
		e.t.Error(l)
	}
	e.t.Logf("redaction: %d secret values (all forms) of every Secret of the cluster grepped in %d files", len(needles), len(files))

	// What support needs is there: the runner's and runtime's namespaces,
	// logs, the services' health through their readiness endpoints.
	var meta struct {
		Namespaces []string `json:"namespaces"`
	}
	decodeJSON(e.t, files["meta.json"], &meta)
	if attachments && len(meta.Namespaces) < 3 {
		e.t.Errorf("the bundle covers the namespaces %v: not the runner's and the runtime's", meta.Namespaces)
	}
	var health []struct {
		Service  string
		Answered bool
		Ready    bool
	}
	decodeJSON(e.t, files["health.json"], &health)
	answered := 0
	for _, h := range health {
		if h.Answered && h.Ready {
			answered++
		}
	}
	if answered == 0 {
		e.t.Errorf("no service answered its readiness endpoint: %+v", health)
	}
	logs := 0
	for p := range files {
		if strings.HasSuffix(p, ".log") {
			logs++
		}
	}
	if logs == 0 {
		e.t.Error("the bundle holds no log")
	}
	// The cluster's DNS, which every service's lookups go through: its
	// pods (kind's CoreDNS) and their logs, nothing else of kube-system.
	var dns []corev1.Pod
	decodeJSON(e.t, files[snapshot.FileClusterDNS], &dns)
	dnsLogs := 0
	for _, p := range dns {
		if _, ok := files["logs/"+preflight.DNSNamespace+"/"+p.Name+"/coredns.log"]; ok {
			dnsLogs++
		}
	}
	if len(dns) == 0 || dnsLogs != len(dns) {
		e.t.Errorf("the bundle holds %d DNS pods in %s and the logs of %d", len(dns), snapshot.FileClusterDNS, dnsLogs)
	}
	for p := range files {
		if strings.HasPrefix(p, "namespaces/"+preflight.DNSNamespace+"/") {
			e.t.Errorf("the bundle holds %s: only the DNS pods of kube-system are collected", p)
		}
	}

	stdout, _, _ := e.run("support-bundle", "analyze", file, "-o", "json")
	var rep doctor.Report
	decodeJSON(e.t, []byte(stdout), &rep)
	for _, f := range rep.Findings {
		e.t.Logf("offline finding: [%s] %s: %s", f.Severity, f.Analyzer, f.Title)
	}
	if len(rep.Analyzers) < 12 {
		e.t.Errorf("analyze ran %d analyzers", len(rep.Analyzers))
	}
}
