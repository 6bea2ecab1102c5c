package action

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/doctor"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/managedcluster"
	"onprem.dev/onprem/installer/podexec"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/snapshot"
	"onprem.dev/onprem/installer/support"
	"onprem.dev/onprem/preflight"
)

// Collect says how a snapshot of the installation is gathered (support
// bundle and doctor).
type Collect struct {
	Target
	// Bundles, PublicKeys and AllowUnsigned (as for action.Source) are air-gapped bundles, for the preflight
	// checks of a platform version that is not embedded in onprem.
	Bundles       []string
	PublicKeys    []string
	AllowUnsigned bool
	// Logs bound each container's log (snapshot defaults when zero).
	Logs snapshot.LogLimits
	// Concurrency and Timeout bound the collectors (snapshot defaults).
	Concurrency int
	Timeout     time.Duration
	// NoPreflight leaves the preflight checks out.
	NoPreflight bool
	// Progress is told as each collector ends.
	Progress func(snapshot.CollectorResult)
	// Exec asks MongoDB's replica set members their roles and lag
	// (default: in the pods, through the API server).
	Exec podexec.Executor
}

// FindingsError says that an analysis found error-level problems; the
// report has them.
type FindingsError struct{ Errors int }

func (e *FindingsError) Error() string {
	return fmt.Sprintf("%d error-level finding(s): see each one's fix above", e.Errors)
}

// snapshot gathers a snapshot of the installation.
func (a *Collect) snapshot(ctx context.Context, troubledLogsOnly bool) (*snapshot.Snapshot, *kube.Cluster, error) {
	ns, err := a.Target.namespace(ctx)
	if err != nil {
		return nil, nil, err
	}
	cl, err := connect(ctx, a.Conn, a.Cluster)
	if err != nil {
		return nil, nil, err
	}
	o := snapshot.Options{Namespace: ns, Logs: a.Logs, TroubledLogsOnly: troubledLogsOnly, Concurrency: a.Concurrency,
		Timeout: a.Timeout, Progress: a.Progress, Attachments: a.attachments, MongoDB: mongoDBProbe(a.Exec, cl),
		Drift: func(ctx context.Context, s *snapshot.Snapshot) ([]snapshot.Drift, error) {
			return snapshotDrift(ctx, cl, s)
		}}
	if !a.NoPreflight {
		o.Preflight = func(ctx context.Context, s *snapshot.Snapshot) (*preflight.Report, error) {
			return a.preflight(ctx, cl, s)
		}
	}
	s, err := snapshot.Collect(ctx, cl, o)
	return s, cl, err
}

// snapshotDrift compares each recorded component's live objects with its
// deployed release (doctor's drift analyzer reads it).
func snapshotDrift(ctx context.Context, cl *kube.Cluster, s *snapshot.Snapshot) ([]snapshot.Drift, error) {
	if s.State == nil {
		return nil, nil
	}
	ns := s.Meta.Namespace
	releases := apply.NewHelmReleases(cl.Getter, ns, nil)
	checker, err := apply.NewDriftChecker(cl.Getter, ns)
	if err != nil {
		return nil, err
	}
	out := []snapshot.Drift{}
	for _, name := range orderedComponents(s.State) {
		d := snapshot.Drift{Component: name}
		info, err := releases.Last(ctx, name)
		if err == nil {
			d.Objects, err = releaseDrift(ctx, checker, name, info)
		}
		if err != nil {
			d.Error = err.Error()
		}
		out = append(out, d)
	}
	return out, nil
}

// preflight runs the checks with the configuration of the operator's
// -c file if there is one, else the one the last install recorded in the
// cluster, at the installed version.
func (a *Collect) preflight(ctx context.Context, cl *kube.Cluster, s *snapshot.Snapshot) (*preflight.Report, error) {
	src := Source{Bundles: a.Bundles, PublicKeys: a.PublicKeys, AllowUnsigned: a.AllowUnsigned}
	if a.ConfigPath != "" {
		if _, err := os.Stat(a.ConfigPath); err == nil {
			src.ConfigPath = a.ConfigPath
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
	}
	if src.ConfigPath == "" {
		sec, err := cl.Client.CoreV1().Secrets(s.Meta.Namespace).Get(ctx, backup.ConfigSecret, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, errors.New("no configuration: nothing recorded in the cluster (Secret " + backup.ConfigSecret + ") and no -c file")
		}
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", ".onprem-support-config-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		if src.ConfigPath, err = backup.UnpackConfig(dir, sec.Data); err != nil {
			return nil, err
		}
	}
	// The checks judge the cluster as it is: at the installed version,
	// whatever version the file names (an upgrade --to another one, or a
	// file written for the next upgrade).
	if st := s.State; st != nil && st.Version != "" {
		v := st.Version
		src.Overrides.Version = &v
	}
	l, err := src.Load(ctx)
	if err != nil {
		return nil, fmt.Errorf("the configuration (%s): %w", src.ConfigPath, err)
	}
	defer l.Close()
	res, err := render.Render(ctx, l.RenderOptions(nil))
	if err != nil {
		return nil, err
	}
	rep, err := preflight.Run(ctx, &preflight.Env{Installation: l.Installation, Release: l.Release, Releases: l.Releases, Rendered: res, Cluster: cl},
		preflight.All(), preflight.Options{})
	return rep, err
}

// attachments reads the runners and runtimes with their health, and each
// reachable runtime's Git sources and managed clusters.
func (a *Collect) attachments(ctx context.Context, s *snapshot.Snapshot) (*snapshot.Attachments, error) {
	if s.State == nil || (len(s.State.Runners) == 0 && len(s.State.Runtimes) == 0) {
		return &snapshot.Attachments{}, nil
	}
	t := a.Target
	t.Namespace = s.Meta.Namespace
	out := &snapshot.Attachments{}
	runners, err := (&RunnerList{Target: t}).Run(ctx)
	if err != nil {
		return nil, fmt.Errorf("runners: %w", err)
	}
	out.Runners = runners.Runners
	runtimes, err := (&RuntimeList{Target: t}).Run(ctx)
	if err != nil {
		return out, fmt.Errorf("runtimes: %w", err)
	}
	out.Runtimes = runtimes.Runtimes
	for _, rt := range runtimes.Runtimes {
		if !rt.Reachable {
			continue
		}
		gs, err := (&GitSourceList{Target: t, Runtime: rt.Name}).Run(ctx)
		if err != nil {
			out.Problems = append(out.Problems, fmt.Sprintf("Git sources of runtime %s: %v", rt.Name, err))
		} else {
			out.GitSources = append(out.GitSources, gs...)
		}
		mc, err := (&RuntimeClusterList{Target: t, Runtime: rt.Name, RuntimeCluster: config.ClusterRef{}}).Run(ctx)
		if err != nil {
			out.Problems = append(out.Problems, fmt.Sprintf("managed clusters of runtime %s: %v", rt.Name, err))
		} else if len(mc) > 0 {
			if out.ManagedClusters == nil {
				out.ManagedClusters = map[string][]managedcluster.Status{}
			}
			out.ManagedClusters[rt.Name] = mc
		}
	}
	return out, nil
}

// SupportBundle writes a support bundle of the installation.
type SupportBundle struct {
	Collect
	// Output is the bundle's file (default: onprem-support-TIME.tar.gz in
	// the current folder).
	Output string
}

// Run collects, redacts and writes the bundle. It fails only when the
// cluster cannot be reached or the file cannot be written: a collector
// that could not read something is listed in the bundle's summary.
func (a *SupportBundle) Run(ctx context.Context) (*support.Result, *doctor.Report, error) {
	s, cl, err := a.Collect.snapshot(ctx, false)
	if err != nil {
		return nil, nil, err
	}
	values, err := support.SecretValues(ctx, cl.Client, s.Meta.Namespaces)
	if err != nil {
		return nil, nil, err
	}
	rep := doctor.Analyze(s)
	out := a.Output
	if out == "" {
		out = support.DefaultFileName(s.Meta.CollectedAt)
	}
	res, err := support.Write(out, s, rep, support.NewRedactor(values))
	if err != nil {
		return nil, nil, err
	}
	return res, rep, nil
}

// Doctor runs the analyzers on the live installation.
type Doctor struct {
	Collect
}

// Run collects what the analyzers read (the logs of troubled pods only)
// and analyzes it. The report's evidence is redacted like a bundle's. It
// returns a *FindingsError with the report when an error-level finding
// exists.
func (a *Doctor) Run(ctx context.Context) (*doctor.Report, error) {
	s, cl, err := a.Collect.snapshot(ctx, true)
	if err != nil {
		return nil, err
	}
	values, err := support.SecretValues(ctx, cl.Client, s.Meta.Namespaces)
	if err != nil {
		return nil, err
	}
	rep := support.RedactReport(doctor.Analyze(s), support.NewRedactor(values))
	if n := rep.Count(doctor.Error); n > 0 {
		return rep, &FindingsError{Errors: n}
	}
	return rep, nil
}

// SupportAnalyze runs the analyzers on a support bundle, offline.
type SupportAnalyze struct {
	File string
}

// Run reads the bundle and analyzes it; a *FindingsError with the report
// when an error-level finding exists.
func (a *SupportAnalyze) Run(context.Context) (*doctor.Report, error) {
	s, err := support.Read(a.File)
	if err != nil {
		var fe *support.FormatError
		if errors.As(err, &fe) || errors.Is(err, fs.ErrNotExist) {
			return nil, inputErr(err)
		}
		return nil, err
	}
	rep := doctor.Analyze(s)
	if n := rep.Count(doctor.Error); n > 0 {
		return rep, &FindingsError{Errors: n}
	}
	return rep, nil
}
