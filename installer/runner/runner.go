// Package runner is the life of build runners: install (and converge),
// upgrade, status and uninstall, on the platform's cluster or a remote one,
// and their registration with the platform.
//
// # What a runner is
//
// A Helm release of the release's runner chart (render.RenderRunner),
// named runner-NAME, in the runner's namespace (default
// onprem-runner-NAME, Pod Security Admission restricted) with its build
// engine in NAMESPACE-engine (level privileged: rootless BuildKit's
// documented exception, see charts/runner). Apart from the release, the
// installer keeps, on the runner's cluster: the two namespaces (created by
// onprem, so removed with the runner), the registration token Secret
// (TokenSecret, key TokenKey), the platform's CA (PlatformCAConfigMap) and
// a copy of spec.registry.pullSecret in both namespaces.
//
// # Registration
//
// The token is generated once (crypto/rand), stored in TokenSecret on the
// runner's cluster and registered with the platform: the Secret
// Registrations of the platform namespace, one key per runner name, which
// runtime-manager reads (its Role names that Secret). It never changes
// while the runner exists, and it is never printed, logged or written to
// the installation's state: the state's record of a runner (state.Runner)
// says where it runs and at which version only. Names are unique across
// the installation: installing a name that runs elsewhere is refused,
// naming where.
//
// Every function that changes a runner expects the caller to hold the
// installation's lock (state.Acquire) and the record read under it.
package runner

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
)

// Names of what the installer keeps beside a runner's Helm release.
const (
	// TokenSecret holds the runner's registration token (key TokenKey) in
	// the runner's namespace; the agent reads it.
	TokenSecret = "onprem-runner-token"
	TokenKey    = "token"
	// Registrations is the Secret of the platform namespace that registers
	// every runner's token with the platform, keyed by runner name. The
	// platform's runtime-manager may read it, and no other Secret
	// (manifests/components/pipelines).
	Registrations = "onprem-runner-tokens"
	// PlatformCAConfigMap holds the platform's CA certificate (ca.crt) in
	// the runner's namespace, when the platform's TLS Secret has one.
	PlatformCAConfigMap = "onprem-platform-ca"
	// FieldManager applies the namespaces and copied objects.
	FieldManager = "onprem-runner"
	// LabelRunner marks everything of a runner with its name.
	LabelRunner = "onprem.dev/runner"
	// AnnotationCreatedBy marks a namespace that onprem created for a
	// runner (and so removes with it).
	AnnotationCreatedBy = attachment.AnnotationCreatedBy
)

// attachmentOf is what installer/attachment needs of a recorded runner:
// its release in its namespace, and the engine's namespace.
func attachmentOf(name string, rec state.Runner) attachment.Attachment {
	return attachment.Attachment{Kind: "runner", Name: name, Label: LabelRunner, Release: rec.Release,
		Namespaces: []string{rec.Namespace, rec.EngineNamespace}}
}

// recordFields are where a runner's record keeps what an apply changes.
func recordFields(r *state.Runner) (*string, *int, *time.Time) {
	return &r.Status, &r.Revision, &r.UpdatedAt
}

// Platform is the platform's side of a runner operation (its cluster,
// namespace and record, read under the installation's lock; changes to the
// record are saved through Store): the one type runners and runtimes share.
type Platform = attachment.Platform

// Target is one runner to install or converge.
type Target struct {
	// Runner is its name, namespace and concurrency (defaults applied by
	// Prepare).
	Runner config.Runner
	// Cluster is the runner's cluster; Ref is how it was named (recorded,
	// so that upgrade and uninstall find it again).
	Cluster *kube.Cluster
	Ref     config.ClusterRef
}

// Options tune Install and Uninstall.
type Options struct {
	// Timeout bounds the apply and wait (apply.DefaultTimeout when zero),
	// and an uninstall's wait for the namespaces to go.
	Timeout  time.Duration
	Reporter apply.Reporter
}

// Result is what happened to one runner.
type Result struct {
	Name            string       `json:"name"`
	Server          string       `json:"server"`
	Context         string       `json:"context,omitempty"`
	Namespace       string       `json:"namespace"`
	EngineNamespace string       `json:"engineNamespace"`
	Version         string       `json:"version"`
	Chart           string       `json:"chart"`
	Release         string       `json:"release"`
	Action          apply.Action `json:"action"`
	Revision        int          `json:"revision,omitempty"`
	// TokenCreated: the registration token was generated by this run.
	TokenCreated bool          `json:"tokenCreated,omitempty"`
	Elapsed      time.Duration `json:"elapsed"`
	Error        string        `json:"error,omitempty"`
	NotReady     []string      `json:"notReady,omitempty"`
}

// Prepared is a runner rendered and ready to install.
type Prepared struct {
	Target
	Component *render.Component
	Release   *release.Release
}

// Prepare applies the runner's defaults and renders it (nothing is
// touched). installation must carry the release's version.
func Prepare(ctx context.Context, t Target, installation *config.Installation, rel *release.Release, charts, manifests fs.FS) (*Prepared, error) {
	r, err := render.RunnerDefaults(t.Runner)
	if err != nil {
		return nil, err
	}
	t.Runner = r
	if t.Cluster == nil {
		return nil, fmt.Errorf("runner %s: no cluster", r.Name)
	}
	c, err := render.RenderRunner(ctx, render.RunnerOptions{
		Installation: installation, Release: rel, Runner: r, PlatformCA: PlatformCAConfigMap,
		Charts: charts, Manifests: manifests,
	})
	if err != nil {
		return nil, err
	}
	if err := render.Verify(&render.Result{Components: []*render.Component{c}}, render.CheckOptionsFor(installation)); err != nil {
		return nil, fmt.Errorf("runner %s: %w", r.Name, err)
	}
	return &Prepared{Target: t, Component: c, Release: rel}, nil
}

// Install installs a prepared runner, or converges it when it is already
// installed at the same place (same cluster and namespace): namespaces,
// token (generated once), registration with the platform, the Helm release
// (waited for until ready), and the record. A runner of the same name
// elsewhere is refused with a *ConflictError, before anything is touched.
// On a failed apply the result and the record say why, and the error is an
// *apply.FailedError; what was applied stays for a re-run.
func Install(ctx context.Context, p *Platform, pr *Prepared, o Options) (*Result, error) {
	start := time.Now()
	r, cl := pr.Runner, pr.Cluster
	engineNS := config.RunnerEngineNamespace(r.Namespace)
	res := &Result{Name: r.Name, Server: cl.Server, Context: pr.Ref.Context, Namespace: r.Namespace, EngineNamespace: engineNS,
		Version: pr.Release.Version, Chart: pr.Component.Chart + "-" + pr.Component.ChartVersion, Release: pr.Component.Name}
	if err := CheckPlace(p, r.Name, cl.Server, r.Namespace); err != nil {
		return nil, err
	}
	if p.State.Runners == nil {
		p.State.Runners = map[string]state.Runner{}
	}
	old, existed := p.State.Runners[r.Name]

	if err := ensureNamespace(ctx, cl, r.Namespace, r.Name, levelRestricted); err != nil {
		return nil, err
	}
	if err := ensureNamespace(ctx, cl, engineNS, r.Name, levelPrivileged); err != nil {
		return nil, err
	}
	registered, err := registeredToken(ctx, p.Cluster.Client, p.Namespace, r.Name)
	if err != nil {
		return nil, err
	}
	token, created, err := ensureToken(ctx, cl.Client, r.Namespace, r.Name, registered)
	if err != nil {
		return nil, err
	}
	res.TokenCreated = created
	if err := register(ctx, p.Cluster.Client, p.Namespace, r.Name, token); err != nil {
		return nil, err
	}
	clear(token)
	if err := copyPlatformObjects(ctx, p, cl, r.Name, r.Namespace, engineNS); err != nil {
		return nil, err
	}

	rec := state.Runner{
		Server: cl.Server, Kubeconfig: attachment.RecordedKubeconfig(pr.Ref), Context: pr.Ref.Context,
		Namespace: r.Namespace, EngineNamespace: engineNS, Concurrency: r.Concurrency,
		Version: pr.Release.Version, Chart: pr.Component.Chart, ChartVersion: pr.Component.ChartVersion,
		Release: pr.Component.Name, Revision: old.Revision, Status: old.Status, RegisteredAt: old.RegisteredAt, UpdatedAt: old.UpdatedAt,
	}
	a := attachmentOf(r.Name, rec)
	if !existed {
		rec.Status, rec.RegisteredAt, rec.UpdatedAt = "pending", time.Now().UTC(), time.Now().UTC()
		if err := attachment.RecordBefore(ctx, p, a, p.State.Runners, rec, existed); err != nil {
			return nil, err
		}
	}
	out, err := attachment.ApplyRecorded(ctx, p, cl, a, p.State.Runners, rec, recordFields, pr.Release.Version, pr.Component, o.Timeout, start, o.Reporter)
	res.Action, res.Revision, res.Error, res.NotReady, res.Elapsed = out.Action, out.Revision, out.Error, out.NotReady, time.Since(start)
	return res, err
}
