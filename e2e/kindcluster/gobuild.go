//go:build linux

package kindcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"onprem.dev/onprem/e2e/testcluster"

	"onprem.dev/onprem/e2e/internal/kubemod"
)

// setupGo prepares the environment of the go commands once: the machine's
// module and build caches as they are, cgo off, the local toolchain, and
// -mod=mod added to the machine's GOFLAGS (the wrapper modules are
// generated, never vendored).
func (b *builder) setupGo(ctx context.Context) error {
	b.goOnce.Do(func() {
		if _, err := exec.LookPath("go"); err != nil {
			b.goErr = fmt.Errorf("the go command is needed to build the kind toolchain: %w", err)
			return
		}
		flags, err := output(ctx, "go", "env", "GOFLAGS")
		if err != nil {
			b.goErr = err
			return
		}
		var keep []string
		for _, f := range strings.Fields(flags) {
			if !strings.HasPrefix(f, "-mod=") {
				keep = append(keep, f)
			}
		}
		b.goFlags = strings.Join(keep, " ")
		b.goEnv = []string{"CGO_ENABLED=0", "GOTOOLCHAIN=local", "GOWORK=off",
			"GOFLAGS=" + strings.TrimSpace(b.goFlags+" -mod=mod")}
	})
	return b.goErr
}

// goCmd runs the go command in dir with the build environment.
func (b *builder) goCmd(ctx context.Context, step, dir string, extraEnv []string, args ...string) error {
	if err := b.setupGo(ctx); err != nil {
		return err
	}
	env := append(append([]string(nil), b.goEnv...), extraEnv...)
	return b.runCmd(ctx, step, cmdOpts{dir: dir, env: env}, "go", args...)
}

// ensureControlPlaneBinaries builds (or finds in e2e/testcluster's cache)
// kube-apiserver, kube-controller-manager, kube-scheduler and etcd.
func (b *builder) ensureControlPlaneBinaries(ctx context.Context) error {
	_, err := testcluster.ControlPlaneBinaries(ctx, b.logf)
	return err
}

// ensureKubeBinaries builds kubelet, kubeadm, kubectl and kube-proxy from a
// wrapper module that requires k8s.io/kubernetes and replaces its staging
// modules with the versions the proxy serves.
func (b *builder) ensureKubeBinaries(ctx context.Context) error {
	version := kubeModule + "@" + KubeVersion
	src := filepath.Join(b.dir, "src", "kubernetes")
	prepared := false
	for _, c := range kubeNodeCommands {
		t0 := time.Now()
		built, err := b.produce(ctx, version, []string{b.bin(c)}, func(ctx context.Context, tmp string) error {
			if !prepared {
				if err := b.prepareKubeModule(ctx, src); err != nil {
					return err
				}
				prepared = true
			}
			return b.goCmd(ctx, c, src, nil, "build", "-trimpath", "-tags", "selinux,notest,grpcnotrace",
				"-ldflags", kubemod.LDFlags(KubeVersion), "-o", filepath.Join(tmp, c), kubeModule+"/cmd/"+c)
		})
		if err != nil {
			return fmt.Errorf("build %s: %w", c, err)
		}
		if built {
			b.log("[kube-binaries] built %s %s in %s", c, KubeVersion, time.Since(t0).Round(time.Second))
			b.record(c+" "+KubeVersion, time.Since(t0))
		}
	}
	return nil
}

// moduleInfo is the part of `go mod download -json` the builder reads.
type moduleInfo struct {
	Path, Version, GoMod, Dir, Error string
}

// download fetches module@version into the module cache and describes it.
func (b *builder) download(ctx context.Context, modVersion string) (*moduleInfo, error) {
	if err := b.setupGo(ctx); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	// Outside any module and without -mod=mod, which `go mod download`
	// outside a module refuses.
	env := append(append([]string(nil), b.goEnv...), "GOFLAGS="+b.goFlags)
	if err := b.runCmd(ctx, "download", cmdOpts{dir: b.dir, env: env, stdout: &out}, "go", "mod", "download", "-json", modVersion); err != nil {
		return nil, err
	}
	var info moduleInfo
	if err := json.Unmarshal(out.Bytes(), &info); err != nil {
		return nil, fmt.Errorf("go mod download %s: %w", modVersion, err)
	}
	if info.Error != "" {
		return nil, fmt.Errorf("go mod download %s: %s", modVersion, info.Error)
	}
	return &info, nil
}

func (b *builder) prepareKubeModule(ctx context.Context, src string) error {
	info, err := b.download(ctx, kubeModule+"@"+KubeVersion)
	if err != nil {
		return err
	}
	upstream, err := os.ReadFile(info.GoMod)
	if err != nil {
		return err
	}
	gomod, err := kubemod.GoMod(upstream, KubeVersion, "kindcluster")
	if err != nil {
		return err
	}
	var tools strings.Builder
	tools.WriteString("//go:build tools\n\n// Package tools makes go mod tidy keep what the Kubernetes commands need.\npackage tools\n\nimport (\n")
	for _, c := range kubeNodeCommands {
		fmt.Fprintf(&tools, "\t_ %q\n", kubeModule+"/cmd/"+c)
	}
	tools.WriteString(")\n")
	if err := writeModule(src, map[string]string{"go.mod": gomod, "tools.go": tools.String()}); err != nil {
		return err
	}
	return b.goCmd(ctx, "kubernetes-tidy", src, nil, "mod", "tidy")
}

// writeModule replaces the folder src with the given files.
func writeModule(src string, files map[string]string) error {
	if err := os.RemoveAll(src); err != nil {
		return err
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// goInstall runs `go install pkgs@version` into a private GOBIN (tmp) and
// leaves the binaries there, under their own names.
func (b *builder) goInstall(ctx context.Context, step, tmp string, extra []string, pkgs ...string) error {
	if err := b.setupGo(ctx); err != nil {
		return err
	}
	env := []string{"GOBIN=" + tmp, "GOFLAGS=" + b.goFlags}
	args := append(append([]string{"install", "-trimpath"}, extra...), pkgs...)
	return b.goCmd(ctx, step, b.dir, env, args...)
}

// timed runs produce for one group of binaries and logs and records the
// build time when it built anything.
func (b *builder) timed(ctx context.Context, step, version string, names []string, build func(ctx context.Context, tmp string) error) error {
	t0 := time.Now()
	var paths []string
	for _, n := range names {
		paths = append(paths, b.bin(n))
	}
	built, err := b.produce(ctx, version, paths, build)
	if err != nil {
		return err
	}
	if built {
		b.log("[%s] built %s in %s", step, strings.Join(names, ", "), time.Since(t0).Round(time.Second))
		b.record(version, time.Since(t0))
	}
	return nil
}

// ensureKind builds the kind CLI.
func (b *builder) ensureKind(ctx context.Context) error {
	return b.timed(ctx, "kind", kindModule+"@"+KindVersion, []string{"kind"}, func(ctx context.Context, tmp string) error {
		return b.goInstall(ctx, "kind", tmp, []string{"-ldflags", "-s -w"}, kindModule+"@"+KindVersion)
	})
}

// ensureContainerd builds containerd 2, its runc shim and ctr, statically
// and without the snapshotters kind never uses.
func (b *builder) ensureContainerd(ctx context.Context) error {
	names := []string{"containerd", "containerd-shim-runc-v2", "ctr"}
	return b.timed(ctx, "containerd", containerdModule+"@"+ContainerdVersion, names, func(ctx context.Context, tmp string) error {
		var pkgs []string
		for _, n := range names {
			pkgs = append(pkgs, containerdModule+"/cmd/"+n+"@"+ContainerdVersion)
		}
		ld := "-s -w -X " + containerdModule + "/version.Version=" + ContainerdVersion
		return b.goInstall(ctx, "containerd", tmp, []string{"-tags", "no_btrfs no_devmapper no_zfs no_aufs", "-ldflags", ld}, pkgs...)
	})
}

// ensureKubeRouter builds kube-router, the clusters' CNI and
// NetworkPolicy controller.
func (b *builder) ensureKubeRouter(ctx context.Context) error {
	return b.timed(ctx, "kube-router", kubeRouterModule+"@"+KubeRouterVersion, []string{"kube-router"}, func(ctx context.Context, tmp string) error {
		ld := "-s -w -X " + kubeRouterModule + "/pkg/version.Version=" + KubeRouterVersion
		return b.goInstall(ctx, "kube-router", tmp, []string{"-ldflags", ld}, kubeRouterModule+"/cmd/kube-router@"+KubeRouterVersion)
	})
}

// ensurePause builds the pod sandbox's pause process (internal/pause,
// embedded) in a module of its own.
func (b *builder) ensurePause(ctx context.Context) error {
	version := b.binaryVersions()["pause"]
	return b.timed(ctx, "pause", version, []string{"pause"}, func(ctx context.Context, tmp string) error {
		src := filepath.Join(b.dir, "src", "pause")
		if err := writeModule(src, map[string]string{
			"go.mod":  "// Generated by onprem.dev/onprem/e2e/kindcluster.\nmodule onprem.dev/kindcluster/pause\n\ngo 1.22\n",
			"main.go": string(pauseMain),
		}); err != nil {
			return err
		}
		return b.goCmd(ctx, "pause", src, nil, "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(tmp, "pause"), ".")
	})
}
