package action

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/attachment"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/runner"
	"onprem.dev/onprem/installer/state"
)

// runnerKind is what the attachment verbs need of runners.
var runnerKind = &attachmentKind[state.Runner, runner.Status]{
	name:    "runner",
	records: func(st *state.State) map[string]state.Runner { return st.Runners },
	ref:     runner.RecordRef,
	server:  func(rec state.Runner) string { return rec.Server },
	connect: runner.Connect,
	observe: func(ctx context.Context, cl *kube.Cluster, st *state.State, name string) runner.Status {
		return runner.Observe(ctx, cl, name, st.Runners[name])
	},
	unreachable: func(st *state.State, name string, err error) runner.Status {
		return runner.Unreachable(name, st.Runners[name], err)
	},
	notFound: func(st *state.State, name string) error { return runner.NotFound(st, name) },
	forgets:  "the platform's side",
	uninstall: func(ctx context.Context, p *attachment.Platform, name string, cl *kube.Cluster, timeout time.Duration, reporter apply.Reporter) (*attachment.Removal, error) {
		res, err := runner.Uninstall(ctx, p, name, cl, runner.Options{Timeout: timeout, Reporter: reporter})
		var ce *attachment.ConflictError
		if errors.As(err, &ce) {
			return res, inputErr(err)
		}
		return res, err
	},
}

// RunnerInstall installs a build runner, or converges it when it is already
// installed at the same place: on the platform's cluster or another one,
// registered with the platform, at the installed platform version. The
// runner's settings come from spec.runners[] when onprem.yaml declares it
// there, and from the fields below, which win.
type RunnerInstall struct {
	// Source is the platform's configuration (domain, registry, proxy,
	// placement, the platform namespace).
	Source
	// Cluster is the platform's cluster.
	Cluster kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn *Configuration
	// Name of the runner (a DNS label of at most 40 characters).
	Name string
	// RunnerCluster is the runner's cluster (default: spec.runners[]'s,
	// else the platform's).
	RunnerCluster config.ClusterRef
	// Namespace is the runner's namespace (default: spec.runners[]'s,
	// else onprem-runner-NAME).
	Namespace string
	// Concurrency is how many builds it runs at once (default:
	// spec.runners[]'s, else 4).
	Concurrency int
	Timeout     time.Duration
	LockWait    time.Duration
	LockLease   time.Duration
	Reporter    apply.Reporter
}

// Run installs the runner.
func (a *RunnerInstall) Run(ctx context.Context) (*runner.Result, error) {
	if _, err := render.RunnerDefaults(config.Runner{Name: a.Name, Namespace: a.Namespace, Concurrency: a.Concurrency}); err != nil {
		return nil, inputErr(err)
	}
	l, err := a.Source.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if err := needPipelines(l.Installation); err != nil {
		return nil, err
	}
	r := config.Runner{Name: a.Name}
	for _, declared := range l.Installation.Spec.Runners {
		if declared.Name == a.Name {
			r = declared
		}
	}
	if !a.RunnerCluster.IsPlatformCluster() {
		r.Cluster = a.RunnerCluster
	}
	if a.Namespace != "" {
		r.Namespace = a.Namespace
	}
	if a.Concurrency != 0 {
		r.Concurrency = a.Concurrency
	}
	if r, err = render.RunnerDefaults(r); err != nil {
		return nil, inputErr(err)
	}

	// Both clusters are reached before anything is touched.
	pc, err := connect(ctx, a.Conn, a.Cluster)
	if err != nil {
		return nil, err
	}
	cl, err := runner.Connect(ctx, r.Name, r.Cluster, a.Cluster, pc)
	if err != nil {
		return nil, err
	}
	p, unlock, ctx, err := openPlatform(ctx, l, pc, "runner", "install", a.LockWait, a.LockLease)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return installRunner(ctx, l, p, p.State.Version, runner.Target{Runner: r, Cluster: cl, Ref: r.Cluster}, runner.Options{Timeout: a.Timeout, Reporter: a.Reporter})
}

// RunnerUpgrade brings runners to the installed platform version's runner
// chart and images (and to the platform's current configuration: registry,
// proxy, placement, CA). Run it after 'onprem upgrade apply'.
type RunnerUpgrade struct {
	AttachmentUpgrade
	// RunnerCluster overrides how the runner's cluster is reached (one
	// runner only): its kubeconfig path or context name may differ on this
	// machine from the ones recorded.
	RunnerCluster config.ClusterRef
}

// Run upgrades the runners, one after the other; one that fails does not
// stop the others, and the error joins every failure.
func (a *RunnerUpgrade) Run(ctx context.Context) ([]runner.Result, error) {
	return (&attachmentUpgrade[state.Runner, runner.Status, runner.Result]{
		kind: runnerKind, AttachmentUpgrade: a.AttachmentUpgrade, Override: a.RunnerCluster,
		upgrade: func(ctx context.Context, l *Loaded, p *attachment.Platform, n string, rec state.Runner, ref config.ClusterRef, cl *kube.Cluster) (*runner.Result, error) {
			r := config.Runner{Name: n, Namespace: rec.Namespace, Concurrency: rec.Concurrency, Cluster: ref}
			for _, declared := range l.Installation.Spec.Runners {
				if declared.Name == n && declared.Concurrency != 0 {
					r.Concurrency = declared.Concurrency
				}
			}
			return installRunner(ctx, l, p, p.State.Version, runner.Target{Runner: r, Cluster: cl, Ref: ref}, runner.Options{Timeout: a.Timeout, Reporter: a.Reporter})
		},
		failed: func(n string, rec state.Runner, err error) runner.Result {
			return runner.Result{Name: n, Server: rec.Server, Namespace: rec.Namespace, Action: apply.Failed, Error: err.Error()}
		},
	}).Run(ctx)
}

// RunnerUninstall removes a runner from its cluster and from the platform.
type RunnerUninstall struct {
	AttachmentUninstall
	// RunnerCluster overrides how the runner's cluster is reached.
	RunnerCluster config.ClusterRef
}

// Run uninstalls the runner.
func (a *RunnerUninstall) Run(ctx context.Context) (*runner.UninstallResult, error) {
	return (&attachmentUninstall[state.Runner, runner.Status]{kind: runnerKind, AttachmentUninstall: a.AttachmentUninstall, Override: a.RunnerCluster}).Run(ctx)
}

// RunnerList lists the runners recorded in the installation's state, each
// with the readiness of its agent and engine when its cluster can be
// reached; one that cannot shows as unreachable.
type RunnerList struct {
	Target
	// RunnerTimeout bounds the connection to each runner's cluster
	// (default 5 s).
	RunnerTimeout time.Duration
}

// RunnerListResult is the list of runners.
type RunnerListResult struct {
	Namespace string          `json:"namespace"`
	Runners   []runner.Status `json:"runners"`
}

// Run lists the runners (no lock: it only reads).
func (a *RunnerList) Run(ctx context.Context) (*RunnerListResult, error) {
	ns, _, runners, err := (&attachmentList[state.Runner, runner.Status]{kind: runnerKind, Target: a.Target, Timeout: a.RunnerTimeout}).Run(ctx)
	if err != nil {
		return nil, err
	}
	return &RunnerListResult{Namespace: ns, Runners: runners}, nil
}

// peekState reads the installation's record without the lock (and
// without creating the namespace, as taking the lock would): an empty
// record when there is no namespace.
func peekState(ctx context.Context, pc *kube.Cluster, ns string) (*state.State, error) {
	if _, err := pc.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); apierrors.IsNotFound(err) {
		return &state.State{Namespace: ns}, nil
	} else if err != nil {
		return nil, fmt.Errorf("reading namespace %s: %w", ns, err)
	}
	return state.NewStore(pc.Client, ns).Load(ctx)
}

// installRunner renders a runner at platform version v, the installed one
// (with that version's bundle content when it came from one), and installs
// it.
func installRunner(ctx context.Context, l *Loaded, p *runner.Platform, v string, t runner.Target, o runner.Options) (*runner.Result, error) {
	rel, err := l.Releases.Get(v)
	if err != nil {
		return nil, fmt.Errorf("the installed platform version: %w", err)
	}
	in := *l.Installation
	in.Spec.Version = v
	pr, err := runner.Prepare(ctx, t, &in, rel, l.Charts(v), l.Manifests(v))
	if err != nil {
		var ie *render.RunnerInputError
		if errors.As(err, &ie) || render.IsInputError(err) {
			return nil, inputErr(err)
		}
		return nil, err
	}
	res, err := runner.Install(ctx, p, pr, o)
	var ce *attachment.ConflictError
	var tm *runner.TokenMismatchError
	if errors.As(err, &ce) || errors.As(err, &tm) {
		return res, inputErr(err)
	}
	return res, err
}

// needPipelines refuses runners on a platform without the pipelines
// module: nothing would hand them builds.
func needPipelines(in *config.Installation) error {
	if !in.Spec.Modules.Pipelines.IsEnabled(true) {
		return inputErr(errors.New("runners need the pipelines module, which spec.modules.pipelines.enabled switches off: nothing would give them builds"))
	}
	return nil
}

func describeOptions(ref config.ClusterRef) string {
	switch {
	case ref.Kubeconfig != "" && ref.Context != "":
		return fmt.Sprintf("kubeconfig %s, context %q", ref.Kubeconfig, ref.Context)
	case ref.Kubeconfig != "":
		return "kubeconfig " + ref.Kubeconfig
	case ref.Context != "":
		return fmt.Sprintf("context %q", ref.Context)
	}
	return "the default kubeconfig and context"
}

// declaredRunner is one runner of spec.runners[] on its way through
// 'onprem install'.
type declaredRunner struct {
	index   int
	runner  config.Runner
	cluster *kube.Cluster
}

// connectRunners checks every runner of spec.runners[] and reaches its
// cluster, before anything is touched: a runner that cannot be installed
// (a namespace too long for its engine's, a name that runs elsewhere) stops
// the install there with exit code 2, an unreachable cluster with exit
// code 3, naming the runner, its kubeconfig and context.
func connectRunners(ctx context.Context, in *config.Installation, platform kube.Options, pc *kube.Cluster) ([]declaredRunner, error) {
	if len(in.Spec.Runners) == 0 {
		return nil, nil
	}
	st, err := peekState(ctx, pc, in.Spec.Namespace)
	if err != nil {
		return nil, err
	}
	p := &runner.Platform{Cluster: pc, Namespace: in.Spec.Namespace, State: st}
	var out []declaredRunner
	for i, r := range in.Spec.Runners {
		r, err := render.RunnerDefaults(r)
		if err != nil {
			return nil, inputErr(fmt.Errorf("spec.runners[%d]: %w", i, err))
		}
		cl, err := runner.Connect(ctx, r.Name, r.Cluster, platform, pc)
		if err != nil {
			return nil, fmt.Errorf("spec.runners[%d]: %w", i, err)
		}
		if err := runner.CheckPlace(p, r.Name, cl.Server, r.Namespace); err != nil {
			return nil, inputErr(fmt.Errorf("spec.runners[%d]: %w", i, err))
		}
		out = append(out, declaredRunner{index: i, runner: r, cluster: cl})
	}
	return out, nil
}

// convergeRunners installs or upgrades every runner of spec.runners[]
// after the platform's components (at its version), under the install's
// lock, in the order of the file. It stops at the first failure. Runners recorded but
// no longer declared are left alone (they may have been installed with
// 'onprem runner install'); they are named in the result.
func convergeRunners(ctx context.Context, l *Loaded, p *runner.Platform, version string, declared []declaredRunner, o runner.Options) ([]runner.Result, []string, error) {
	var out []runner.Result
	for _, d := range declared {
		res, err := installRunner(ctx, l, p, version, runner.Target{Runner: d.runner, Cluster: d.cluster, Ref: d.runner.Cluster}, o)
		if res != nil {
			out = append(out, *res)
		}
		if err != nil {
			return out, nil, fmt.Errorf("spec.runners[%d]: %w", d.index, err)
		}
	}
	var undeclared []string
	for _, n := range runner.Names(p.State) {
		if !slices.ContainsFunc(declared, func(d declaredRunner) bool { return d.runner.Name == n }) {
			undeclared = append(undeclared, n)
		}
	}
	sort.Strings(undeclared)
	return out, undeclared, nil
}
