//go:build linux

package testcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"onprem.dev/onprem/e2e/buildplan"
	"onprem.dev/onprem/e2e/internal/cmdout"
	"onprem.dev/onprem/e2e/internal/kubemod"
	"onprem.dev/onprem/internal/fsutil"
)

// Pinned versions of everything the harness builds. Each is served by the
// Go module proxy that this project's machines can reach.
const (
	// KubeVersion is the Kubernetes release of kube-apiserver,
	// kube-controller-manager and kube-scheduler.
	KubeVersion = "v1.36.3"
	// EtcdVersion is the etcd server module version.
	EtcdVersion = "v3.6.16"
	// KwokVersion is the kwok release used as the simulated kubelet.
	KwokVersion = "v0.8.0"
)

const (
	kubeModule = "k8s.io/kubernetes"
	etcdModule = "go.etcd.io/etcd/server/v3"
	kwokModule = "sigs.k8s.io/kwok"
)

// kubeCommands are the Kubernetes components the harness builds, in build
// order (the largest first: it compiles most of the shared packages).
var kubeCommands = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"}

// Bins holds the absolute paths of the binaries of one Kubernetes version,
// as returned by Binaries.
type Bins struct {
	// Dir is the version's cache folder, $ONPREM_CACHE/kube/<KubeVersion>.
	Dir                   string
	KubeAPIServer         string
	KubeControllerManager string
	KubeScheduler         string
	Etcd                  string
	Kwok                  string
	// KwokStages is a multi-document YAML file with kwok's stock stages,
	// read from the kwok module when kwok was built.
	KwokStages string
}

// CacheDir returns the folder that holds the binaries of KubeVersion:
// $ONPREM_CACHE/kube/<KubeVersion>, with ONPREM_CACHE defaulting to
// /var/cache/onprem.
func CacheDir() string {
	return filepath.Join(fsutil.CacheRoot(), "kube", KubeVersion)
}

var (
	binsMu     sync.Mutex
	binsCached *Bins
	cpCached   *Bins
)

// Binaries returns the paths of kube-apiserver, kube-controller-manager,
// kube-scheduler, etcd and kwok, building whatever is missing from the
// cache first (see the package documentation for the layout). A binary that
// is present is never rebuilt. Builds write to a temporary name and rename,
// so an interrupted build leaves no half binary; a file lock keeps parallel
// test binaries from building the same thing twice. log (may be nil)
// receives progress with elapsed times.
func Binaries(ctx context.Context, log func(string, ...any)) (*Bins, error) {
	return binaries(ctx, log, &binsCached, func(artifact) bool { return true })
}

// ControlPlaneBinaries is Binaries without kwok: what a kind node's
// control plane runs (e2e/kindcluster), and nothing that a kind cluster
// does not need. Kwok and KwokStages are set but may not exist.
func ControlPlaneBinaries(ctx context.Context, log func(string, ...any)) (*Bins, error) {
	return binaries(ctx, log, &cpCached, func(a artifact) bool { return !a.kwok })
}

// ControlPlaneCached reports whether ControlPlaneBinaries would build
// nothing.
func ControlPlaneCached() bool {
	b := &builder{dir: CacheDir()}
	for _, a := range b.artifacts() {
		if !a.kwok && !b.present(a) {
			return false
		}
	}
	return true
}

func binaries(ctx context.Context, log func(string, ...any), cached **Bins, want func(artifact) bool) (*Bins, error) {
	binsMu.Lock()
	defer binsMu.Unlock()
	if *cached != nil {
		return *cached, nil
	}
	if log == nil {
		log = func(string, ...any) {}
	}
	b := &builder{dir: CacheDir(), log: log, want: want}
	bins, err := b.run(ctx)
	if err != nil {
		return nil, err
	}
	*cached = bins
	return bins, nil
}

type builder struct {
	dir  string
	log  func(string, ...any)
	want func(artifact) bool // the artifacts to build (nil: all)

	kubeMu    sync.Mutex
	kubeReady bool // the wrapper module of the Kubernetes components is prepared

	env   []string // environment for the go commands
	flags string   // the machine's GOFLAGS without -mod
	start time.Time
}

// artifact is one file in bin/ with the version stamp that identifies it.
type artifact struct {
	name    string
	version string
	kwok    bool // kwok's, which only the integration ring needs
	kube    bool // a Kubernetes component (built from the wrapper module)
	// estimate is the cold build time on 2 cores (e2e/buildplan).
	estimate time.Duration
	build    func(ctx context.Context, tmp string) error
}

func (b *builder) binDir() string { return filepath.Join(b.dir, "bin") }

func (b *builder) bins() *Bins {
	bin := b.binDir()
	return &Bins{
		Dir:                   b.dir,
		KubeAPIServer:         filepath.Join(bin, "kube-apiserver"),
		KubeControllerManager: filepath.Join(bin, "kube-controller-manager"),
		KubeScheduler:         filepath.Join(bin, "kube-scheduler"),
		Etcd:                  filepath.Join(bin, "etcd"),
		Kwok:                  filepath.Join(bin, "kwok"),
		KwokStages:            filepath.Join(bin, "kwok-stages.yaml"),
	}
}

// present reports whether bin/<name> exists together with a stamp file
// naming the expected version.
func (b *builder) present(a artifact) bool {
	p := filepath.Join(b.binDir(), a.name)
	st, err := os.Stat(p)
	if err != nil || st.Size() == 0 {
		return false
	}
	stamp, err := os.ReadFile(p + ".version")
	return err == nil && strings.TrimSpace(string(stamp)) == a.version
}

func (b *builder) artifacts() []artifact {
	var as []artifact
	estimates := map[string]time.Duration{"kube-apiserver": 13 * time.Minute, "kube-controller-manager": 2 * time.Minute, "kube-scheduler": time.Minute}
	for _, c := range kubeCommands {
		as = append(as, artifact{name: c, version: KubeVersion, kube: true, estimate: estimates[c], build: func(ctx context.Context, tmp string) error {
			if err := b.prepareKubeOnce(ctx); err != nil {
				return err
			}
			return b.buildKube(ctx, c, tmp)
		}})
	}
	as = append(as,
		artifact{name: "etcd", version: EtcdVersion, estimate: time.Minute, build: b.buildEtcd},
		artifact{name: "kwok", version: KwokVersion, kwok: true, estimate: 2 * time.Minute, build: b.buildKwok},
		artifact{name: "kwok-stages.yaml", version: KwokVersion, kwok: true, estimate: 10 * time.Second, build: b.collectKwokStages},
	)
	return as
}

// prepareKubeOnce prepares the wrapper module for the first Kubernetes
// component this builder builds.
func (b *builder) prepareKubeOnce(ctx context.Context) error {
	b.kubeMu.Lock()
	defer b.kubeMu.Unlock()
	if b.kubeReady {
		return nil
	}
	if err := b.prepareKubeModule(ctx); err != nil {
		return err
	}
	b.kubeReady = true
	return nil
}

func (b *builder) missing() []artifact {
	var out []artifact
	for _, a := range b.artifacts() {
		if (b.want == nil || b.want(a)) && !b.present(a) {
			out = append(out, a)
		}
	}
	return out
}

func (b *builder) run(ctx context.Context) (*Bins, error) {
	if len(b.missing()) == 0 {
		return b.bins(), nil
	}
	if err := os.MkdirAll(b.binDir(), 0o755); err != nil {
		return nil, err
	}
	lock := filepath.Join(b.dir, ".lock")
	unlock, err := fsutil.Lock(ctx, lock, func() {
		b.log("testcluster: waiting for another process's build (lock %s)", lock)
	})
	if err != nil {
		return nil, err
	}
	defer unlock()
	todo := b.missing() // another process may have built them meanwhile
	if len(todo) == 0 {
		return b.bins(), nil
	}
	// Leftovers of builds that were killed: no one else builds now.
	for _, pattern := range []string{".*.tmp-*", ".kwok-gobin-*", "*.version.tmp-*"} {
		stale, _ := filepath.Glob(filepath.Join(b.binDir(), pattern))
		for _, f := range stale {
			_ = os.RemoveAll(f)
		}
	}
	if err := b.setupEnv(ctx); err != nil {
		return nil, err
	}
	b.start = time.Now()
	var names []string
	for _, a := range todo {
		names = append(names, a.name)
	}
	b.log("testcluster: building %s into %s (once; cached afterwards)", strings.Join(names, ", "), b.binDir())
	// One build plan: etcd and kwok compile beside the Kubernetes
	// components, which follow one another (they share most packages,
	// which Go's build cache then compiles once).
	var steps []buildplan.Step
	prev := ""
	for _, a := range todo {
		st := buildplan.Step{
			Name:     "testcluster/" + a.name,
			Uses:     []buildplan.Resource{buildplan.CPU},
			Estimate: a.estimate,
			Fresh:    func(context.Context) bool { return b.present(a) },
			Run:      func(ctx context.Context) error { return b.install(ctx, a) },
		}
		if a.kube {
			if prev != "" {
				st.Needs = []string{prev}
			}
			prev = st.Name
		}
		if a.name == "kwok-stages.yaml" {
			st.Uses = []buildplan.Resource{buildplan.IO}
		}
		steps = append(steps, st)
	}
	if _, err := buildplan.Run(ctx, buildplan.Options{StateDir: buildplan.StateDir(), Log: b.log}, steps...); err != nil {
		return nil, fmt.Errorf("testcluster: %w", err)
	}
	b.record(fmt.Sprintf("total %s for %s", time.Since(b.start).Round(time.Second), strings.Join(names, ", ")))
	return b.bins(), nil
}

// install builds a into a temporary file and moves it into place with its
// stamp.
func (b *builder) install(ctx context.Context, a artifact) error {
	t0 := time.Now()
	final := filepath.Join(b.binDir(), a.name)
	tmp := filepath.Join(b.binDir(), fmt.Sprintf(".%s.tmp-%d", a.name, os.Getpid()))
	_ = os.Remove(tmp)
	if err := a.build(ctx, tmp); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("building %s: %w", a.name, err)
	}
	// Old binary out, stamp in, new binary last: the binary's presence
	// is what marks the pair complete.
	if err := os.Remove(final); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := fsutil.WriteFileAtomic(final+".version", []byte(a.version+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, final); err != nil {
		return err
	}
	d := time.Since(t0).Round(100 * time.Millisecond)
	b.log("testcluster: built %s %s in %s (total %s)", a.name, a.version, d, time.Since(b.start).Round(time.Second))
	b.record(fmt.Sprintf("%s %s built in %s", a.name, a.version, d))
	return nil
}

// record appends a line to build-times.txt in the cache folder: the
// measured cold build times stay next to what they measure.
func (b *builder) record(line string) {
	f, err := os.OpenFile(filepath.Join(b.dir, "build-times.txt"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339), line)
}

// setupEnv prepares the environment for the go commands: the machine's
// module and build caches stay as they are; cgo is off; the local toolchain
// is used; -mod=mod is added to whatever GOFLAGS the machine sets.
func (b *builder) setupEnv(ctx context.Context) error {
	if _, err := exec.LookPath("go"); err != nil {
		return fmt.Errorf("testcluster: the go command is needed to build the cluster binaries: %w", err)
	}
	out, err := exec.CommandContext(ctx, "go", "env", "GOFLAGS").Output()
	if err != nil {
		return fmt.Errorf("testcluster: go env GOFLAGS: %w", err)
	}
	// The wrapper modules are generated, never vendored: whatever -mod the
	// machine sets, they build with -mod=mod.
	var flags []string
	for _, f := range strings.Fields(string(out)) {
		if !strings.HasPrefix(f, "-mod=") {
			flags = append(flags, f)
		}
	}
	b.flags = strings.Join(flags, " ")
	b.env = append(os.Environ(), "CGO_ENABLED=0", "GOTOOLCHAIN=local", "GOWORK=off", "GOFLAGS="+strings.TrimSpace(b.flags+" -mod=mod"))
	return nil
}

// goCmd runs the go command in dir and returns its combined output. On
// failure the error names the command and carries the tail of its output.
// The full output is kept in logs/<step>.log in the cache folder.
func (b *builder) goCmd(ctx context.Context, step, dir string, extraEnv []string, args ...string) ([]byte, error) {
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(append([]string(nil), b.env...), extraEnv...)
	// Its own process group, so that cancelling ctx stops the compilers
	// too; and no build outlives the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	b.log("testcluster: [%s] go %s", step, strings.Join(args, " "))
	err := cmd.Run()
	logs := filepath.Join(b.dir, "logs")
	if mkErr := os.MkdirAll(logs, 0o755); mkErr == nil {
		_ = os.WriteFile(filepath.Join(logs, step+".log"), out.Bytes(), 0o644)
	}
	if err != nil {
		return out.Bytes(), fmt.Errorf("go %s (in %s, %s): %w\n%s", strings.Join(args, " "), dir,
			time.Since(t0).Round(time.Second), err, cmdout.Tail(out.Bytes(), 40))
	}
	b.log("testcluster: [%s] done in %s", step, time.Since(t0).Round(100*time.Millisecond))
	return out.Bytes(), nil
}

// moduleInfo is the part of `go mod download -json` that the builder uses.
type moduleInfo struct {
	Path, Version, GoMod, Dir, Error string
}

func (b *builder) download(ctx context.Context, step, modVersion string) (*moduleInfo, error) {
	// Run outside any module and without -mod=mod, which `go mod download`
	// outside a module does not accept.
	env := []string{"GOFLAGS=" + b.flags}
	out, err := b.goCmd(ctx, step, b.dir, env, "mod", "download", "-json", modVersion)
	if err != nil {
		return nil, err
	}
	var info moduleInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("go mod download %s: %w\n%s", modVersion, err, cmdout.Tail(out, 20))
	}
	if info.Error != "" {
		return nil, fmt.Errorf("go mod download %s: %s", modVersion, info.Error)
	}
	return &info, nil
}

func (b *builder) kubeSrc() string { return filepath.Join(b.dir, "src", "kubernetes") }

// prepareKubeModule writes the wrapper module and runs go mod tidy in it.
func (b *builder) prepareKubeModule(ctx context.Context) error {
	info, err := b.download(ctx, "kubernetes-download", kubeModule+"@"+KubeVersion)
	if err != nil {
		return err
	}
	upstream, err := os.ReadFile(info.GoMod)
	if err != nil {
		return err
	}
	gomod, err := kubemod.GoMod(upstream, KubeVersion, "testcluster")
	if err != nil {
		return err
	}
	src := b.kubeSrc()
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\n// Package tools makes go mod tidy keep what the Kubernetes commands need.\npackage tools\n\nimport (\n")
	for _, c := range kubeCommands {
		fmt.Fprintf(&tools, "\t_ %q\n", kubeModule+"/cmd/"+c)
	}
	tools.WriteString(")\n")
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "tools.go"), []byte(tools.String()), 0o644); err != nil {
		return err
	}
	_, err = b.goCmd(ctx, "kubernetes-tidy", src, nil, "mod", "tidy")
	return err
}

func (b *builder) buildKube(ctx context.Context, command, out string) error {
	_, err := b.goCmd(ctx, command, b.kubeSrc(), nil, "build", "-trimpath",
		"-tags", "selinux,notest,grpcnotrace", "-ldflags", kubemod.LDFlags(KubeVersion),
		"-o", out, kubeModule+"/cmd/"+command)
	return err
}

// buildEtcd builds etcd from a wrapper module whose main calls
// etcdmain.Main: etcd's own module has ../ replaces, so go install refuses it.
func (b *builder) buildEtcd(ctx context.Context, out string) error {
	src := filepath.Join(b.dir, "src", "etcd")
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	gomod := fmt.Sprintf("// Generated by onprem.dev/onprem/e2e/testcluster: builds etcd from the module proxy.\n"+
		"module onprem.dev/testcluster/etcd\n\ngo 1.26.0\n\nrequire %s %s\n", etcdModule, EtcdVersion)
	main := "// Command etcd is the etcd server, built from the module proxy.\npackage main\n\n" +
		"import (\n\t\"os\"\n\n\t\"go.etcd.io/etcd/server/v3/etcdmain\"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n"
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(main), 0o644); err != nil {
		return err
	}
	if _, err := b.goCmd(ctx, "etcd-tidy", src, nil, "mod", "tidy"); err != nil {
		return err
	}
	_, err := b.goCmd(ctx, "etcd", src, nil, "build", "-trimpath", "-ldflags", "-s -w", "-o", out, ".")
	return err
}

// buildKwok installs kwok into a private GOBIN and moves it to out.
func (b *builder) buildKwok(ctx context.Context, out string) error {
	gobin, err := os.MkdirTemp(b.binDir(), ".kwok-gobin-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(gobin)
	env := []string{"GOBIN=" + gobin, "GOFLAGS=" + b.flags}
	if _, err := b.goCmd(ctx, "kwok", b.dir, env, "install", "-trimpath", "-ldflags", "-s -w",
		kwokModule+"/cmd/kwok@"+KwokVersion); err != nil {
		return err
	}
	return os.Rename(filepath.Join(gobin, "kwok"), out)
}

// kwokStockStages are the stages that kwokctl would give kwok, in the kwok
// module's kustomize/stage folder.
var kwokStockStages = []string{
	"node/fast/node-initialize.yaml",
	"node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
	"pod/fast/pod-ready.yaml",
	"pod/fast/pod-complete.yaml",
	"pod/fast/pod-delete.yaml",
	"volume/fast/pvc-provision.yaml",
	"volume/fast/pv-bind.yaml",
	"volume/fast/pvc-delete.yaml",
	"volume/fast/pv-delete.yaml",
}

// collectKwokStages reads kwok's stock stages from the kwok module and
// writes them to out as one multi-document YAML file.
func (b *builder) collectKwokStages(ctx context.Context, out string) error {
	info, err := b.download(ctx, "kwok-download", kwokModule+"@"+KwokVersion)
	if err != nil {
		return err
	}
	var s bytes.Buffer
	fmt.Fprintf(&s, "# kwok %s stock stages, read from %s/kustomize/stage\n", KwokVersion, info.Dir)
	for _, rel := range kwokStockStages {
		data, err := os.ReadFile(filepath.Join(info.Dir, "kustomize", "stage", filepath.FromSlash(rel)))
		if err != nil {
			return err
		}
		fmt.Fprintf(&s, "---\n# %s\n%s\n", rel, bytes.TrimSpace(data))
	}
	return os.WriteFile(out, s.Bytes(), 0o644)
}
