package action

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/chartfetch"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/configrepo"
	"onprem.dev/onprem/installer/gitops"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/managedcluster"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
)

// runtimeKind is what the attachment verbs need of GitOps runtimes.
var runtimeKind = &attachmentKind[state.Runtime, gitops.Status]{
	name:    "runtime",
	records: func(st *state.State) map[string]state.Runtime { return st.Runtimes },
	ref:     gitops.RecordRef,
	server:  func(rec state.Runtime) string { return rec.Server },
	connect: func(ctx context.Context, name string, ref config.ClusterRef, platform kube.Options, pc *kube.Cluster) (*kube.Cluster, error) {
		return gitops.Connect(ctx, "runtime "+name+": its cluster", ref, platform, pc)
	},
	connectListed: func(ctx context.Context, name string, ref config.ClusterRef, platform kube.Options, pc *kube.Cluster) (*kube.Cluster, error) {
		return gitops.Connect(ctx, "runtime "+name, ref, platform, pc)
	},
	observe:     gitops.Observe,
	unreachable: gitops.Unreachable,
	notFound:    func(st *state.State, name string) error { return gitops.NotFound(st, name) },
	uninstallPeeked: func(p *attachment.Platform, _ string) error {
		return needRuntimesPlatform(p.Cluster, p.Namespace, p.State)
	},
	// The configuration runtime stays while other runtimes use it.
	uninstallLocked: func(p *attachment.Platform, name string) error {
		return inputErr(gitops.CheckUninstall(p, name))
	},
	forgets: "the record",
	uninstall: func(ctx context.Context, p *attachment.Platform, name string, cl *kube.Cluster, timeout time.Duration, reporter apply.Reporter) (*attachment.Removal, error) {
		res, err := gitops.Uninstall(ctx, p, name, cl, gitops.Options{Timeout: timeout, Reporter: reporter})
		return res, runtimeErr(err)
	},
}

// RuntimeFetch says where runtime charts come from and how Git hosts are
// reached; the zero value fetches the release's chart from its repository.
type RuntimeFetch struct {
	// ChartRepository replaces the release's runtime chart repository (a
	// mirror of it: oci://registry.example.com/charts, or an https Helm
	// repository). A bundle's chart is used first when there is one.
	ChartRepository string
	// Chart tunes the chart download (credentials, CA, plain HTTP, cache).
	Chart chartfetch.Options
	// Git tunes connections to Git hosts (CA file, no TLS check).
	Git configrepo.Remote
}

// RuntimeInstall installs a GitOps runtime, or converges it when it is
// already installed at the same place: on the platform's cluster or
// another one, at the installed platform version. Its settings come from
// spec.runtimes[] when onprem.yaml declares it there, and from the fields
// below, which win.
type RuntimeInstall struct {
	Source
	// Cluster is the platform's cluster.
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn *Configuration
	// Name of the runtime (default codefresh).
	Name string
	// RuntimeCluster is the runtime's cluster (default: spec.runtimes[]'s,
	// else the platform's).
	RuntimeCluster config.ClusterRef
	// Namespace is the runtime's namespace (default: its name).
	Namespace string
	// TokenFile holds the Git token; when empty, the environment variable
	// TokenEnv (default gitops.TokenEnv), then spec.runtimes[].gitToken.
	TokenFile string
	TokenEnv  string
	// PlatformTokenFile holds the platform user token the runtime
	// registers with; when empty, the environment variable
	// PlatformTokenEnv (default gitops.PlatformTokenEnv), then
	// spec.runtimeConfig.platformToken. Needed on the first install only.
	PlatformTokenFile string
	PlatformTokenEnv  string
	// AccountID replaces spec.runtimeConfig.accountId.
	AccountID string
	// Repository replaces spec.runtimeConfig.repository (the first runtime
	// only: runtimes share one).
	Repository config.GitRepository
	Fetch      RuntimeFetch
	Timeout    time.Duration
	LockWait   time.Duration
	LockLease  time.Duration
	Reporter   apply.Reporter
}

// Run installs the runtime.
func (a *RuntimeInstall) Run(ctx context.Context) (*gitops.Result, error) {
	if a.Name == "" {
		a.Name = config.DefaultRuntimeName
	}
	if _, err := render.RuntimeDefaults(config.Runtime{Name: a.Name, Namespace: a.Namespace}); err != nil {
		return nil, inputErr(err)
	}
	l, err := a.Source.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if err := needGitOps(l.Installation); err != nil {
		return nil, err
	}
	rt := config.Runtime{Name: a.Name}
	for _, declared := range l.Installation.Spec.Runtimes {
		if declared.Name == a.Name {
			rt = declared
		}
	}
	if !a.RuntimeCluster.IsPlatformCluster() {
		rt.Cluster = a.RuntimeCluster
	}
	if a.Namespace != "" {
		rt.Namespace = a.Namespace
	}
	if rt, err = render.RuntimeDefaults(rt); err != nil {
		return nil, inputErr(err)
	}
	if a.Repository.URL != "" {
		l.Installation.Spec.RuntimeConfig.Repository = a.Repository
	}
	if a.AccountID != "" {
		l.Installation.Spec.RuntimeConfig.AccountID = a.AccountID
	}
	if err := needAccount(l.Installation); err != nil {
		return nil, err
	}
	token, err := gitToken(a.TokenFile, a.TokenEnv, rt.GitToken)
	if err != nil {
		return nil, err
	}
	defer clear(token)
	ptoken, err := platformToken(a.PlatformTokenFile, a.PlatformTokenEnv, l.Installation.Spec.RuntimeConfig.PlatformToken)
	if err != nil {
		return nil, err
	}
	defer clear(ptoken)

	pc, err := connect(ctx, a.Conn, a.Cluster)
	if err != nil {
		return nil, err
	}
	cl, err := gitops.Connect(ctx, "runtime "+rt.Name+": its cluster", rt.Cluster, a.Cluster, pc)
	if err != nil {
		return nil, err
	}
	p, unlock, ctx, err := openPlatform(ctx, l, pc, "runtime", "install", a.LockWait, a.LockLease)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return installRuntime(ctx, l, p, p.State.Version, gitops.Target{Runtime: rt, Cluster: cl, Ref: rt.Cluster, Token: token, PlatformToken: ptoken},
		gitops.Options{Timeout: a.Timeout, Reporter: a.Reporter, Git: a.Fetch.Git}, a.Fetch)
}

// RuntimeUpgrade brings runtimes to the installed platform version's
// runtime chart (and to the platform's current configuration). The Git
// token kept on each runtime's cluster is reused unless a new one is given.
type RuntimeUpgrade struct {
	AttachmentUpgrade
	// RuntimeCluster overrides how the runtime's cluster is reached (one
	// runtime only).
	RuntimeCluster config.ClusterRef
	// TokenFile replaces the Git token (one runtime only).
	TokenFile string
	// PlatformTokenFile replaces the platform token (one runtime only).
	PlatformTokenFile string
	Fetch             RuntimeFetch
}

// Run upgrades the runtimes one after the other; one that fails does not
// stop the others, and the error joins every failure.
func (a *RuntimeUpgrade) Run(ctx context.Context) ([]gitops.Result, error) {
	var token, ptoken []byte
	defer func() {
		clear(token)
		clear(ptoken)
	}()
	return (&attachmentUpgrade[state.Runtime, gitops.Status, gitops.Result]{
		kind: runtimeKind, AttachmentUpgrade: a.AttachmentUpgrade, Override: a.RuntimeCluster,
		oneOnly: []string{"--git-token-file", "--platform-token-file"}, oneOnlyGiven: a.TokenFile != "" || a.PlatformTokenFile != "",
		check: func() (err error) {
			// New tokens only from files; none given keeps the ones on the cluster.
			if token, err = gitToken(a.TokenFile, "-", config.SecretSource{}); err != nil {
				return err
			}
			ptoken, err = platformToken(a.PlatformTokenFile, "-", config.SecretSource{})
			return err
		},
		loaded: func(l *Loaded) error { return needAccount(l.Installation) },
		upgrade: func(ctx context.Context, l *Loaded, p *attachment.Platform, n string, rec state.Runtime, ref config.ClusterRef, cl *kube.Cluster) (*gitops.Result, error) {
			t := gitops.Target{Runtime: config.Runtime{Name: n, Namespace: rec.Namespace, Cluster: ref}, Cluster: cl, Ref: ref, Token: token, PlatformToken: ptoken}
			return installRuntime(ctx, l, p, p.State.Version, t, gitops.Options{Timeout: a.Timeout, Reporter: a.Reporter, Git: a.Fetch.Git}, a.Fetch)
		},
		failed: func(n string, rec state.Runtime, err error) gitops.Result {
			return gitops.Result{Name: n, Server: rec.Server, Namespace: rec.Namespace, Action: apply.Failed, Error: err.Error()}
		},
	}).Run(ctx)
}

// RuntimeUninstall removes a runtime from its cluster and from the
// installation's record. The configuration runtime is refused while other
// runtimes exist.
type RuntimeUninstall struct {
	AttachmentUninstall
	// RuntimeCluster overrides how the runtime's cluster is reached.
	RuntimeCluster config.ClusterRef
}

// Run uninstalls the runtime.
func (a *RuntimeUninstall) Run(ctx context.Context) (*gitops.UninstallResult, error) {
	return (&attachmentUninstall[state.Runtime, gitops.Status]{kind: runtimeKind, AttachmentUninstall: a.AttachmentUninstall, Override: a.RuntimeCluster}).Run(ctx)
}

// RuntimeList lists the runtimes recorded in the installation's state,
// each with its workloads' readiness when its cluster can be reached.
type RuntimeList struct {
	Target
	// RuntimeTimeout bounds the connection to each runtime's cluster
	// (default 5 s).
	RuntimeTimeout time.Duration
}

// RuntimeListResult is the list of runtimes.
type RuntimeListResult struct {
	Namespace     string          `json:"namespace"`
	Repository    string          `json:"repository,omitempty"`
	ConfigRuntime string          `json:"configRuntime,omitempty"`
	Runtimes      []gitops.Status `json:"runtimes"`
}

// Run lists the runtimes (no lock: it only reads).
func (a *RuntimeList) Run(ctx context.Context) (*RuntimeListResult, error) {
	ns, st, runtimes, err := (&attachmentList[state.Runtime, gitops.Status]{kind: runtimeKind, Target: a.Target, Timeout: a.RuntimeTimeout}).Run(ctx)
	if err != nil {
		return nil, err
	}
	out := &RuntimeListResult{Namespace: ns, Runtimes: runtimes, ConfigRuntime: gitops.ConfigRuntime(st)}
	if st.RuntimeConfig != nil {
		out.Repository = st.RuntimeConfig.URL
	}
	return out, nil
}

// RuntimeDesignate makes a runtime the configuration runtime.
type RuntimeDesignate struct {
	Target
	Name           string
	RuntimeCluster config.ClusterRef
	Git            configrepo.Remote
	LockWait       time.Duration
	LockLease      time.Duration
}

// Run moves the designation.
func (a *RuntimeDesignate) Run(ctx context.Context) (*gitops.DesignateResult, error) {
	h, p, cl, err := a.Target.openRuntime(ctx, "runtime designate-config", a.Name, a.RuntimeCluster, a.LockWait, a.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	res, err := gitops.Designate(h.ctx, p, a.Name, cl, gitops.Options{Git: a.Git})
	return res, runtimeErr(err)
}

// GitSourceAdd adds a Git source (an Argo CD Application) to a runtime.
type GitSourceAdd struct {
	Target
	Source         gitops.GitSourceOptions
	RuntimeCluster config.ClusterRef
	Git            configrepo.Remote
	LockWait       time.Duration
	LockLease      time.Duration
}

// Run adds the source.
func (a *GitSourceAdd) Run(ctx context.Context) (*gitops.GitSource, error) {
	h, p, cl, err := a.Target.openRuntime(ctx, "runtime git-source add", a.Source.Runtime, a.RuntimeCluster, a.LockWait, a.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	gs, err := gitops.AddGitSource(h.ctx, p, cl, a.Source, gitops.Options{Git: a.Git})
	return gs, runtimeErr(err)
}

// GitSourceList lists a runtime's Git sources.
type GitSourceList struct {
	Target
	Runtime        string
	RuntimeCluster config.ClusterRef
}

// Run lists them (no lock).
func (a *GitSourceList) Run(ctx context.Context) ([]gitops.GitSource, error) {
	p, cl, err := a.Target.peekRuntime(ctx, a.Runtime, a.RuntimeCluster)
	if err != nil {
		return nil, err
	}
	out, err := gitops.ListGitSources(ctx, p, a.Runtime, cl)
	return out, runtimeErr(err)
}

// GitSourceRemove removes a runtime's Git source.
type GitSourceRemove struct {
	Target
	Runtime        string
	Name           string
	RuntimeCluster config.ClusterRef
	LockWait       time.Duration
	LockLease      time.Duration
}

// Run removes it; removing a source that is not there is an input error.
func (a *GitSourceRemove) Run(ctx context.Context) error {
	h, p, cl, err := a.Target.openRuntime(ctx, "runtime git-source remove", a.Runtime, a.RuntimeCluster, a.LockWait, a.LockLease)
	if err != nil {
		return err
	}
	defer h.unlock()
	found, err := gitops.RemoveGitSource(h.ctx, p, a.Runtime, a.Name, cl)
	if err != nil {
		return runtimeErr(err)
	}
	if !found {
		return inputErr(fmt.Errorf("runtime %s has no git source %q: 'onprem runtime git-source list --runtime %s' shows its sources", a.Runtime, a.Name, a.Runtime))
	}
	return nil
}

// runtimeHandle is a held lock with its context.
type runtimeHandle struct {
	ctx    context.Context
	unlock func()
}

// openRuntimes takes the lock and reads the record; the platform must be
// installed.
func (t *Target) openRuntimes(ctx context.Context, verb string, wait, lease time.Duration) (*runtimeHandle, *gitops.Platform, *kube.Cluster, error) {
	ns, err := t.namespace(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	conf := configuration(t.Conn, t.Cluster)
	pc, err := conf.Cluster(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	if st, err := peekState(ctx, pc, ns); err != nil {
		return nil, nil, nil, err
	} else if err := needRuntimesPlatform(pc, ns, st); err != nil {
		return nil, nil, nil, err
	}
	lctx, h, err := conf.lockAndLoad(ctx, ns, verb, wait, lease)
	if err != nil {
		return nil, nil, nil, err
	}
	return &runtimeHandle{ctx: lctx, unlock: h.unlock}, runtimePlatform(pc, ns, h.store, h.st, nil), pc, nil
}

// needRuntimesPlatform refuses the record st of namespace ns on cluster
// pc when it has no platform installed.
func needRuntimesPlatform(pc *kube.Cluster, ns string, st *state.State) error {
	if st.Version == "" {
		return inputErr(fmt.Errorf("no platform is installed in namespace %s of the cluster at %s: install it first with 'onprem install', or point --kubeconfig/--context at the platform's cluster", ns, pc.Server))
	}
	return nil
}

// openRuntime is openRuntimes for one recorded runtime, with its cluster
// reached.
func (t *Target) openRuntime(ctx context.Context, verb, name string, ref config.ClusterRef, wait, lease time.Duration) (*runtimeHandle, *gitops.Platform, *kube.Cluster, error) {
	if name == "" {
		return nil, nil, nil, inputErr(errors.New("name the runtime (--runtime NAME)"))
	}
	h, p, pc, err := t.openRuntimes(ctx, verb, wait, lease)
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := runtimeCluster(h.ctx, p.State, name, ref, t.Cluster, pc)
	if err != nil {
		h.unlock()
		return nil, nil, nil, err
	}
	return h, p, cl, nil
}

// peekRuntime reads the record without the lock and reaches one runtime's
// cluster.
func (t *Target) peekRuntime(ctx context.Context, name string, ref config.ClusterRef) (*gitops.Platform, *kube.Cluster, error) {
	if name == "" {
		return nil, nil, inputErr(errors.New("name the runtime (--runtime NAME)"))
	}
	ns, err := t.namespace(ctx)
	if err != nil {
		return nil, nil, err
	}
	pc, err := connect(ctx, t.Conn, t.Cluster)
	if err != nil {
		return nil, nil, err
	}
	st, err := peekState(ctx, pc, ns)
	if err != nil {
		return nil, nil, err
	}
	cl, err := runtimeCluster(ctx, st, name, ref, t.Cluster, pc)
	if err != nil {
		return nil, nil, err
	}
	return runtimePlatform(pc, ns, nil, st, nil), cl, nil
}

func runtimeCluster(ctx context.Context, st *state.State, name string, ref config.ClusterRef, platform kube.Options, pc *kube.Cluster) (*kube.Cluster, error) {
	rec, ok := st.Runtimes[name]
	if !ok {
		return nil, inputErr(gitops.NotFound(st, name))
	}
	if ref.IsPlatformCluster() {
		ref = gitops.RecordRef(rec)
	}
	cl, err := gitops.Connect(ctx, "runtime "+name+": its cluster", ref, platform, pc)
	if err != nil {
		return nil, err
	}
	if cl.Server != rec.Server {
		return nil, inputErr(fmt.Errorf("runtime %s runs on the cluster at %s, but %s reaches %s: give its kubeconfig and context with --runtime-kubeconfig and --runtime-context",
			name, rec.Server, describeOptions(ref), cl.Server))
	}
	return cl, nil
}

func runtimePlatform(pc *kube.Cluster, ns string, store *state.Store, st *state.State, in *config.Installation) *gitops.Platform {
	return &gitops.Platform{Cluster: pc, Namespace: ns, Store: store, State: st, Installation: in}
}

// installRuntime fetches the runtime chart of platform version v (the
// bundle's copy when the installation came from one), renders the runtime
// and installs it.
func installRuntime(ctx context.Context, l *Loaded, p *gitops.Platform, v string, t gitops.Target, o gitops.Options, f RuntimeFetch) (*gitops.Result, error) {
	rel, err := l.Releases.Get(v)
	if err != nil {
		return nil, fmt.Errorf("the installed platform version: %w", err)
	}
	if rel.Runtime == nil {
		return nil, inputErr(fmt.Errorf("platform version %s ships no GitOps runtime (its release has no runtime chart)", v))
	}
	src := chartfetch.FromRelease(rel.Runtime)
	if f.ChartRepository != "" {
		src.Repository = f.ChartRepository
	}
	chart, err := chartfetch.Resolve(ctx, src, l.Charts(v), f.Chart)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: the runtime chart: %w", t.Runtime.Name, err)
	}
	in := *l.Installation
	in.Spec.Version = v
	pr, err := gitops.Prepare(ctx, t, &in, rel, chart, l.Manifests(v))
	if err != nil {
		if render.IsInputError(err) {
			return nil, inputErr(err)
		}
		return nil, err
	}
	res, err := gitops.Install(ctx, p, pr, o)
	return res, runtimeErr(err)
}

// runtimeErr marks the runtime errors that are the operator's to fix
// (exit code 2).
func runtimeErr(err error) error {
	var ce *attachment.ConflictError
	var ie *gitops.InputError
	var nf *attachment.NotFoundError
	var ae *configrepo.AuthError
	if errors.As(err, &ce) || errors.As(err, &ie) || errors.As(err, &nf) || errors.As(err, &ae) || render.IsInputError(err) {
		return inputErr(err)
	}
	return err
}

// needGitOps refuses runtimes on a platform without the gitops module.
func needGitOps(in *config.Installation) error {
	if !in.Spec.Modules.GitOps.IsEnabled(true) {
		return inputErr(errors.New("GitOps runtimes need the gitops module, which spec.modules.gitops.enabled switches off"))
	}
	return nil
}

// gitToken reads the Git token: from file when given, else from the
// environment variable env (gitops.TokenEnv when empty; "-" reads no
// environment), else from the configuration's source. Surrounding white
// space (a file's last newline) is dropped. The token is never in an
// error.
func gitToken(file, env string, declared config.SecretSource) ([]byte, error) {
	if env == "" {
		env = gitops.TokenEnv
	}
	return readToken("Git token", "--git-token-file", "spec.runtimes[].gitToken", file, env, declared)
}

// platformToken reads the platform token like gitToken, from
// --platform-token-file, gitops.PlatformTokenEnv or
// spec.runtimeConfig.platformToken.
func platformToken(file, env string, declared config.SecretSource) ([]byte, error) {
	if env == "" {
		env = gitops.PlatformTokenEnv
	}
	return readToken("platform token", "--platform-token-file", "spec.runtimeConfig.platformToken", file, env, declared)
}

// readToken reads a token from file (flag names it), else the environment
// variable env ("-": none), else declared (field names it).
func readToken(what, flag, field, file, env string, declared config.SecretSource) ([]byte, error) {
	read := func(path, from string) ([]byte, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, inputErr(fmt.Errorf("%s: reading the %s: %w", from, what, err))
		}
		t := bytes.TrimSpace(b)
		clear(b[len(t):])
		if len(t) == 0 {
			return nil, inputErr(fmt.Errorf("%s: the %s file %s is empty", from, what, path))
		}
		return t, nil
	}
	if file != "" {
		return read(file, flag)
	}
	if env != "-" {
		if v := os.Getenv(env); v != "" {
			return []byte(v), nil
		}
	}
	switch {
	case declared.File != "":
		return read(declared.File, field+".file")
	case declared.Env != "":
		v := os.Getenv(declared.Env)
		if v == "" {
			return nil, inputErr(fmt.Errorf("%s.env: the environment variable %s is empty or unset: export the %s in it", field, declared.Env, what))
		}
		return []byte(v), nil
	}
	return nil, nil
}

// needAccount refuses a runtime without the platform account it
// registers with.
func needAccount(in *config.Installation) error {
	if in.Spec.RuntimeConfig.AccountID == "" {
		return inputErr(errors.New("spec.runtimeConfig.accountId: required: the platform account the runtime registers with (its ID, from the platform's account settings): set it in onprem.yaml, or give --account ID"))
	}
	return nil
}

// declaredRuntime is one runtime of spec.runtimes[] on its way through
// 'onprem install'.
type declaredRuntime struct {
	index   int
	runtime config.Runtime
	cluster *kube.Cluster
	token   []byte
	ptoken  []byte
	// managed are the clusters of its managedClusters[], reached.
	managed []*kube.Cluster
}

// connectRuntimes checks every runtime of spec.runtimes[], reads its token
// and reaches its cluster before anything is touched: one that cannot be
// installed stops the install with exit code 2, an unreachable cluster
// with exit code 3.
func connectRuntimes(ctx context.Context, in *config.Installation, platform kube.Options, pc *kube.Cluster) ([]declaredRuntime, error) {
	if len(in.Spec.Runtimes) == 0 {
		return nil, nil
	}
	st, err := peekState(ctx, pc, in.Spec.Namespace)
	if err != nil {
		return nil, err
	}
	p := runtimePlatform(pc, in.Spec.Namespace, nil, st, in)
	var out []declaredRuntime
	for i, rt := range in.Spec.Runtimes {
		rt, err := render.RuntimeDefaults(rt)
		if err != nil {
			return nil, inputErr(fmt.Errorf("spec.runtimes[%d]: %w", i, err))
		}
		cl, err := gitops.Connect(ctx, fmt.Sprintf("spec.runtimes[%d] (%s): its cluster", i, rt.Name), rt.Cluster, platform, pc)
		if err != nil {
			return nil, err
		}
		if err := gitops.CheckPlace(ctx, p, rt.Name, cl, rt.Namespace); err != nil {
			return nil, inputErr(fmt.Errorf("spec.runtimes[%d]: %w", i, err))
		}
		token, err := gitToken("", "-", rt.GitToken)
		if err != nil {
			return nil, fmt.Errorf("spec.runtimes[%d]: %w", i, err)
		}
		ptoken, err := platformToken("", "-", in.Spec.RuntimeConfig.PlatformToken)
		if err != nil {
			clear(token)
			return nil, err
		}
		d := declaredRuntime{index: i, runtime: rt, cluster: cl, token: token, ptoken: ptoken}
		for j, mc := range rt.ManagedClusters {
			ext, err := gitops.Connect(ctx, fmt.Sprintf("spec.runtimes[%d].managedClusters[%d] (%s)", i, j, mc.Name), mc.Cluster, platform, nil)
			if err != nil {
				clear(token)
				clear(ptoken)
				return nil, err
			}
			d.managed = append(d.managed, ext)
		}
		out = append(out, d)
	}
	return out, nil
}

// convergeRuntimes installs or upgrades every runtime of spec.runtimes[]
// after the platform and its runners, then its declared Git sources. It
// stops at the first failure. Runtimes recorded but no longer declared are
// left alone and named.
func convergeRuntimes(ctx context.Context, l *Loaded, p *gitops.Platform, version string, declared []declaredRuntime, o gitops.Options, f RuntimeFetch) ([]gitops.Result, []string, error) {
	var out []gitops.Result
	defer func() {
		for _, d := range declared {
			clear(d.token)
			clear(d.ptoken)
		}
	}()
	for _, d := range declared {
		res, err := installRuntime(ctx, l, p, version, gitops.Target{Runtime: d.runtime, Cluster: d.cluster, Ref: d.runtime.Cluster, Token: d.token, PlatformToken: d.ptoken}, o, f)
		if res != nil {
			out = append(out, *res)
		}
		if err != nil {
			return out, nil, fmt.Errorf("spec.runtimes[%d]: %w", d.index, err)
		}
		for j, gs := range d.runtime.GitSources {
			if _, err := gitops.AddGitSource(ctx, p, d.cluster, gitops.GitSourceOptions{Runtime: d.runtime.Name, Name: gs.Name, Repository: gs.Repository}, o); err != nil {
				return out, nil, fmt.Errorf("spec.runtimes[%d].gitSources[%d]: %w", d.index, j, runtimeErr(err))
			}
		}
		for j, mc := range d.runtime.ManagedClusters {
			mo := managedcluster.Options{Runtime: d.runtime.Name, RuntimeNamespace: d.runtime.Namespace, Name: mc.Name, Timeout: o.Timeout}
			if _, err := managedcluster.Add(ctx, d.cluster, d.managed[j], mo); err != nil {
				return out, nil, fmt.Errorf("spec.runtimes[%d].managedClusters[%d]: %w", d.index, j, managedErr(err))
			}
		}
	}
	var undeclared []string
	for _, n := range gitops.Names(p.State) {
		if !slices.ContainsFunc(declared, func(d declaredRuntime) bool { return d.runtime.Name == n }) {
			undeclared = append(undeclared, n)
		}
	}
	return out, undeclared, nil
}

// ManagedClusterChange is what adding or removing a runtime's managed
// cluster takes (RuntimeClusterAdd, RuntimeClusterRemove).
type ManagedClusterChange struct {
	// Target is the platform; its Cluster the platform's cluster.
	Target
	// Runtime is the runtime; Name the managed cluster's name in it.
	Runtime string
	Name    string
	// External reaches the managed cluster (required to add one; to
	// remove one, it cleans that cluster's side too).
	External config.ClusterRef
	// RuntimeCluster overrides how the runtime's cluster is reached.
	RuntimeCluster config.ClusterRef
	Timeout        time.Duration
	LockWait       time.Duration
	LockLease      time.Duration
}

// RuntimeClusterAdd registers an external cluster with a runtime: a
// least-privilege ServiceAccount on that cluster, and an Argo CD cluster
// Secret in the runtime's namespace (installer/managedcluster).
type RuntimeClusterAdd struct {
	ManagedClusterChange
}

// Run registers the cluster; an unreachable external cluster is named
// (exit code 3) before anything is created.
func (a *RuntimeClusterAdd) Run(ctx context.Context) (*managedcluster.Result, error) {
	if a.External.IsPlatformCluster() {
		return nil, inputErr(errors.New("say which cluster to add: --context CONTEXT and/or --kubeconfig FILE of that cluster"))
	}
	h, p, cl, err := a.Target.openRuntime(ctx, "runtime cluster add", a.Runtime, a.RuntimeCluster, a.LockWait, a.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	ext, err := gitops.Connect(h.ctx, "managed cluster "+a.Name, a.External, a.Cluster, nil)
	if err != nil {
		return nil, err
	}
	rec := p.State.Runtimes[a.Runtime]
	res, err := managedcluster.Add(h.ctx, cl, ext, managedcluster.Options{Runtime: a.Runtime, RuntimeNamespace: rec.Namespace, Name: a.Name, Timeout: a.Timeout})
	return res, managedErr(err)
}

// RuntimeClusterList lists a runtime's managed clusters with their health.
type RuntimeClusterList struct {
	Target
	Runtime        string
	RuntimeCluster config.ClusterRef
	Timeout        time.Duration
}

// Run lists them (no lock).
func (a *RuntimeClusterList) Run(ctx context.Context) ([]managedcluster.Status, error) {
	p, cl, err := a.Target.peekRuntime(ctx, a.Runtime, a.RuntimeCluster)
	if err != nil {
		return nil, err
	}
	rec := p.State.Runtimes[a.Runtime]
	out, err := managedcluster.List(ctx, cl, managedcluster.Options{Runtime: a.Runtime, RuntimeNamespace: rec.Namespace, Timeout: a.Timeout})
	return out, managedErr(err)
}

// RuntimeClusterRemove unregisters a managed cluster: the runtime's Secret
// and, when External is given, the ServiceAccount and its RBAC there.
type RuntimeClusterRemove struct {
	ManagedClusterChange
}

// Run removes it.
func (a *RuntimeClusterRemove) Run(ctx context.Context) (*managedcluster.RemoveResult, error) {
	h, p, cl, err := a.Target.openRuntime(ctx, "runtime cluster remove", a.Runtime, a.RuntimeCluster, a.LockWait, a.LockLease)
	if err != nil {
		return nil, err
	}
	defer h.unlock()
	var ext *kube.Cluster
	if !a.External.IsPlatformCluster() {
		if ext, err = gitops.Connect(h.ctx, "managed cluster "+a.Name, a.External, a.Cluster, nil); err != nil {
			return nil, fmt.Errorf("%w (leave out --context/--kubeconfig to remove the runtime's side only)", err)
		}
	}
	rec := p.State.Runtimes[a.Runtime]
	res, err := managedcluster.Remove(h.ctx, cl, ext, managedcluster.Options{Runtime: a.Runtime, RuntimeNamespace: rec.Namespace, Name: a.Name, Timeout: a.Timeout})
	return res, managedErr(err)
}

// managedErr marks the managed-cluster errors that are the operator's to
// fix (exit code 2).
func managedErr(err error) error {
	var ie *managedcluster.InputError
	var ce *managedcluster.ConflictError
	if errors.As(err, &ie) || errors.As(err, &ce) {
		return inputErr(err)
	}
	return runtimeErr(err)
}
