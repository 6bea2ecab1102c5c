//go:build linux

package kindcluster

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"onprem.dev/onprem/e2e/buildplan"
	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/internal/fsutil"
)

// Pinned versions of everything the harness builds or installs.
const (
	// KubeVersion is the Kubernetes release of the node image.
	KubeVersion = testcluster.KubeVersion
	// KindVersion is the sigs.k8s.io/kind release whose CLI creates the
	// clusters and whose images/base files lay out the node image.
	KindVersion = "v0.33.0"
	// CoreDNSVersion is the CoreDNS release built from source; it is the
	// one kubeadm of KubeVersion deploys.
	CoreDNSVersion = "v1.14.2"
	// ContainerdVersion is the containerd release in the node (kubelet
	// 1.36 needs containerd 2; Debian bookworm ships 1.6).
	ContainerdVersion = "v2.4.2"
	// KubeRouterVersion is the kube-router release that is the clusters'
	// CNI and NetworkPolicy controller (the newest the module proxy serves).
	KubeRouterVersion = "v2.1.0"
	// DebianSuite is the Debian release of the node's root filesystem.
	DebianSuite = "bookworm"

	// NodeImage is the kind node image that Ensure builds.
	NodeImage = "onprem.dev/kind-node:" + KubeVersion
	// BaseImage is kind's "base" image (systemd, containerd, runc, CNI
	// plugins) built from a debootstrap root filesystem.
	BaseImage = "onprem.dev/kind-base:" + DebianSuite

	kindModule       = "sigs.k8s.io/kind"
	corednsModule    = "github.com/coredns/coredns"
	containerdModule = "github.com/containerd/containerd/v2"
	kubeModule       = "k8s.io/kubernetes"
	kubeRouterModule = "github.com/cloudnativelabs/kube-router/v2"

	// recipeLabel is the image label that holds the hash of everything an
	// image was built from.
	recipeLabel = "onprem.dev/kindcluster.recipe"
)

// hostPackages are the Debian packages Ensure installs on the host when
// they are missing.
var hostPackages = []string{"docker.io", "iptables", "debootstrap", "containerd", "runc", "jq"}

// Debian packages of the node's root filesystem: debootstrap's --include,
// then the ones installed with apt inside it.
var (
	rootfsInclude = []string{"systemd", "systemd-sysv", "dbus", "iptables", "iproute2", "ethtool", "socat",
		"util-linux", "mount", "kmod", "conntrack", "ebtables", "libseccomp2", "pigz", "ca-certificates",
		"procps", "containerd", "runc", "containernetworking-plugins", "busybox-static"}
	// ipset is kube-router's (its image is this root filesystem too).
	rootfsExtra = []string{"nftables", "e2fsprogs", "curl", "jq", "fuse-overlayfs", "ipset"}
)

// kubeNodeCommands are the Kubernetes commands the harness builds itself
// (the control plane's come from e2e/testcluster's cache).
var kubeNodeCommands = []string{"kubelet", "kubeadm", "kubectl", "kube-proxy"}

//go:embed assets/*
var assets embed.FS

//go:embed internal/pause/main.go
var pauseMain []byte

func asset(name string) string {
	b, err := assets.ReadFile("assets/" + name)
	if err != nil {
		panic(err) // embedded at build time: cannot happen
	}
	return string(b)
}

// Options configures Ensure.
type Options struct {
	// Log receives progress lines, printf style (testing.TB.Logf fits);
	// nil logs through slog.Default at Info level.
	Log func(format string, args ...any)
	// CacheDir is the harness's cache folder; the default is
	// $ONPREM_CACHE/kind, with ONPREM_CACHE defaulting to /var/cache/onprem.
	CacheDir string
}

// Toolchain is what Ensure prepared: the paths of the commands and the
// name of the node image.
type Toolchain struct {
	// Dir is the cache folder.
	Dir string
	// Kind is the kind CLI built from source.
	Kind string
	// Kubectl is kubectl of KubeVersion.
	Kubectl string
	// Docker is the docker CLI that kind uses.
	Docker string
	// NodeImage is the kind node image in the local docker.
	NodeImage string
	// DockerLog is dockerd's log when Ensure started dockerd itself.
	DockerLog string
}

// CacheDir returns the harness's default cache folder: $ONPREM_CACHE/kind,
// with ONPREM_CACHE defaulting to /var/cache/onprem.
func CacheDir() string {
	return filepath.Join(fsutil.CacheRoot(), "kind")
}

var (
	ensureMu     sync.Mutex
	ensureCached = map[string]*Toolchain{}
)

// Ensure prepares everything a kind cluster needs on this machine, building
// only what its cache lacks: the host's Debian packages, a running dockerd
// (with the runc-nosysres runtime where the host needs it), the node's root
// filesystem, kind's base image, the Kubernetes, CoreDNS, containerd, pause
// and kind binaries, the control-plane images and the node image. Every
// artifact is written under a temporary name and renamed into place, and a
// file lock keeps parallel test processes from building the same thing
// twice; a warm call only checks stamps and asks docker about the node
// image. It is safe to call from several goroutines.
func Ensure(ctx context.Context, opts Options) (*Toolchain, error) {
	dir := opts.CacheDir
	if dir == "" {
		dir = CacheDir()
	}
	logf := opts.Log
	if logf == nil {
		logf = func(format string, args ...any) { slog.Info(fmt.Sprintf(format, args...)) }
	}
	ensureMu.Lock()
	defer ensureMu.Unlock()
	if tc := ensureCached[dir]; tc != nil {
		return tc, nil
	}
	p, err := NewPlan(ctx, Options{Log: logf, CacheDir: dir})
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if steps := p.Steps(); len(steps) > 0 {
		if _, err := buildplan.Run(ctx, buildplan.Options{StateDir: buildplan.StateDir(), Log: logf}, steps...); err != nil {
			return nil, fmt.Errorf("kindcluster: preparing the toolchain: %w", err)
		}
	}
	tc := p.Toolchain()
	ensureCached[dir] = tc
	return tc, nil
}

type builder struct {
	dir  string
	logf func(string, ...any)

	goOnce  sync.Once
	goErr   error
	goEnv   []string // environment of the go commands
	goFlags string   // the machine's GOFLAGS without -mod

	docker    string // docker CLI
	dockerLog string
	cpRefs    []string // image references of the control-plane archive
}

func (b *builder) log(format string, args ...any) { b.logf("kindcluster: "+format, args...) }

func (b *builder) binDir() string         { return filepath.Join(b.dir, "bin") }
func (b *builder) bin(name string) string { return filepath.Join(b.binDir(), name) }
func (b *builder) rootfsTar() string      { return filepath.Join(b.dir, "rootfs-"+DebianSuite+".tar") }
func (b *builder) cpArchive() string      { return filepath.Join(b.dir, "images", "control-plane.tar") }

func (b *builder) toolchain() *Toolchain {
	return &Toolchain{
		Dir:       b.dir,
		Kind:      b.bin("kind"),
		Kubectl:   b.bin("kubectl"),
		Docker:    b.docker,
		NodeImage: NodeImage,
		DockerLog: b.dockerLog,
	}
}

// removeStale removes what killed builds left behind; the caller holds the
// lock, so no one else is building.
func (b *builder) removeStale() {
	for _, pattern := range []string{
		filepath.Join(b.binDir(), "*.tmp-*"),
		filepath.Join(b.binDir(), ".build-*"),
		filepath.Join(b.dir, "*.tmp-*"),
		filepath.Join(b.dir, "images", "*.tmp-*"),
	} {
		stale, _ := filepath.Glob(pattern)
		for _, f := range stale {
			_ = os.RemoveAll(f)
		}
	}
	if work, _ := filepath.Glob(filepath.Join(b.dir, "work", "*")); len(work) > 0 {
		for _, w := range work {
			// --one-file-system semantics: a killed rootfs build may have
			// left /proc mounted inside.
			_ = fsutil.UnmountUnder(w)
			_ = os.RemoveAll(w)
		}
	}
}

// stamp returns the version recorded next to path (path.version), or "".
func stamp(path string) string {
	b, err := os.ReadFile(path + ".version")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// present reports whether path exists, is not empty and carries the stamp
// version.
func present(path, version string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Size() > 0 && stamp(path) == version
}

// produce makes the files at paths (all in one folder) unless all of them
// are present with the stamp version: build writes files with the same base
// names into a temporary folder next to them; then, for each, the old file
// goes, the stamp is written and the new file is renamed into place (the
// file's presence with its stamp is what marks it complete).
func (b *builder) produce(ctx context.Context, version string, paths []string, build func(ctx context.Context, tmpDir string) error) (built bool, err error) {
	all := true
	for _, p := range paths {
		if !present(p, version) {
			all = false
		}
	}
	if all {
		return false, nil
	}
	dir := filepath.Dir(paths[0])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	tmp, err := os.MkdirTemp(dir, ".build-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	if err := build(ctx, tmp); err != nil {
		return false, err
	}
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return false, err
		}
		if err := fsutil.WriteFileAtomic(p+".version", []byte(version+"\n"), 0o644); err != nil {
			return false, err
		}
		if err := os.Rename(filepath.Join(tmp, filepath.Base(p)), p); err != nil {
			return false, fmt.Errorf("install %s: %w", filepath.Base(p), err)
		}
	}
	return true, nil
}

// record appends a line to build-times.txt in the cache folder, so that
// the measured cold times stay next to what they measure.
func (b *builder) record(what string, d time.Duration) {
	f, err := os.OpenFile(filepath.Join(b.dir, "build-times.txt"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s built in %s\n", time.Now().UTC().Format(time.RFC3339), what, d.Round(100*time.Millisecond))
}

// hashOf returns a short hex SHA-256 of parts.
func hashOf(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:20]
}

// binariesPresent reports whether every binary the node image or the
// harness uses is in the cache with its stamp.
func (b *builder) binariesPresent() bool {
	for name, version := range b.binaryVersions() {
		if !present(b.bin(name), version) {
			return false
		}
	}
	return true
}

// binaryVersions maps the harness's own binaries to their stamps.
func (b *builder) binaryVersions() map[string]string {
	m := map[string]string{
		"kind":                    kindModule + "@" + KindVersion,
		"coredns":                 corednsStamp(),
		"containerd":              containerdModule + "@" + ContainerdVersion,
		"containerd-shim-runc-v2": containerdModule + "@" + ContainerdVersion,
		"ctr":                     containerdModule + "@" + ContainerdVersion,
		"pause":                   "pause " + hashOf(string(pauseMain)),
		"kube-router":             kubeRouterModule + "@" + KubeRouterVersion,
	}
	for _, c := range kubeNodeCommands {
		m[c] = kubeModule + "@" + KubeVersion
	}
	return m
}
