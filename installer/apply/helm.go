package apply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"helm.sh/helm/v4/pkg/action"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/kube"
	rcommon "helm.sh/helm/v4/pkg/release/common"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	"helm.sh/helm/v4/pkg/storage/driver"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/diff"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/roll"
	"onprem.dev/onprem/installer/version"
)

// ReleaseInfo is what Apply needs to know of a component's last release.
type ReleaseInfo struct {
	Revision int
	Status   string
	Deployed bool
	// Pending: an install, upgrade or rollback was interrupted (the
	// process died): Helm refuses to touch the release until it is
	// settled.
	Pending bool
	Digest  string
	// Chart is the release's chart, name-version.
	Chart string
	// Updated and Description: when the revision was written, and Helm's
	// one-line account of it (History fills them).
	Updated     time.Time `json:",omitzero"`
	Description string    `json:",omitempty"`
	// Manifest is the release's objects as YAML (Last fills it): what
	// onprem applied.
	Manifest string `json:"-"`
}

// Request asks a Releaser to install or upgrade one component.
type Request struct {
	Component *render.Component
	Manifest  string
	Digest    string
	Timeout   time.Duration
	DryRun    bool
	Exists    bool
	Pending   bool
	// Wait, when set, ends the wait for the objects early: the apply's
	// watcher cancels it on a fault that waiting cannot fix (its cause
	// is a *StuckError). The release is then failed, as at a timeout.
	Wait context.Context
}

// Releaser handles the Helm releases of components.
type Releaser interface {
	// Last returns the last release of a component, or nil if it has none.
	Last(ctx context.Context, name string) (*ReleaseInfo, error)
	// Apply installs or upgrades the component and waits until its objects
	// are ready; it returns the new revision.
	Apply(ctx context.Context, req Request) (int, error)
}

// HelmReleases is the Releaser of the Helm v4 SDK, storing releases as
// Secrets in the platform namespace (Helm's default), so that `helm list`
// and `helm history` show every component.
type HelmReleases struct {
	getter    genericclioptions.RESTClientGetter
	namespace string
	charts    fs.FS
}

// NewHelmReleases handles the releases of namespace; charts holds the
// charts (nil: the embedded ones).
func NewHelmReleases(getter genericclioptions.RESTClientGetter, namespace string, charts fs.FS) *HelmReleases {
	return &HelmReleases{getter: getter, namespace: namespace, charts: charts}
}

// Uninstall removes a component's release and waits until its objects are
// gone. Objects outside the release (volumes of StatefulSets, generated
// secrets, the namespace) stay. A release that does not exist is not an
// error.
func (h *HelmReleases) Uninstall(ctx context.Context, name string, timeout time.Duration) error {
	cfg, err := h.config()
	if err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.WaitStrategy = kube.StatusWatcherStrategy
	un.Timeout = timeout
	un.IgnoreNotFound = true
	un.Description = "uninstalled by onprem " + version.Version
	if _, err := un.Run(name); err != nil {
		return fmt.Errorf("uninstalling %s: %w", name, err)
	}
	return nil
}

// Manifest returns the objects of a component's last release ("" if it
// has none).
func (h *HelmReleases) Manifest(_ context.Context, name string) (string, error) {
	cfg, err := h.config()
	if err != nil {
		return "", err
	}
	ri, err := cfg.Releases.Last(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	rel, ok := ri.(*releasev1.Release)
	if !ok {
		return "", fmt.Errorf("release %s: unexpected release type %T", name, ri)
	}
	return rel.Manifest, nil
}

// List returns the names of the releases in the namespace.
func (h *HelmReleases) List(context.Context) ([]string, error) {
	cfg, err := h.config()
	if err != nil {
		return nil, err
	}
	ls := action.NewList(cfg)
	ls.All = true
	rels, err := ls.Run()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, ri := range rels {
		if rel, ok := ri.(*releasev1.Release); ok {
			names = append(names, rel.Name)
		}
	}
	return names, nil
}

func (h *HelmReleases) config() (*action.Configuration, error) {
	cfg := action.NewConfiguration()
	if err := cfg.Init(h.getter, h.namespace, "secret"); err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	return cfg, nil
}

// History returns the release's revisions, newest first (none when the
// release does not exist).
func (h *HelmReleases) History(_ context.Context, name string) ([]ReleaseInfo, error) {
	cfg, err := h.config()
	if err != nil {
		return nil, err
	}
	all, err := cfg.Releases.History(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ReleaseInfo
	for _, ri := range all {
		if info, err := releaseInfo(name, ri); err == nil {
			out = append(out, *info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Revision > out[j].Revision })
	return out, nil
}

func (h *HelmReleases) Last(_ context.Context, name string) (*ReleaseInfo, error) {
	cfg, err := h.config()
	if err != nil {
		return nil, err
	}
	ri, err := cfg.Releases.Last(name)
	if errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	info, err := releaseInfo(name, ri)
	if err != nil {
		return nil, err
	}
	info.Manifest = ri.(*releasev1.Release).Manifest
	return info, nil
}

// releaseInfo is what onprem reads of one stored revision of release name.
func releaseInfo(name string, ri any) (*ReleaseInfo, error) {
	rel, ok := ri.(*releasev1.Release)
	if !ok || rel.Info == nil {
		return nil, fmt.Errorf("release %s: unexpected release type %T", name, ri)
	}
	chart := ""
	if rel.Chart != nil && rel.Chart.Metadata != nil {
		chart = rel.Chart.Metadata.Name + "-" + rel.Chart.Metadata.Version
	}
	return &ReleaseInfo{
		Chart:       chart,
		Revision:    rel.Version,
		Status:      rel.Info.Status.String(),
		Deployed:    rel.Info.Status == rcommon.StatusDeployed,
		Pending:     rel.Info.Status.IsPending(),
		Digest:      rel.Labels[DigestLabel],
		Updated:     rel.Info.LastDeployed,
		Description: rel.Info.Description,
	}, nil
}

func (h *HelmReleases) Apply(ctx context.Context, req Request) (int, error) {
	cfg, err := h.config()
	if err != nil {
		return 0, err
	}
	c := req.Component
	ch, err := h.chart(c)
	if err != nil {
		return 0, err
	}
	if req.Pending && !req.DryRun {
		if err := settlePending(cfg, c.Name); err != nil {
			return 0, err
		}
	}
	pr := fixedManifest(req.Manifest)
	labels := map[string]string{DigestLabel: req.Digest}
	var ri any
	if !req.Exists {
		in := action.NewInstall(cfg)
		in.ReleaseName = c.Name
		in.Namespace = h.namespace
		in.ServerSideApply = true
		in.ForceConflicts = true
		// Objects left by an interrupted install (created before the
		// process died, never recorded) are adopted, not refused.
		in.TakeOwnership = true
		// The API server validates every object (server-side apply with
		// strict field validation, Helm's default). Helm's own check
		// would fetch and parse the server's whole OpenAPI document for
		// each component: half the installer's CPU on an install.
		in.DisableOpenAPIValidation = true
		in.WaitStrategy = kube.StatusWatcherStrategy
		in.WaitForJobs = true
		in.WaitOptions = waitOptions(req.Wait)
		in.Timeout = req.Timeout
		in.Labels = labels
		in.PostRenderer = pr
		in.Description = "installed by onprem " + version.Version
		if req.DryRun {
			in.DryRunStrategy = action.DryRunServer
			in.WaitStrategy = kube.HookOnlyStrategy
		}
		ri, err = in.RunWithContext(ctx, ch, c.Values)
	} else {
		up := action.NewUpgrade(cfg)
		up.Namespace = h.namespace
		up.ServerSideApply = "true"
		up.ForceConflicts = true
		up.TakeOwnership = true
		up.DisableOpenAPIValidation = true // the server validates, as on install
		up.WaitStrategy = kube.StatusWatcherStrategy
		up.WaitForJobs = true
		up.WaitOptions = waitOptions(req.Wait)
		up.Timeout = req.Timeout
		up.Labels = labels
		up.PostRenderer = pr
		up.MaxHistory = 10
		up.Description = "upgraded by onprem " + version.Version
		if req.DryRun {
			up.DryRunStrategy = action.DryRunServer
			up.WaitStrategy = kube.HookOnlyStrategy
		}
		ri, err = up.RunWithContext(ctx, c.Name, ch, c.Values)
	}
	if err != nil {
		return 0, err
	}
	rel, ok := ri.(*releasev1.Release)
	if !ok {
		return 0, fmt.Errorf("release %s: unexpected release type %T", c.Name, ri)
	}
	return rel.Version, nil
}

// chart returns the chart of a component: its embedded (or bundled) chart,
// or for the platform component, which kustomize renders alone, a chart
// with no templates that only carries the release's name and version.
func (h *HelmReleases) chart(c *render.Component) (*chartv2.Chart, error) {
	if c.Chart == "" {
		return &chartv2.Chart{Metadata: &chartv2.Metadata{
			APIVersion:  chartv2.APIVersionV2,
			Name:        "onprem-" + c.Name,
			Version:     "1.0.0",
			Description: "the platform's namespace-level objects, rendered by onprem from its kustomize bases",
		}}, nil
	}
	if c.Loaded != nil {
		// Helm processes the chart's dependencies in place: a copy keeps
		// the loaded chart renderable with other values.
		return charts.Clone(c.Loaded), nil
	}
	fsys := h.charts
	if fsys == nil {
		fsys = charts.FS
	}
	return charts.LoadFrom(fsys, c.Chart)
}

// settlePending marks a release left pending by a process that died as
// failed, so that it can be upgraded. Apply only runs under the
// installation's lock, so nobody else is working on it.
func settlePending(cfg *action.Configuration, name string) error {
	ri, err := cfg.Releases.Last(name)
	if err != nil {
		return err
	}
	rel, ok := ri.(*releasev1.Release)
	if !ok || rel.Info == nil || !rel.Info.Status.IsPending() {
		return nil
	}
	rel.SetStatus(rcommon.StatusFailed, "interrupted ("+rel.Info.Status.String()+"); settled by onprem "+version.Version)
	if err := cfg.Releases.Update(rel); err != nil {
		return fmt.Errorf("settling interrupted release %s: %w", name, err)
	}
	return nil
}

// waitOptions make Helm's wait end when ctx does (nil: at its timeout
// only). Only the wait is bound to it, not the release's write: Helm then
// records the release as failed, as at a timeout, and returns.
func waitOptions(ctx context.Context) []kube.WaitOption {
	if ctx == nil {
		return nil
	}
	return []kube.WaitOption{kube.WithWaitContext(ctx)}
}

// fixedManifest is a Helm post-renderer that replaces what Helm rendered
// with the objects onprem rendered (charts + kustomize overlays).
type fixedManifest string

func (f fixedManifest) Run(*bytes.Buffer) (*bytes.Buffer, error) {
	return bytes.NewBufferString(string(f)), nil
}

// Rollback returns a component's release to an earlier revision (Helm
// rollback: a new revision holding that revision's objects) and waits
// until its objects are ready. A release left pending by a process that
// died is settled first. A release retired with its history kept (see
// Retire) is restored the same way.
func (h *HelmReleases) Rollback(ctx context.Context, name string, revision int, timeout time.Duration) (int, error) {
	cfg, err := h.config()
	if err != nil {
		return 0, err
	}
	if err := settlePending(cfg, name); err != nil {
		return 0, err
	}
	rb := action.NewRollback(cfg)
	rb.Version = revision
	rb.ServerSideApply = "true"
	rb.ForceConflicts = true
	rb.WaitStrategy = kube.StatusWatcherStrategy
	// A Job of the revision rolled back to (the provisioning) is started
	// again and not waited for: that revision ran the same Job (its name
	// carries a hash of its spec) to completion before, and what it makes
	// (logins) is already there. Waiting for it put its whole run on every
	// rollback's critical path (17.5 s of 34 on kind); status and doctor
	// show how the re-run ended.
	rb.WaitForJobs = false
	// Its wait ends with ctx too (an interrupt, a lost lock).
	rb.WaitOptions = waitOptions(ctx)
	rb.Timeout = timeout
	rb.MaxHistory = 10
	rb.Description = fmt.Sprintf("rolled back to revision %d by onprem %s", revision, version.Version)
	// One bound for Helm's rollback with its wait and the roll after it.
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// Helm's rollback takes no context: it is bounded by its timeout, and
	// a cancelled context is honoured before it starts.
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := rb.Run(name); err != nil {
		return 0, fmt.Errorf("rolling %s back to revision %d: %w", name, revision, err)
	}
	// Helm's wait counts an OnDelete StatefulSet ready at once: its pods
	// are rolled back here, replicas first, in what is left of timeout.
	if err := h.roll(rctx, name); err != nil {
		return 0, fmt.Errorf("rolling %s back to revision %d: %w", name, revision, err)
	}
	last, err := h.Last(ctx, name)
	if err != nil {
		return 0, err
	}
	if last == nil {
		return 0, fmt.Errorf("rolling %s back: the release is gone", name)
	}
	return last.Revision, nil
}

// Ready waits until the objects of a component's last release are ready
// (Helm's own wait, kstatus; Jobs count once started), at most timeout in
// all. A rollback uses it to see a service ready again once the databases
// it reaches are back. A component with no release is ready.
//
// Ready is not only a wait: an OnDelete StatefulSet (a replicated
// PostgreSQL or Redis) is ready only once its members are of its current
// revision, and nothing but onprem replaces them, so Ready finishes such
// a roll (evicting the members still of another revision, replicas
// first), as a rollback that follows an interrupted upgrade needs.
func (h *HelmReleases) Ready(ctx context.Context, name string, timeout time.Duration) error {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	manifest, err := h.Manifest(ctx, name)
	if err != nil || manifest == "" {
		return err
	}
	cfg, err := h.config()
	if err != nil {
		return err
	}
	objs, err := cfg.KubeClient.Build(strings.NewReader(manifest), false)
	if err != nil {
		return fmt.Errorf("reading %s's objects: %w", name, err)
	}
	var w kube.Waiter
	if c, ok := cfg.KubeClient.(kube.InterfaceWaitOptions); ok {
		w, err = c.GetWaiterWithOptions(kube.StatusWatcherStrategy, waitOptions(ctx)...)
	} else {
		w, err = cfg.KubeClient.GetWaiter(kube.StatusWatcherStrategy)
	}
	if err != nil {
		return err
	}
	left := timeout
	if d, ok := rctx.Deadline(); ok {
		left = time.Until(d)
	}
	if err := w.Wait(objs, left); err != nil {
		return fmt.Errorf("waiting for %s to be ready: %w", name, err)
	}
	if err := h.roll(rctx, name); err != nil {
		return fmt.Errorf("waiting for %s to be ready: %w", name, err)
	}
	return nil
}

// roll rolls out the OnDelete StatefulSets of name's last release
// (installer/roll), and waits for them.
func (h *HelmReleases) roll(ctx context.Context, name string) error {
	manifest, err := h.Manifest(ctx, name)
	if err != nil || manifest == "" {
		return err
	}
	objs, err := diff.Objects(manifest)
	if err != nil {
		return fmt.Errorf("reading %s's objects: %w", name, err)
	}
	sets := statefulSets(objs)
	if len(sets) == 0 {
		return nil
	}
	rc, err := h.getter.ToRESTConfig()
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	return roll.StatefulSets(ctx, roll.Options{Client: cs, Namespace: h.namespace}, sets)
}

// Retire removes a component that its release dropped: its objects go,
// but its Helm history is kept (helm list --uninstalled shows it), so that
// rolling the upgrade back can restore it with Rollback. Objects outside
// the release (volumes, generated secrets) stay. A release that does not
// exist, or is already retired, is not an error.
func (h *HelmReleases) Retire(ctx context.Context, name string, timeout time.Duration) error {
	last, err := h.Last(ctx, name)
	if err != nil || last == nil || last.Status == rcommon.StatusUninstalled.String() {
		return err
	}
	cfg, err := h.config()
	if err != nil {
		return err
	}
	if err := settlePending(cfg, name); err != nil {
		return err
	}
	un := action.NewUninstall(cfg)
	un.WaitStrategy = kube.StatusWatcherStrategy
	un.Timeout = timeout
	un.KeepHistory = true
	un.Description = "retired by onprem " + version.Version + ": its release dropped it"
	if _, err := un.Run(name); err != nil {
		return fmt.Errorf("removing %s: %w", name, err)
	}
	return nil
}
