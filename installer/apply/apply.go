// Package apply makes a cluster match a rendered platform: one Helm release
// per component, applied in dependency order with independent components in
// parallel (bounded), each waited for with kstatus and a per-component
// timeout. A component whose desired objects did not change since its last
// deployed release is left alone, so a converged re-run creates no Helm
// revision. The objects come from installer/render; Helm's own rendering is
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
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
)

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
}

// Action is what happened to a component.
type Action string

// Actions.
const (
	Installed Action = "installed"
	Upgraded  Action = "upgraded"
	Unchanged Action = "unchanged"
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

// FailedError says which components failed; the Report has the details.
type FailedError struct{ Components []string }

func (e *FailedError) Error() string {
	return fmt.Sprintf("%d component(s) failed: %v", len(e.Components), e.Components)
}

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
			j.result = applyOne(ctx, o, j)
			if j.result.Action == Failed {
				mu.Lock()
				failed = true
				mu.Unlock()
			}
		}(j)
	}
	wg.Wait()

	report := &Report{Elapsed: time.Since(start)}
	var failedNames []string
	for _, j := range jobs {
		report.Components = append(report.Components, j.result)
		if j.result.Action == Failed {
			failedNames = append(failedNames, j.component.Name)
		}
	}
	if len(failedNames) > 0 {
		return report, &FailedError{Components: failedNames}
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

func isNamespace(o *unstructured.Unstructured) bool {
	return o.GetKind() == "Namespace" && o.GetAPIVersion() == "v1"
}

// applyOne installs or upgrades one component and waits for it.
func applyOne(ctx context.Context, o Options, j *job) ComponentResult {
	c := j.component
	start := time.Now()
	r := ComponentResult{Name: c.Name, Chart: chartRef(c), Digest: j.digest}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()

	last, err := o.Releases.Last(ctx, c.Name)
	if err != nil {
		return fail(o, r, start, fmt.Errorf("reading release %s: %w", c.Name, err))
	}
	if last != nil && last.Deployed && last.Digest == j.digest && !o.DryRun {
		r.Action, r.Revision, r.Elapsed = Unchanged, last.Revision, time.Since(start)
		o.Reporter.Report(Event{Component: c.Name, Phase: PhaseUnchanged, Revision: last.Revision, Elapsed: r.Elapsed})
		return r
	}
	o.Reporter.Report(Event{Component: c.Name, Phase: PhaseApplying})
	// A release retired with its history (see HelmReleases.Retire) is
	// installed again, not upgraded: Helm upgrades deployed releases only.
	exists := last != nil && last.Status != rcommon.StatusUninstalled.String()
	req := Request{Component: c, Manifest: j.manifest, Digest: j.digest, Timeout: o.Timeout, DryRun: o.DryRun, Exists: exists, Pending: last != nil && last.Pending}
	rev, err := o.Releases.Apply(ctx, req)
	r.Elapsed = time.Since(start)
	if err != nil {
		r.NotReady = diagnose(context.WithoutCancel(ctx), o.Client, o.Result.Namespace, c)
		return fail(o, r, start, err)
	}
	r.Revision = rev
	switch {
	case o.DryRun:
		r.Action = Validated
	case !exists:
		r.Action = Installed
	default:
		r.Action = Upgraded
	}
	o.Reporter.Report(Event{Component: c.Name, Phase: PhaseReady, Revision: rev, Elapsed: r.Elapsed, Action: r.Action})
	return r
}

func fail(o Options, r ComponentResult, start time.Time, err error) ComponentResult {
	r.Action, r.Error, r.Elapsed = Failed, err.Error(), time.Since(start)
	o.Reporter.Report(Event{Component: r.Name, Phase: PhaseFailed, Elapsed: r.Elapsed, Err: err, NotReady: r.NotReady})
	return r
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
