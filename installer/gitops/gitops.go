// Package gitops is the life of Argo-based GitOps runtimes: install (and
// converge), upgrade, status and uninstall, on the platform's cluster or a
// remote one; the shared configuration repository and which runtime holds
// the configuration; and each runtime's Git sources.
//
// # What a runtime is
//
// A Helm release (config.RuntimeRelease: runtime-NAME) of the release's
// runtime chart, an upstream chart fetched from its chart repository or read
// from a bundle (installer/chartfetch), in the runtime's namespace (default:
// its name; Pod Security Admission restricted). Beside it, on the runtime's
// cluster, onprem keeps the namespace (created by onprem, so removed with
// the runtime) and the Git token: the Secret render.RuntimeGitCredentials,
// an Argo CD credential template for the configuration repository's URL.
// The token is read from a file or an environment variable (never a flag
// value), checked against the configuration repository before anything is
// created, and never written to the state, a log or an output.
//
// # Rules
//
// Names are unique in the installation, and a cluster runs at most one
// runtime: CheckPlace refuses both, naming where the other one runs, before
// anything is touched; so does an Argo CD on the cluster that is not this
// runtime's. The first runtime initialises the configuration repository
// (installer/configrepo) and holds the configuration, unless
// spec.runtimeConfig.configRuntime names another; Designate moves it. The
// configuration runtime cannot be uninstalled while other runtimes exist.
//
// Every function that changes a runtime expects the caller to hold the
// installation's lock (state.Acquire) and the record read under it.
package gitops

import (
	"context"
	"fmt"
	"io/fs"
	"time"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/configrepo"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
)

// Names of what the installer keeps beside a runtime's Helm release.
const (
	// FieldManager applies the namespace, the Git credentials and the
	// Git sources' Applications.
	FieldManager = "onprem-runtime"
	// LabelRuntime marks everything of a runtime with its name.
	LabelRuntime = "onprem.dev/runtime"
	// AnnotationCreatedBy marks a namespace that onprem created for a
	// runtime (and so removes with it).
	AnnotationCreatedBy = attachment.AnnotationCreatedBy
	// GitUsername is the user name sent with the Git token (Git hosts
	// accept any non-empty one with a token).
	GitUsername = render.RuntimeGitUsername
)

// attachmentOf is what installer/attachment needs of a recorded runtime.
func attachmentOf(name string, rec state.Runtime) attachment.Attachment {
	return attachment.Attachment{Kind: "runtime", Name: name, Label: LabelRuntime, Release: rec.Release, Namespaces: []string{rec.Namespace}}
}

// Platform is the platform's side of a runtime operation (its cluster,
// namespace, configuration and record, read under the lock): the one type
// runners and runtimes share.
type Platform = attachment.Platform

// Target is one runtime to install or converge.
type Target struct {
	// Runtime is its name and namespace (defaults applied by Prepare). Its
	// Git sources and managed clusters are handled apart (AddGitSource,
	// installer/managedcluster).
	Runtime config.Runtime
	// Cluster is the runtime's cluster; Ref is how it was named.
	Cluster *kube.Cluster
	Ref     config.ClusterRef
	// Token is the Git token. Required on the first install; empty on an
	// upgrade or a converge, which reuse the one kept on the cluster. The
	// caller clears it after use.
	Token []byte
	// PlatformToken is the platform user token the runtime registers with,
	// kept like Token (render.RuntimePlatformToken).
	PlatformToken []byte
}

// Options tune Install, Uninstall and the Git operations.
type Options struct {
	// Timeout bounds the apply and wait (apply.DefaultTimeout when zero)
	// and an uninstall's wait for the namespace to go.
	Timeout  time.Duration
	Reporter apply.Reporter
	// Git tunes the connection to Git hosts (a CA file, or no TLS check
	// for a lab). URL, branch, path and token are filled in here.
	Git configrepo.Remote
}

// Result is what happened to one runtime.
type Result struct {
	Name      string       `json:"name"`
	Server    string       `json:"server"`
	Context   string       `json:"context,omitempty"`
	Namespace string       `json:"namespace"`
	Version   string       `json:"version"`
	Chart     string       `json:"chart"`
	Release   string       `json:"release"`
	Action    apply.Action `json:"action"`
	Revision  int          `json:"revision,omitempty"`
	// ConfigRuntime is the runtime that holds the configuration after this
	// run; RepositoryCommit the commit onprem pushed to the configuration
	// repository, if it pushed one.
	ConfigRuntime    string        `json:"configRuntime"`
	RepositoryCommit string        `json:"repositoryCommit,omitempty"`
	Elapsed          time.Duration `json:"elapsed"`
	Error            string        `json:"error,omitempty"`
	NotReady         []string      `json:"notReady,omitempty"`
}

// Prepared is a runtime rendered and ready to install.
type Prepared struct {
	Target
	Component *render.Component
	Release   *release.Release
	// options rendered Component; Install renders again when what it finds
	// (the designation, the platform's CA) differs.
	options render.RuntimeOptions
}

// Prepare applies the runtime's defaults and renders it with chart (the
// release's runtime chart, fetched by the caller). Nothing is touched.
func Prepare(ctx context.Context, t Target, installation *config.Installation, rel *release.Release, chart *chartv2.Chart, manifests fs.FS) (*Prepared, error) {
	rt, err := render.RuntimeDefaults(t.Runtime)
	if err != nil {
		return nil, err
	}
	t.Runtime = rt
	if t.Cluster == nil {
		return nil, fmt.Errorf("runtime %s: no cluster", rt.Name)
	}
	ro := render.RuntimeOptions{Installation: installation, Release: rel, Runtime: rt, Chart: chart, Manifests: manifests}
	c, err := renderChecked(ctx, ro)
	if err != nil {
		return nil, err
	}
	return &Prepared{Target: t, Component: c, Release: rel, options: ro}, nil
}

// renderChecked renders the runtime and refuses what the cluster would
// refuse (a pod its namespace's restricted Pod Security Standard does not
// admit) or what comes from elsewhere than a private registry.
func renderChecked(ctx context.Context, ro render.RuntimeOptions) (*render.Component, error) {
	c, err := render.RenderRuntime(ctx, ro)
	if err != nil {
		return nil, err
	}
	if err := render.Verify(&render.Result{Components: []*render.Component{c}}, render.CheckOptionsFor(ro.Installation)); err != nil {
		return nil, fmt.Errorf("runtime %s: %w", ro.Runtime.Name, err)
	}
	return c, nil
}

// rerender renders the runtime again for what Install found: whether it
// holds the configuration and whether the platform's CA is given to it.
func (pr *Prepared) rerender(ctx context.Context, configRuntime, platformCA bool) error {
	if pr.options.ConfigurationRuntime == configRuntime && pr.options.PlatformCA == platformCA {
		return nil
	}
	o := pr.options
	o.ConfigurationRuntime, o.PlatformCA = configRuntime, platformCA
	c, err := renderChecked(ctx, o)
	if err != nil {
		return err
	}
	pr.options, pr.Component = o, c
	return nil
}

// Repository is the configuration repository: the one recorded (once a
// runtime exists, it is the runtimes' shared one) or else the
// configuration's spec.runtimeConfig.repository.
func Repository(p *Platform) (config.GitRepository, error) {
	if rc := p.State.RuntimeConfig; rc != nil && rc.URL != "" {
		want := p.Installation.Spec.RuntimeConfig.Repository
		got := config.GitRepository{URL: rc.URL, Branch: rc.Branch, Path: rc.Path}
		if want.URL != "" && want != got && len(p.State.Runtimes) > 0 {
			return got, &attachment.ConflictError{Msg: fmt.Sprintf("spec.runtimeConfig.repository is %s, but the installed runtimes share %s: "+
				"the configuration repository cannot change while runtimes use it; set it back, or uninstall the runtimes first", describeRepo(want), describeRepo(got))}
		}
		return got, nil
	}
	r := p.Installation.Spec.RuntimeConfig.Repository
	if r.URL == "" {
		return r, &InputError{"no configuration repository: set spec.runtimeConfig.repository.url in onprem.yaml (or --config-repo), the Git repository that all runtimes share"}
	}
	return r, nil
}

func describeRepo(r config.GitRepository) string {
	s := redactURL(r.URL)
	if r.Branch != "" {
		s += " branch " + r.Branch
	}
	if r.Path != "" {
		s += " path " + r.Path
	}
	return s
}

// tokenOrKept is the token given, else the one kept on the runtime's
// cluster (Secret name, key); neither is an *InputError saying missing.
func tokenOrKept(ctx context.Context, cl *kube.Cluster, rt config.Runtime, given []byte, name, key, what, missing string) ([]byte, error) {
	if len(given) > 0 {
		return given, nil
	}
	kept, err := readSecretKey(ctx, cl, rt.Namespace, name, key, what)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", rt.Name, err)
	}
	if kept == nil {
		return nil, &InputError{missing}
	}
	return kept, nil
}

// clearKept clears a token read from the cluster (the caller clears the
// one it gave).
func clearKept(token, given []byte) {
	if len(given) == 0 {
		clear(token)
	}
}

// remote is the configuration repository with the token and the
// connection options.
func remote(repo config.GitRepository, token []byte, o Options) configrepo.Remote {
	r := o.Git
	r.URL, r.Branch, r.Path, r.Token = repo.URL, repo.Branch, repo.Path, string(token)
	return r
}

// Install installs a prepared runtime, or converges it when it is already
// installed at the same place: checks (name, one runtime per cluster, no
// foreign Argo CD, the registry's pull Secret in the platform's
// namespace), the Git token checked against the configuration repository
// (a refused token leaves nothing behind), the namespace, the Git
// credentials, the pull Secret's copy, the configuration repository's
// layout and designation,
// the Helm release (waited for until ready) and the record. On a failed
// apply the result and the record say why, and the error is an
// *apply.FailedError; what was applied stays for a re-run.
func Install(ctx context.Context, p *Platform, pr *Prepared, o Options) (*Result, error) {
	start := time.Now()
	rt, cl := pr.Runtime, pr.Cluster
	res := &Result{Name: rt.Name, Server: cl.Server, Context: pr.Ref.Context, Namespace: rt.Namespace,
		Version: pr.Release.Version, Chart: pr.Component.Chart + "-" + pr.Component.ChartVersion, Release: pr.Component.Name}
	if err := CheckPlace(ctx, p, rt.Name, cl, rt.Namespace); err != nil {
		return nil, err
	}
	repo, err := Repository(p)
	if err != nil {
		return nil, err
	}
	token, err := tokenOrKept(ctx, cl, rt, pr.Token, render.RuntimeGitCredentials, keyPassword, "the Git token",
		fmt.Sprintf("runtime %s: a Git token is required to install it: give it with --git-token-file FILE or the environment variable %s (or spec.runtimes[].gitToken in onprem.yaml)", rt.Name, TokenEnv))
	if err != nil {
		return nil, err
	}
	defer clearKept(token, pr.Token)
	platformToken, err := tokenOrKept(ctx, cl, rt, pr.PlatformToken, render.RuntimePlatformToken, render.RuntimePlatformTokenKey, "the platform token",
		fmt.Sprintf("runtime %s: a platform token is required to install it (the runtime registers with the platform with it): give it with --platform-token-file FILE or the environment variable %s (or spec.runtimeConfig.platformToken in onprem.yaml)", rt.Name, PlatformTokenEnv))
	if err != nil {
		return nil, err
	}
	defer clearKept(platformToken, pr.PlatformToken)
	ca, err := PlatformCA(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", rt.Name, err)
	}
	// Rendered for the platform's CA now, before anything changes: a
	// chart that cannot take it is refused here. Only the designation,
	// which the configuration repository settles below, may render it
	// once more.
	if err := pr.rerender(ctx, pr.options.ConfigurationRuntime, len(ca) > 0); err != nil {
		return nil, err
	}
	if _, err := render.RuntimeContractValues(pr.options.Installation, rt, pr.Release.Runtime, !pr.options.ConfigurationRuntime, len(ca) > 0); err != nil {
		return nil, &render.RuntimeInputError{Err: fmt.Errorf("runtime %s: release %s: %w", rt.Name, pr.Release.Version, err)}
	}
	pull, err := pullSecret(ctx, p, rt.Name)
	if err != nil {
		return nil, err
	}
	rem := remote(repo, token, o)
	if err := configrepo.Check(ctx, rem); err != nil {
		return nil, fmt.Errorf("runtime %s: configuration repository: %w", rt.Name, err)
	}

	if p.State.Runtimes == nil {
		p.State.Runtimes = map[string]state.Runtime{}
	}
	old, existed := p.State.Runtimes[rt.Name]
	if err := ensureNamespace(ctx, cl, rt.Namespace, rt.Name); err != nil {
		return nil, err
	}
	if err := applyCredentials(ctx, cl, rt.Namespace, rt.Name, repo.URL, token); err != nil {
		return nil, err
	}
	if err := applyPlatformToken(ctx, cl, rt.Namespace, rt.Name, platformToken); err != nil {
		return nil, err
	}
	if err := applyPlatformCA(ctx, cl, rt.Namespace, rt.Name, ca); err != nil {
		return nil, err
	}
	if err := applyPullSecret(ctx, cl, rt.Namespace, rt.Name, pull); err != nil {
		return nil, err
	}

	// The configuration repository: its layout, and the designation of the
	// configuration runtime when none holds it yet.
	designate := false
	if rc := p.State.RuntimeConfig; rc == nil || rc.ConfigRuntime == "" {
		want := p.Installation.Spec.RuntimeConfig.ConfigRuntime
		designate = want == "" || want == rt.Name
	}
	gr, err := configrepo.Init(ctx, rem, rt.Name, designate)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: configuration repository: %w", rt.Name, err)
	}
	if gr.Pushed {
		res.RepositoryCommit = gr.Commit
	}
	p.State.RuntimeConfig = &state.RuntimeConfig{URL: redactURL(repo.URL), Branch: repo.Branch, Path: repo.Path, ConfigRuntime: gr.ConfigRuntime}
	res.ConfigRuntime = gr.ConfigRuntime
	if err := pr.rerender(ctx, gr.ConfigRuntime == rt.Name, len(ca) > 0); err != nil {
		return nil, err
	}

	rec := state.Runtime{
		Server: cl.Server, Kubeconfig: attachment.RecordedKubeconfig(pr.Ref), Context: pr.Ref.Context, Namespace: rt.Namespace,
		Version: pr.Release.Version, Chart: pr.Component.Chart, ChartVersion: pr.Component.ChartVersion,
		Release: pr.Component.Name, Revision: old.Revision, Status: old.Status, InstalledAt: old.InstalledAt, UpdatedAt: old.UpdatedAt,
	}
	if !existed {
		rec.Status, rec.InstalledAt, rec.UpdatedAt = "pending", time.Now().UTC(), time.Now().UTC()
	}
	// A runtime's record is rewritten before every apply, not only its
	// first: the version it is being brought to is recorded first.
	a := attachmentOf(rt.Name, rec)
	if err := attachment.RecordBefore(ctx, p, a, p.State.Runtimes, rec, existed); err != nil {
		return nil, err
	}
	out, err := attachment.ApplyRecorded(ctx, p, cl, a, p.State.Runtimes, rec,
		func(r *state.Runtime) (*string, *int, *time.Time) { return &r.Status, &r.Revision, &r.UpdatedAt }, pr.Release.Version, pr.Component, o.Timeout, start, o.Reporter)
	res.Action, res.Revision, res.Error, res.NotReady, res.Elapsed = out.Action, out.Revision, out.Error, out.NotReady, time.Since(start)
	return res, err
}
