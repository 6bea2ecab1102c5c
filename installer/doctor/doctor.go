// Package doctor reads a snapshot of an installation (installer/snapshot)
// and names what is wrong with it: each analyzer looks for one failure
// this platform really has and reports it as a Finding with the evidence
// (an object, an event, a log line) and the fix. The same analyzers run on
// a live cluster (onprem doctor) and offline on a support bundle (onprem
// support-bundle analyze).
package doctor

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"onprem.dev/onprem/installer/fault"
	"onprem.dev/onprem/installer/snapshot"
)

// Severity of a finding.
type Severity string

// Severities, most severe first.
const (
	Error   Severity = "error"
	Warning Severity = "warning"
	Info    Severity = "info"
)

func (s Severity) rank() int {
	switch s {
	case Error:
		return 0
	case Warning:
		return 1
	default:
		return 2
	}
}

// Finding is one thing an analyzer found.
type Finding struct {
	// Analyzer is the ID of the analyzer that found it.
	Analyzer string   `json:"analyzer"`
	Severity Severity `json:"severity"`
	// Title says what is wrong in one line.
	Title string `json:"title"`
	// Object is the object it is about (Kind/namespace/name), Component
	// the platform component that object belongs to, when known.
	Object    string `json:"object,omitempty"`
	Component string `json:"component,omitempty"`
	// Evidence are the facts it rests on: conditions, events, log lines.
	Evidence []string `json:"evidence,omitempty"`
	// Remediation says what to do.
	Remediation string `json:"remediation"`
	// Definitive: the cause will not resolve by itself; waiting longer
	// does not help (an install or upgrade stops on it at once).
	Definitive bool `json:"definitive,omitempty"`
}

// Analyzer is one analysis.
type Analyzer struct {
	ID          string
	Description string
	Run         func(a *Input) []Finding
}

// Input is what an analyzer reads: the snapshot and the time it is judged
// at (its collection time).
type Input struct {
	S   *snapshot.Snapshot
	Now time.Time
	// owners maps namespace/pod to its component (see component).
	owners map[string]string
	// found holds the faults of the collected namespaces (see faults).
	found *[]fault.Fault
}

// Report is the outcome of every analyzer.
type Report struct {
	// Analyzers are the IDs run.
	Analyzers []string  `json:"analyzers"`
	Findings  []Finding `json:"findings"`
}

// HasErrors says whether an error-level finding exists.
func (r *Report) HasErrors() bool {
	for _, f := range r.Findings {
		if f.Severity == Error {
			return true
		}
	}
	return false
}

// Count returns the number of findings of a severity.
func (r *Report) Count(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

// All returns every analyzer, in a stable order.
func All() []Analyzer {
	return []Analyzer{
		imagePull, crashLoop, oomKilled, configError, admissionRefused, podPending, pvcPending, volumeFull, jobFailed, databaseDown,
		replication, ingress, certificateExpiry, staleLock, lastOperation, nodePressure, clusterDNS, releaseFailed,
		componentUnavailable, rollUnfinished, drift, attachments, preflightChecks, backupSchedule,
	}
}

// Analyze runs every analyzer on s; findings come most severe first,
// then by analyzer and object.
func Analyze(s *snapshot.Snapshot) *Report {
	in := &Input{S: s, Now: s.Meta.CollectedAt}
	if in.Now.IsZero() {
		in.Now = time.Now()
	}
	in.owners = owners(s)
	r := &Report{Findings: []Finding{}}
	for _, a := range All() {
		r.Analyzers = append(r.Analyzers, a.ID)
		for _, f := range a.Run(in) {
			f.Analyzer = a.ID
			r.Findings = append(r.Findings, f)
		}
	}
	slices.SortStableFunc(r.Findings, func(a, b Finding) int {
		return cmp.Or(cmp.Compare(a.Severity.rank(), b.Severity.rank()), strings.Compare(a.Analyzer, b.Analyzer), strings.Compare(a.Object, b.Object))
	})
	return r
}

// object names an object for a finding.
func object(kind, ns, name string) string { return fault.Object(kind, ns, name) }

// tail returns the last n non-empty lines of a log.
func tail(text string, n int) []string { return fault.Tail(text, n) }

// since says how long ago t was, rounded for humans.
func since(now, t time.Time) string { return fault.Since(now, t) }
