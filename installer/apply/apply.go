// Package apply makes a cluster match a rendered platform: one Helm release
// per component, applied in dependency order with independent components in
// parallel (bounded), each waited for with kstatus and a per-component
// timeout. A component whose desired objects did not change since its last
// deployed release, and whose live objects have not drifted from them in a
// field onprem sets (installer/diff's Checker), is left alone, so a
// converged re-run creates no Helm revision; one that drifted is applied
// again (Repaired), which reverts what was changed. The objects come from installer/render; Helm's own rendering is
// replaced by them through a post-renderer, so what `onprem render` shows
// is exactly what is applied, and `helm list` / `helm history` still show
// every component with its chart and values.
package apply

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	helmkube "helm.sh/helm/v4/pkg/kube"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/diff"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/roll"
)

func init() {
	// Helm's server-side applies are onprem's, under one field manager
	// whatever the binary is called (Helm's default is its name), so that
	// the drift check's dry runs (installer/diff) apply as the same
	// manager.
	helmkube.ManagedFieldsManager = diff.FieldManager
}

// Defaults of Options.
const (
	// DefaultConcurrency lets a whole dependency level of the shipped
	// releases (up to 15 services once the databases are provisioned) be
	// applied at once: with 4 slots they queued, and the kind e2e's
	// install took 1.2-1.3x its longest dependency chain instead of
	// following it. Each slot mostly waits on the API server.
	DefaultConcurrency = 16
	DefaultTimeout     = 10 * time.Minute
)

// DigestLabel is the Helm release label holding the digest of the
// component's desired state (chart, chart version and objects).
const DigestLabel = "onprem.dev/digest"

// Options is what Apply needs.
type Options struct {
	// Getter and Client reach the cluster (installer/kube.Cluster has both).
	Getter genericclioptions.RESTClientGetter
	Client kubernetes.Interface
	// Result is the rendered platform to apply.
	Result *render.Result
	// Concurrency bounds the components applied at once.
	Concurrency int
	// Timeout bounds each component's apply and wait.
	Timeout time.Duration
	// DryRun sends everything to the API server as a server-side dry run:
	// objects are validated (admission included) and nothing changes.
	DryRun bool
	// Reporter receives progress events (may be nil).
	Reporter Reporter
	// Charts holds the charts (default: the embedded ones; a bundle brings
	// its own).
	Charts fs.FS
	// Releases overrides how Helm releases are handled (tests); default:
	// the Helm SDK against Getter.
	Releases Releaser
	// StopOnFailure ends the waits of the components still in flight as
	// soon as one fails (they fail with an *OtherFailedError): an upgrade
	// rolls every changed component back anyway, and starts at once.
	// Without it (install) they finish, so that a re-run has less to do.
	StopOnFailure bool
	// Drift compares an unchanged component with its live objects (tests);
	// default with the Helm SDK's releases: installer/diff's Checker
	// against Getter. nil with Releases set: drift is not looked for.
	Drift DriftChecker
}

// OtherFailedError is the error of a component whose wait was ended
// because another one failed (Options.StopOnFailure).
type OtherFailedError struct{ Component string }

func (e *OtherFailedError) Error() string {
	return "stopped waiting: component " + e.Component + " failed"
}

// DriftChecker compares a component with what runs (installer/diff's
// Checker is the real one).
type DriftChecker interface {
	// Drift lists the component's live objects that differ from its
	// objects in a field onprem sets.
	Drift(ctx context.Context, c *render.Component) ([]diff.Drift, error)
	// ForCluster returns the component as it is to be applied on the
	// cluster (fields that are owned elsewhere by design keep their live
	// values).
	ForCluster(ctx context.Context, c *render.Component) (*render.Component, error)
}

// Action is what happened to a component.
type Action string

// Actions.
const (
	Installed Action = "installed"
	Upgraded  Action = "upgraded"
	Unchanged Action = "unchanged"
	// Repaired: the component's objects had not changed, but its live
	// objects had drifted from them; it was applied again.
	Repaired  Action = "repaired"
	Validated Action = "validated" // dry run
	Failed    Action = "failed"
	Skipped   Action = "skipped" // a dependency failed
)

// ComponentResult is the outcome of one component.
type ComponentResult struct {
	Name     string        `json:"name"`
	Action   Action        `json:"action"`
	Revision int           `json:"revision,omitempty"`
	Chart    string        `json:"chart,omitempty"`
	Digest   string        `json:"digest,omitempty"`
	Elapsed  time.Duration `json:"elapsed"`
	Error    string        `json:"error,omitempty"`
	// NotReady explains, after a timeout, which objects are not ready and
	// why (pod conditions, container waiting reasons, warning events).
	NotReady []string `json:"notReady,omitempty"`
	// Repaired names the live objects that had drifted from what onprem
	// applied, and what differed, which this apply reverted
	// ("Deployment/gitops-ui image", "Service/gitops-ui (deleted)"): why a
	// component that had not changed was applied again (Action Repaired),
	// or the drift of a component that was upgraded anyway.
	Repaired []string `json:"repaired,omitempty"`
}

// Report is the outcome of an apply.
type Report struct {
	Components []ComponentResult `json:"components"`
	Elapsed    time.Duration     `json:"elapsed"`
}

// Failed lists the components that failed.
func (r *Report) Failed() []ComponentResult {
	var out []ComponentResult
	for _, c := range r.Components {
		if c.Action == Failed {
			out = append(out, c)
		}
	}
	return out
}

// Component returns the result of the named component.
func (r *Report) Component(name string) (ComponentResult, bool) {
	for _, c := range r.Components {
		if c.Name == name {
			return c, true
		}
	}
	return ComponentResult{}, false
}

// FailedError says which components failed, and why; the Report has the
// details.
type FailedError struct {
	Components []string
	// Errors are the components' errors, in the order of Components.
	Errors []error
}

func (e *FailedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d component(s) failed: %v", len(e.Components), e.Components)
	for i, err := range e.Errors {
		if err != nil && i < len(e.Components) {
			fmt.Fprintf(&b, "; %s: %v", e.Components[i], err)
		}
	}
	return b.String()
}

// Unwrap returns the components' errors (errors.As finds a *StuckError
// among them).
func (e *FailedError) Unwrap() []error { return e.Errors }

// Apply applies every component of the result and returns what happened
// to each. It stops starting components after the first failure (the ones
// running finish), and never removes anything to recover: what was
// applied stays for a re-run. The error is a *FailedError when components
// failed.
func Apply(ctx context.Context, o Options) (*Report, error) {
	if o.Result == nil {
		return nil, errors.New("apply: nothing rendered")
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Reporter == nil {
		o.Reporter = nopReporter{}
	}
	if o.Releases == nil {
		if o.Getter == nil {
			return nil, errors.New("apply: no cluster to apply to")
		}
		o.Releases = NewHelmReleases(o.Getter, o.Result.Namespace, o.Charts)
		if o.Drift == nil && !o.DryRun {
			d, err := NewDriftChecker(o.Getter, o.Result.Namespace)
			if err != nil {
				return nil, err
			}
			o.Drift = d
		}
	}
	start := time.Now()
	res := o.Result

	if err := ensureNamespace(ctx, o, res); err != nil {
		return nil, err
	}

	jobs := make([]*job, 0, len(res.Components))
	byName := map[string]*job{}
	for _, c := range res.Components {
		j, err := newJob(c, res.Namespace)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
		byName[c.Name] = j
		o.Reporter.Report(Event{Component: c.Name, Phase: PhaseQueued})
	}
	for _, j := range jobs {
		for _, d := range j.component.DependsOn {
			if dj, ok := byName[d]; ok {
				j.deps = append(j.deps, dj)
			}
		}
	}

	var ob *observer
	if o.Client != nil && !o.DryRun {
		ob = newObserver(o.Client)
	}
	var others context.Context
	var stopOthers context.CancelCauseFunc
	if o.StopOnFailure {
		others, stopOthers = context.WithCancelCause(context.Background())
		defer stopOthers(nil)
	}

	// The drift check's lists are read at once, while the first
	// components apply, not one dependency level after the other.
	prefetched := make(chan struct{})
	if pf, ok := o.Drift.(prefetcher); ok {
		go func() {
			defer close(prefetched)
			pf.Prefetch(ctx, res.Components)
		}()
	} else {
		close(prefetched)
	}

	var (
		mu      sync.Mutex
		failed  bool
		wg      sync.WaitGroup
		slots   = make(chan struct{}, o.Concurrency)
		started = map[string]bool{}
	)
	// Each job waits for its dependencies, then for a slot. A failure stops
	// every job that has not begun applying.
	for _, j := range jobs {
		wg.Add(1)
		go func(j *job) {
			defer wg.Done()
			defer close(j.done)
			for _, d := range j.deps {
				select {
				case <-d.done:
				case <-ctx.Done():
					j.result = ComponentResult{Name: j.component.Name, Action: Skipped, Error: ctx.Err().Error()}
					return
				}
				if d.result.Action == Failed || d.result.Action == Skipped {
					j.result = ComponentResult{Name: j.component.Name, Action: Skipped, Error: "dependency " + d.component.Name + " did not become ready"}
					o.Reporter.Report(Event{Component: j.component.Name, Phase: PhaseSkipped, Err: errors.New(j.result.Error)})
					return
				}
			}
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				j.result = ComponentResult{Name: j.component.Name, Action: Skipped, Error: ctx.Err().Error()}
				return
			}
			defer func() { <-slots }()
			mu.Lock()
			stop := failed
			started[j.component.Name] = true
			mu.Unlock()
			if stop {
				j.result = ComponentResult{Name: j.component.Name, Action: Skipped, Error: "not started: another component failed"}
				o.Reporter.Report(Event{Component: j.component.Name, Phase: PhaseSkipped, Err: errors.New(j.result.Error)})
				return
			}
			j.result, j.err = applyOne(ctx, o, ob, others, j)
			if j.result.Action == Failed {
				mu.Lock()
				failed = true
				mu.Unlock()
				var other *OtherFailedError
				if stopOthers != nil && !errors.As(j.err, &other) {
					stopOthers(&OtherFailedError{Component: j.component.Name})
				}
			}
		}(j)
	}
	wg.Wait()
	<-prefetched

	report := &Report{Elapsed: time.Since(start)}
	fe := &FailedError{}
	for _, j := range jobs {
		report.Components = append(report.Components, j.result)
		if j.result.Action == Failed {
			fe.Components = append(fe.Components, j.component.Name)
			fe.Errors = append(fe.Errors, j.err)
		}
	}
	if len(fe.Components) > 0 {
		return report, fe
	}
	if err := ctx.Err(); err != nil {
		return report, err
	}
	return report, nil
}

// job is one component on its way through Apply.
type job struct {
	component *render.Component
	manifest  string
	digest    string
	deps      []*job
	done      chan struct{}
	result    ComponentResult
	err       error // why it failed
}

func newJob(c *render.Component, namespace string) (*job, error) {
	manifest, err := Manifest(c)
	if err != nil {
		return nil, err
	}
	return &job{component: c, manifest: manifest, digest: Digest(c, manifest), done: make(chan struct{})}, nil
}

// Manifest is the YAML stream of a component's objects that its Helm
// release holds. Namespace objects are left out: the installer applies the
// namespace itself, so that uninstalling a release never deletes it (nor
// the volumes and secrets in it). So are the CustomResourceDefinitions of
// the chart's crds/ folders (Component.ChartCRDs), which Helm installs
// itself before a first install.
func Manifest(c *render.Component) (string, error) {
	var b bytes.Buffer
	for _, o := range c.Objects {
		if isNamespace(o) || (o.GetKind() == "CustomResourceDefinition" && slices.Contains(c.ChartCRDs, o.GetName())) {
			continue
		}
		data, err := yaml.Marshal(o.Object)
		if err != nil {
			return "", fmt.Errorf("%s: %s/%s: %w", c.Name, o.GetKind(), o.GetName(), err)
		}
		b.WriteString("---\n")
		b.Write(data)
	}
	return b.String(), nil
}

// Digest identifies a component's desired state: the chart, its version
// and the objects.
func Digest(c *render.Component, manifest string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", c.Chart, c.ChartVersion)
	h.Write([]byte(manifest))
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// statefulSets names the StatefulSets among objs.
func statefulSets(objs []*unstructured.Unstructured) []string {
	var out []string
	for _, o := range objs {
		if o.GetKind() == "StatefulSet" && o.GetAPIVersion() == "apps/v1" {
			out = append(out, o.GetName())
		}
	}
	return out
}

func isNamespace(o *unstructured.Unstructured) bool {
	return o.GetKind() == "Namespace" && o.GetAPIVersion() == "v1"
}

// prefetcher is a DriftChecker that can read what it needs ahead
// (installer/diff's Checker).
type prefetcher interface {
	Prefetch(ctx context.Context, comps []*render.Component)
}

// NewDriftChecker compares components of namespace with the cluster of
// getter (installer/diff).
func NewDriftChecker(getter genericclioptions.RESTClientGetter, namespace string) (*diff.Checker, error) {
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	// A check reads one list per kind, at once: never fewer requests
	// than kube.Connect's installer limits allow (client-go's defaults,
	// 5 a second, would make a converged re-run wait for them).
	cfg.QPS, cfg.Burst = max(cfg.QPS, kube.DefaultQPS), max(cfg.Burst, kube.DefaultBurst)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := getter.ToRESTMapper()
	if err != nil {
		return nil, err
	}
	return diff.NewChecker(dyn, mapper, namespace), nil
}

// applyOne installs or upgrades one component and waits for it, watching
// its pods meanwhile (see watcher) when ob is set: a fault that waiting
// cannot fix ends the wait with a *StuckError. The wait also ends when
// others (nil: never) is done: another component failed.
func applyOne(ctx context.Context, o Options, ob *observer, others context.Context, j *job) (ComponentResult, error) {
	c := j.component
	start := time.Now()
	r := ComponentResult{Name: c.Name, Chart: chartRef(c), Digest: j.digest}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	last, err := o.Releases.Last(ctx, c.Name)
	if err != nil {
		return fail(o, r, start, fmt.Errorf("reading release %s: %w", c.Name, err))
	}
	unchanged := last != nil && last.Deployed && last.Digest == j.digest && !o.DryRun
	switch {
	case unchanged:
		// Nothing changed in the configuration: what runs may have.
		var drift []diff.Drift
		if o.Drift != nil {
			if drift, err = o.Drift.Drift(ctx, c); err != nil {
				return fail(o, r, start, fmt.Errorf("comparing %s with its live objects: %w", c.Name, err))
			}
		}
		if len(drift) == 0 {
			r.Action, r.Revision, r.Elapsed = Unchanged, last.Revision, time.Since(start)
			o.Reporter.Report(Event{Component: c.Name, Phase: PhaseUnchanged, Revision: last.Revision, Elapsed: r.Elapsed})
			return r, nil
		}
		r.Repaired = diff.Strings(drift)
	case last != nil && last.Deployed && last.Manifest != "" && o.Drift != nil && !o.DryRun:
		// The component changes, which reverts its drift too: name
		// that drift, against what onprem applied last.
		r.Repaired = releaseDrift(ctx, o.Drift, c.Name, last.Manifest)
	}
	o.Reporter.Report(Event{Component: c.Name, Phase: PhaseApplying, Repaired: r.Repaired})
	// A release retired with its history (see HelmReleases.Retire) is
	// installed again, not upgraded: Helm upgrades deployed releases only.
	exists := last != nil && last.Status != rcommon.StatusUninstalled.String()
	manifest := j.manifest
	if o.Drift != nil && !o.DryRun {
		applied, err := o.Drift.ForCluster(ctx, c)
		if err != nil {
			return fail(o, r, start, fmt.Errorf("reading %s's autoscalers: %w", c.Name, err))
		}
		if applied != c {
			if manifest, err = Manifest(applied); err != nil {
				return fail(o, r, start, err)
			}
		}
	}
	req := Request{Component: c, Manifest: manifest, Digest: j.digest, Timeout: o.Timeout, DryRun: o.DryRun, Exists: exists, Pending: last != nil && last.Pending}
	// The wait ends early when the watcher finds a fault that waiting
	// cannot fix, or (StopOnFailure) when another component failed.
	wctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	req.Wait = wctx
	if others != nil {
		defer context.AfterFunc(others, func() { stop(context.Cause(others)) })()
	}
	var (
		w        *watcher
		lastWait progress
		watched  = make(chan struct{})
	)
	if ob != nil {
		w = newWatcher(ctx, ob, c, o.Result.Namespace)
	}
	if w == nil {
		close(watched)
	} else {
		waitStart := time.Now()
		go func() {
			defer close(watched)
			w.run(wctx, stop, func(p progress) {
				lastWait = p
				since := p.since
				if since.IsZero() || since.Before(waitStart) {
					since = waitStart
				}
				o.Reporter.Report(Event{Component: c.Name, Phase: PhaseWaiting, Waiting: p.line(), Since: since, Elapsed: time.Since(start)})
			})
		}()
	}
	rev, err := o.Releases.Apply(ctx, req)
	if err == nil && !o.DryRun && o.Client != nil {
		// Helm's wait counts a StatefulSet that onprem rolls itself
		// (OnDelete: the replicated databases) ready at once: roll it,
		// replicas first, and wait for it here, in the watcher's window.
		err = roll.StatefulSets(wctx, roll.Options{Client: o.Client, Namespace: o.Result.Namespace,
			Progress: func(line string) {
				o.Reporter.Report(Event{Component: c.Name, Phase: PhaseWaiting, Waiting: line, Since: time.Now(), Elapsed: time.Since(start)})
			}}, statefulSets(c.Objects))
	}
	// The watcher ends before the component's last event is reported; a
	// fault it stopped the wait on stays the cause.
	stop(errWaitOver)
	<-watched
	r.Elapsed = time.Since(start)
	if err != nil {
		err = explain(ctx, w, wctx, err, lastWait)
		r.NotReady = diagnose(context.WithoutCancel(ctx), o.Client, o.Result.Namespace, c)
		return fail(o, r, start, err)
	}
	r.Revision = rev
	switch {
	case o.DryRun:
		r.Action = Validated
	case !exists:
		r.Action = Installed
	case unchanged:
		r.Action = Repaired
	default:
		r.Action = Upgraded
	}
	o.Reporter.Report(Event{Component: c.Name, Phase: PhaseReady, Revision: rev, Elapsed: r.Elapsed, Action: r.Action, Repaired: r.Repaired})
	return r, nil
}

// releaseDrift names the drift of a component's live objects from its last
// release's (manifest); best effort: the component is applied anyway.
func releaseDrift(ctx context.Context, d DriftChecker, name, manifest string) []string {
	objs, err := diff.Objects(manifest)
	var drift []diff.Drift
	if err == nil {
		drift, err = d.Drift(ctx, &render.Component{Name: name, Objects: objs})
	}
	if err != nil {
		slog.Warn("could not compare a component with its live objects before applying it (it is applied anyway)", "component", name, "err", err)
		return nil
	}
	return diff.Strings(drift)
}

// explain turns Helm's error for a wait that ended into the cause: the
// fault the watcher stopped the wait on, or one it finds now (Helm ends
// its wait by itself for a failed Job), or Helm's error with what the
// component was still waiting for.
func explain(ctx context.Context, w *watcher, wait context.Context, err error, last progress) error {
	var stuck *StuckError
	var other *OtherFailedError
	switch cause := context.Cause(wait); {
	case errors.As(cause, &stuck):
		return stuck
	case errors.As(cause, &other):
		return other
	}
	if w == nil {
		return err
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	w.ob.refresh() // what ended Helm's wait may be newer than the last lists
	if p, lerr := w.look(lctx); lerr == nil && p.stuck != nil {
		return &StuckError{Component: w.component, Fault: *p.stuck}
	}
	if last.desired > 0 {
		return fmt.Errorf("%w (it was still waiting: %s)", err, last.line())
	}
	return err
}

// errWaitOver ends a watcher whose wait is over.
var errWaitOver = errors.New("the wait is over")

func fail(o Options, r ComponentResult, start time.Time, err error) (ComponentResult, error) {
	r.Action, r.Error, r.Elapsed = Failed, err.Error(), time.Since(start)
	o.Reporter.Report(Event{Component: r.Name, Phase: PhaseFailed, Elapsed: r.Elapsed, Err: err, NotReady: r.NotReady})
	return r, err
}

func chartRef(c *render.Component) string {
	if c.Chart == "" {
		return ""
	}
	return c.Chart + "-" + c.ChartVersion
}

// ApplyOne applies one component on its own (a runner, a runtime) in
// namespace and waits for it: the component's result, with Action Failed
// and the error's text when the apply failed, and Apply's error.
func ApplyOne(ctx context.Context, cl *kube.Cluster, version, namespace string, c *render.Component, timeout time.Duration, rep Reporter) (ComponentResult, error) {
	report, err := Apply(ctx, Options{
		Getter: cl.Getter, Client: cl.Client, Timeout: timeout, Reporter: rep,
		Result: &render.Result{Version: version, Namespace: namespace, Components: []*render.Component{c}},
	})
	res := ComponentResult{Name: c.Name}
	if report != nil {
		if cr, ok := report.Component(c.Name); ok {
			res = cr
		}
	}
	if err != nil {
		res.Action = Failed
		if res.Error == "" {
			res.Error = err.Error()
		}
	}
	return res, err
}
