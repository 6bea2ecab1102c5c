//go:build linux

package kindcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"onprem.dev/onprem/e2e/buildplan"
	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/internal/fsutil"
)

// Plan is what Ensure builds, as steps of an e2e/buildplan run, for a
// caller that runs them together with other steps (e2e/prebuild runs them
// with the platform's images', so that debootstrap and downloads overlap
// the compiles). Close it when the steps have run.
type Plan struct {
	b      *builder
	steps  []buildplan.Step
	unlock func()
	t0     time.Time
}

// NewPlan checks the cache: when the toolchain is current (docker answers
// with the runtime this host needs, every binary is there with its stamp,
// the node image is the one they make) the plan has no step and takes no
// lock. Otherwise it holds the cache folder's lock until Close, so that
// parallel test processes do not build the same thing twice, and its
// steps build what the cache lacks.
func NewPlan(ctx context.Context, opts Options) (*Plan, error) {
	dir := opts.CacheDir
	if dir == "" {
		dir = CacheDir()
	}
	logf := opts.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	b := &builder{dir: dir, logf: logf}
	p := &Plan{b: b, t0: time.Now()}
	if err := os.MkdirAll(b.binDir(), 0o755); err != nil {
		return nil, fmt.Errorf("kindcluster: cache folder: %w", err)
	}
	// Fast path: no lock, nothing is written.
	if b.dockerAnswers(ctx) == nil && b.checkDockerRuntime(ctx, hostNeedsNoSysRes()) == nil {
		if ok, _ := b.nodeImageCurrent(ctx); ok && b.binariesPresent() {
			b.log("toolchain ready (cached, %s)", time.Since(p.t0).Round(time.Millisecond))
			return p, nil
		}
	}
	lock := filepath.Join(b.dir, ".lock")
	unlock, err := fsutil.Lock(ctx, lock, func() { b.log("waiting for another process (lock %s)", lock) })
	if err != nil {
		return nil, err
	}
	p.unlock = unlock
	b.removeStale()
	b.log("preparing the kind toolchain in %s (cold steps are built once and cached)", b.dir)
	p.steps = b.steps()
	return p, nil
}

// Steps are the build steps, named kind/...; none when the toolchain is
// current.
func (p *Plan) Steps() []buildplan.Step { return p.steps }

// Toolchain is what the steps prepared; call it after they succeeded.
func (p *Plan) Toolchain() *Toolchain {
	if p.steps != nil {
		p.b.log("toolchain ready in %s", time.Since(p.t0).Round(time.Second))
	}
	return p.b.toolchain()
}

// Close releases the cache's lock.
func (p *Plan) Close() {
	if p.unlock != nil {
		p.unlock()
		p.unlock = nil
	}
}

// Step names, for callers that add steps of their own after them.
const (
	StepHostPackages = "kind/host-packages"
	StepNodeImage    = "kind/node-image"
)

// steps is the toolchain's graph: the host's chain (packages, dockerd, the
// node's root filesystem, kind's base image: downloads and disk) beside
// the Go builds (CPU), then the images made of both. Estimates are cold
// times measured alone on the project's 2-core machine; a run's own
// measurements replace them.
func (b *builder) steps() []buildplan.Step {
	cpu := []buildplan.Resource{buildplan.CPU}
	io := []buildplan.Resource{buildplan.IO}
	binsPresent := func(names ...string) func(context.Context) bool {
		return func(context.Context) bool {
			versions := b.binaryVersions()
			for _, n := range names {
				if !present(b.bin(n), versions[n]) {
					return false
				}
			}
			return true
		}
	}
	return []buildplan.Step{
		{Name: StepHostPackages, Uses: []buildplan.Resource{buildplan.IO, buildplan.Apt}, Estimate: 2 * time.Minute, Run: b.ensureHostPackages},
		{Name: "kind/dockerd", Needs: []string{StepHostPackages}, Uses: io, Estimate: 20 * time.Second, Run: b.ensureDocker},
		{Name: "kind/rootfs", Needs: []string{StepHostPackages}, Uses: io, Estimate: 3 * time.Minute,
			Fresh: func(context.Context) bool { return present(b.rootfsTar(), b.rootfsVersion()) },
			Run:   b.ensureRootfs},
		{Name: "kind/base-image", Needs: []string{"kind/dockerd", "kind/rootfs"}, Uses: io, Estimate: time.Minute,
			Fresh: func(ctx context.Context) bool {
				return b.dockerAnswers(ctx) == nil && b.imageCurrent(ctx, "base-image", BaseImage, b.baseImageHash())
			},
			Run: b.ensureBaseImage},
		{Name: "kind/control-plane-binaries", Uses: cpu, Estimate: 17 * time.Minute,
			Fresh: func(context.Context) bool { return testcluster.ControlPlaneCached() },
			Run:   b.ensureControlPlaneBinaries},
		// After the control plane's: they share most of their packages,
		// which Go's build cache then compiles once.
		{Name: "kind/kube-binaries", Needs: []string{"kind/control-plane-binaries"}, Uses: cpu, Estimate: 4 * time.Minute,
			Fresh: binsPresent(kubeNodeCommands...), Run: b.ensureKubeBinaries},
		{Name: "kind/kind", Uses: cpu, Estimate: time.Minute, Fresh: binsPresent("kind"), Run: b.ensureKind},
		{Name: "kind/pause", Uses: cpu, Estimate: 5 * time.Second, Fresh: binsPresent("pause"), Run: b.ensurePause},
		{Name: "kind/containerd", Uses: cpu, Estimate: 3 * time.Minute,
			Fresh: binsPresent("containerd", "containerd-shim-runc-v2", "ctr"), Run: b.ensureContainerd},
		{Name: "kind/coredns", Uses: cpu, Estimate: 4 * time.Minute, Fresh: binsPresent("coredns"), Run: b.ensureCoreDNS},
		{Name: "kind/kube-router", Uses: cpu, Estimate: 4 * time.Minute, Fresh: binsPresent("kube-router"), Run: b.ensureKubeRouter},
		// Always runs: it asks kubeadm for the images' names, which the node
		// image step needs, and rewrites the archive only when its inputs
		// changed.
		{Name: "kind/control-plane-images", Uses: io, Estimate: 30 * time.Second,
			Needs: []string{"kind/control-plane-binaries", "kind/kube-binaries", "kind/coredns", "kind/pause", "kind/kube-router", "kind/rootfs"},
			Run:   b.ensureControlPlaneImages},
		{Name: StepNodeImage, Uses: io, Estimate: time.Minute,
			Needs: []string{"kind/base-image", "kind/control-plane-images", "kind/kind", "kind/containerd"},
			Fresh: func(ctx context.Context) bool {
				if b.dockerAnswers(ctx) != nil {
					return false
				}
				ok, _ := b.nodeImageCurrent(ctx)
				return ok
			},
			Run: b.ensureNodeImage},
	}
}
