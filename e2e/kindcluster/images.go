//go:build linux

package kindcluster

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/internal/fsutil"
)

// nodeLayoutVersion changes whenever the way the node image is assembled
// changes in a way the hashed inputs do not show.
const nodeLayoutVersion = "node-layout-2"

// ensureRootfs builds the node's Debian root filesystem with debootstrap
// and caches it as a tarball.
func (b *builder) ensureRootfs(ctx context.Context) error {
	t0 := time.Now()
	built, err := b.produce(ctx, b.rootfsVersion(), []string{b.rootfsTar()}, func(ctx context.Context, tmp string) error {
		work := filepath.Join(b.dir, "work", fmt.Sprintf("rootfs-%d", os.Getpid()))
		if err := os.MkdirAll(work, 0o755); err != nil {
			return err
		}
		defer func() {
			_ = fsutil.UnmountUnder(work)
			_ = os.RemoveAll(work)
		}()
		mirror, err := debianMirror()
		if err != nil {
			return err
		}
		b.log("[rootfs] debootstrap %s from %s (about a minute and a half)", DebianSuite, mirror)
		return b.runCmd(ctx, "rootfs", cmdOpts{}, "bash", "-c", asset("rootfs.sh"), "rootfs.sh",
			work, mirror, DebianSuite, filepath.Join(tmp, filepath.Base(b.rootfsTar())),
			strings.Join(rootfsInclude, ","), strings.Join(rootfsExtra, " "))
	})
	if built {
		b.record("rootfs "+DebianSuite, time.Since(t0))
	}
	return err
}

func (b *builder) rootfsVersion() string {
	return DebianSuite + " " + hashOf(asset("rootfs.sh"), strings.Join(rootfsInclude, ","), strings.Join(rootfsExtra, " "))
}

// debianMirror is $ONPREM_DEBIAN_MIRROR, or the mirror apt uses for
// DebianSuite on this machine; there is no built-in host (a machine behind
// a firewall reaches only its own mirror).
func debianMirror() (string, error) {
	if m := os.Getenv("ONPREM_DEBIAN_MIRROR"); m != "" {
		return m, nil
	}
	var files []string
	files = append(files, "/etc/apt/sources.list")
	more, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	files = append(files, more...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if m := mirrorFrom(string(data), strings.HasSuffix(f, ".sources")); m != "" {
			return m, nil
		}
	}
	return "", fmt.Errorf("no Debian mirror: this machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d) name none for %s; set ONPREM_DEBIAN_MIRROR to the mirror's URL", DebianSuite)
}

// mirrorFrom finds the URI that serves DebianSuite in an apt sources file,
// one-line (deb URI SUITE COMPONENTS) or deb822 (URIs:, Suites:).
func mirrorFrom(data string, deb822 bool) string {
	if !deb822 {
		for _, line := range strings.Split(data, "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "deb" {
				continue
			}
			f = f[1:]
			if strings.HasPrefix(f[0], "[") {
				for len(f) > 0 && !strings.HasSuffix(f[0], "]") {
					f = f[1:]
				}
				if len(f) > 0 {
					f = f[1:]
				}
			}
			if len(f) >= 2 && f[1] == DebianSuite {
				return f[0]
			}
		}
		return ""
	}
	for _, block := range strings.Split(data, "\n\n") {
		var uris, suites []string
		for _, line := range strings.Split(block, "\n") {
			if v, ok := strings.CutPrefix(line, "URIs:"); ok {
				uris = strings.Fields(v)
			}
			if v, ok := strings.CutPrefix(line, "Suites:"); ok {
				suites = strings.Fields(v)
			}
		}
		for _, s := range suites {
			if s == DebianSuite && len(uris) > 0 {
				return uris[0]
			}
		}
	}
	return ""
}

// kindDir is the kind module's folder in the module cache (its
// images/base/files lay out the base image).
func (b *builder) kindDir(ctx context.Context) (string, error) {
	info, err := b.download(ctx, kindModule+"@"+KindVersion)
	if err != nil {
		return "", err
	}
	return info.Dir, nil
}

func (b *builder) baseImageHash() string {
	return hashOf(stamp(b.rootfsTar()), asset("kind-base.sh"), KindVersion)
}

// imageLabel returns the recipe label of a local docker image, or "" when
// docker does not have the image.
func (b *builder) imageLabel(ctx context.Context, ref string) string {
	out, err := output(ctx, b.docker, "image", "inspect", "--format", `{{index .Config.Labels "`+recipeLabel+`"}}`, ref)
	if err != nil {
		return ""
	}
	return out
}

func (b *builder) imageStamp(name string) string {
	return filepath.Join(b.dir, "images", name+".stamp")
}

// imageCurrent reports whether docker has ref built from hash: both its
// label and the stamp file say so.
func (b *builder) imageCurrent(ctx context.Context, name, ref, hash string) bool {
	data, err := os.ReadFile(b.imageStamp(name))
	if err != nil || strings.TrimSpace(string(data)) != hash {
		return false
	}
	return b.imageLabel(ctx, ref) == hash
}

func (b *builder) writeImageStamp(name, hash string) error {
	if err := os.MkdirAll(filepath.Dir(b.imageStamp(name)), 0o755); err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(b.imageStamp(name), []byte(hash+"\n"), 0o644)
}

// ensureBaseImage builds kind's base image from the root filesystem
// tarball: kind's images/base/files and settings (assets/kind-base.sh),
// then docker import.
func (b *builder) ensureBaseImage(ctx context.Context) error {
	hash := b.baseImageHash()
	if b.imageCurrent(ctx, "base-image", BaseImage, hash) {
		return nil
	}
	t0 := time.Now()
	kindDir, err := b.kindDir(ctx)
	if err != nil {
		return err
	}
	work := filepath.Join(b.dir, "work", fmt.Sprintf("base-%d", os.Getpid()))
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := b.runCmd(ctx, "base-image", cmdOpts{}, "tar", "--numeric-owner", "-C", work, "-xf", b.rootfsTar()); err != nil {
		return err
	}
	if err := b.runCmd(ctx, "base-image", cmdOpts{}, "bash", "-c", asset("kind-base.sh"), "kind-base.sh",
		work, filepath.Join(kindDir, "images", "base", "files")); err != nil {
		return err
	}
	script := `set -euo pipefail; tar --numeric-owner -C "$1" -c . | "$2" import ` +
		`-c 'ENV container=docker' -c 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' ` +
		`-c "LABEL $3=$4" - "$5"`
	if err := b.runCmd(ctx, "base-image", cmdOpts{}, "bash", "-c", script, "import", work, b.docker, recipeLabel, hash, BaseImage); err != nil {
		return err
	}
	if err := b.writeImageStamp("base-image", hash); err != nil {
		return err
	}
	b.record("base image "+BaseImage, time.Since(t0))
	return nil
}

// imageRefs asks kubeadm which images a cluster of KubeVersion runs.
func (b *builder) imageRefs(ctx context.Context) ([]string, error) {
	out, err := output(ctx, b.bin("kubeadm"), "config", "images", "list", "--kubernetes-version", KubeVersion)
	if err != nil {
		return nil, err
	}
	var refs []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		if r := strings.TrimSpace(sc.Text()); r != "" {
			refs = append(refs, r)
		}
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("kubeadm config images list printed no image")
	}
	return refs, nil
}

// controlPlaneSpecs maps kubeadm's image references to images made from
// the cached binaries.
func (b *builder) controlPlaneSpecs(ctx context.Context, refs []string) ([]ImageSpec, []string, error) {
	cp, err := testcluster.ControlPlaneBinaries(ctx, b.logf)
	if err != nil {
		return nil, nil, err
	}
	bins := map[string]string{
		"kube-apiserver":          cp.KubeAPIServer,
		"kube-controller-manager": cp.KubeControllerManager,
		"kube-scheduler":          cp.KubeScheduler,
		"etcd":                    cp.Etcd,
		"kube-proxy":              b.bin("kube-proxy"),
		"coredns":                 b.bin("coredns"),
		"pause":                   b.bin("pause"),
	}
	var specs []ImageSpec
	var inputs []string
	for _, ref := range refs {
		repo := ref
		if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
			repo = repo[:i]
		}
		short := repo[strings.LastIndex(repo, "/")+1:]
		src, ok := bins[short]
		if !ok {
			return nil, nil, fmt.Errorf("kubeadm wants image %s, which the harness does not build", ref)
		}
		inputs = append(inputs, ref, stamp(src))
		spec := ImageSpec{Ref: ref}
		switch short {
		case "coredns", "pause":
			spec.Files = []File{{Path: "/" + short, Source: src}}
			spec.Entrypoint = []string{"/" + short}
		case "kube-proxy":
			// kube-proxy runs iptables/nft: it gets the node's Debian
			// root filesystem under it.
			spec.BaseTar = b.rootfsTar()
			inputs = append(inputs, stamp(b.rootfsTar()))
			spec.Files = []File{{Path: "/usr/local/bin/kube-proxy", Source: src}}
			spec.Entrypoint = []string{"/usr/local/bin/kube-proxy"}
		default:
			spec.Files = []File{{Path: "/usr/local/bin/" + short, Source: src}}
			spec.Entrypoint = []string{"/usr/local/bin/" + short}
		}
		specs = append(specs, spec)
	}
	// kube-router, the CNI, runs iptables, ipset and ip too.
	specs = append(specs, ImageSpec{
		Ref:        KubeRouterImage,
		BaseTar:    b.rootfsTar(),
		Files:      []File{{Path: "/usr/local/bin/kube-router", Source: b.bin("kube-router")}},
		Entrypoint: []string{"/usr/local/bin/kube-router"},
	})
	inputs = append(inputs, KubeRouterImage, stamp(b.bin("kube-router")), stamp(b.rootfsTar()))
	return specs, inputs, nil
}

// ensureControlPlaneImages writes images/control-plane.tar: every image
// kubeadm needs, made from the cached binaries with go-containerregistry.
func (b *builder) ensureControlPlaneImages(ctx context.Context) error {
	refs, err := b.imageRefs(ctx)
	if err != nil {
		return err
	}
	specs, inputs, err := b.controlPlaneSpecs(ctx, refs)
	if err != nil {
		return err
	}
	b.cpRefs = append(refs, KubeRouterImage)
	version := hashOf(append([]string{nodeLayoutVersion}, inputs...)...)
	t0 := time.Now()
	built, err := b.produce(ctx, version, []string{b.cpArchive()}, func(ctx context.Context, tmp string) error {
		b.log("[control-plane-images] packing %s", strings.Join(b.cpRefs, " "))
		return WriteImageArchive(filepath.Join(tmp, filepath.Base(b.cpArchive())), specs...)
	})
	if built {
		b.record("control-plane images", time.Since(t0))
	}
	return err
}

// pauseRef is kubeadm's pause image among the control-plane images.
func (b *builder) pauseRef() (string, error) {
	for _, r := range b.cpRefs {
		if strings.Contains(r, "/pause:") {
			return r, nil
		}
	}
	return "", fmt.Errorf("no pause image among %v", b.cpRefs)
}

// nodeImageHash hashes everything the node image is made of, from the
// stamps in the cache: a warm Ensure compares it with the node image's
// label and stamp file and builds nothing.
func (b *builder) nodeImageHash() (string, bool) {
	cni, err := kubeRouterManifest()
	if err != nil {
		return "", false
	}
	parts := []string{nodeLayoutVersion, KubeVersion, b.baseImageHash(), stamp(b.cpArchive()), storageManifest(), cni}
	if stamp(b.cpArchive()) == "" || stamp(b.rootfsTar()) == "" {
		return "", false
	}
	versions := b.binaryVersions()
	var names []string
	for n := range versions {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		parts = append(parts, n, stamp(b.bin(n)))
	}
	return hashOf(parts...), true
}

// nodeImageCurrent reports whether docker has the node image built from
// the cached inputs.
func (b *builder) nodeImageCurrent(ctx context.Context) (bool, string) {
	hash, ok := b.nodeImageHash()
	if !ok {
		return false, ""
	}
	return b.imageCurrent(ctx, "node-image", NodeImage, hash), hash
}

// ensureNodeImage assembles the node image from the base image: containerd
// 2, kubelet, kubeadm and kubectl, kind's /kind files, the StorageClass, a
// containerd configuration for this host, kube-router's manifest as kind's
// default CNI, and every control-plane image (and kube-router's) preloaded
// into the node's containerd. It carries no CNI configuration: kube-router
// writes it when it starts (cni.go).
func (b *builder) ensureNodeImage(ctx context.Context) error {
	current, hash := b.nodeImageCurrent(ctx)
	if current {
		return nil
	}
	if hash == "" {
		return fmt.Errorf("node image inputs are incomplete")
	}
	t0 := time.Now()
	kindDir, err := b.kindDir(ctx)
	if err != nil {
		return err
	}
	pause, err := b.pauseRef()
	if err != nil {
		return err
	}
	cni, err := kubeRouterManifest()
	if err != nil {
		return err
	}
	ctrCfg, err := os.ReadFile(filepath.Join(kindDir, "images", "base", "files", "etc", "containerd", "config.toml"))
	if err != nil {
		return err
	}
	cfg, err := nodeContainerdConfig(string(ctrCfg), pause)
	if err != nil {
		return err
	}

	const step = "node-image"
	docker := func(args ...string) error { return b.runCmd(ctx, step, cmdOpts{}, b.docker, args...) }
	var cidBuf bytes.Buffer
	if err := b.runCmd(ctx, step, cmdOpts{stdout: &cidBuf}, b.docker, "run", "-d", "--entrypoint", "sleep", BaseImage, "infinity"); err != nil {
		return err
	}
	cid := strings.TrimSpace(cidBuf.String())
	defer func() {
		_ = b.runCmd(context.WithoutCancel(ctx), step, cmdOpts{quiet: true}, b.docker, "rm", "-f", cid)
	}()

	// Debian's containerd 1.6 links make way for containerd 2.
	if err := docker("exec", cid, "sh", "-c", "rm -f /usr/local/bin/containerd /usr/local/bin/containerd-shim-runc-v2 /usr/local/bin/ctr && mkdir -p /kind/manifests /etc/cni/net.d"); err != nil {
		return err
	}
	var files []File
	for _, n := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		files = append(files, File{Path: "/usr/local/bin/" + n, Source: b.bin(n)})
	}
	for _, n := range []string{"kubelet", "kubeadm", "kubectl"} {
		files = append(files, File{Path: "/usr/bin/" + n, Source: b.bin(n)})
	}
	files = append(files,
		File{Path: "/kind/version", Data: []byte(KubeVersion)},
		File{Path: "/kind/manifests/default-cni.yaml", Data: []byte(cni)},
		File{Path: "/kind/manifests/default-storage.yaml", Data: []byte(storageManifest())},
		File{Path: "/etc/containerd/config.toml", Data: []byte(cfg)},
	)
	layer, err := filesOnlyTar(files)
	if err != nil {
		return err
	}
	if err := b.runCmd(ctx, step, cmdOpts{stdin: bytes.NewReader(layer)}, b.docker, "cp", "-", cid+":/"); err != nil {
		return err
	}

	// Preload the control-plane images with the node's own containerd:
	// content only (kind's node images do the same), pinned so that the
	// kubelet's image GC never removes them.
	startCtr := `nohup containerd >/tmp/containerd.log 2>&1 &
for i in $(seq 120); do [ -S /run/containerd/containerd.sock ] && ctr version >/dev/null 2>&1 && exit 0; sleep 0.5; done
cat /tmp/containerd.log; exit 1`
	if err := docker("exec", cid, "bash", "-c", startCtr); err != nil {
		return err
	}
	archive, err := os.Open(b.cpArchive())
	if err != nil {
		return err
	}
	err = b.runCmd(ctx, step, cmdOpts{stdin: archive}, b.docker, "exec", "-i", cid, "ctr", "-n", "k8s.io", "images", "import",
		"--label=io.cri-containerd.pinned=pinned", "--all-platforms", "--no-unpack", "--digests", "-")
	archive.Close()
	if err != nil {
		return err
	}
	var ls bytes.Buffer
	if err := b.runCmd(ctx, step, cmdOpts{stdout: &ls}, b.docker, "exec", cid, "ctr", "-n", "k8s.io", "images", "ls", "-q"); err != nil {
		return err
	}
	for _, r := range b.cpRefs {
		if !strings.Contains("\n"+ls.String()+"\n", "\n"+r+"\n") {
			return fmt.Errorf("image %s missing from the node's containerd after import; it has:\n%s", r, ls.String())
		}
	}
	stopCtr := `pkill -x containerd; for i in $(seq 60); do pgrep -x containerd >/dev/null || break; sleep 0.5; done
rm -rf /tmp/* /run/containerd`
	if err := docker("exec", cid, "bash", "-c", stopCtr); err != nil {
		return err
	}

	tmpRef := fmt.Sprintf("%s-tmp-%d", NodeImage, os.Getpid())
	if err := docker("commit", "-c", `ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]`, "-c", "CMD []",
		"-c", "ENV container=docker", cid, tmpRef); err != nil {
		return err
	}
	// docker commit does not take STOPSIGNAL (systemd stops on
	// SIGRTMIN+3): a legacy one-line build adds it and the recipe label.
	dockerfile := fmt.Sprintf("FROM %s\nSTOPSIGNAL SIGRTMIN+3\nLABEL %s=%s\n", tmpRef, recipeLabel, hash)
	buildErr := b.runCmd(ctx, step, cmdOpts{stdin: strings.NewReader(dockerfile), env: []string{"DOCKER_BUILDKIT=0"}},
		b.docker, "build", "-q", "-t", NodeImage, "-")
	_ = b.runCmd(ctx, step, cmdOpts{quiet: true}, b.docker, "rmi", tmpRef)
	if buildErr != nil {
		return buildErr
	}
	if err := b.writeImageStamp("node-image", hash); err != nil {
		return err
	}
	b.record("node image "+NodeImage, time.Since(t0))
	return nil
}

// nodeContainerdConfig adapts kind's containerd configuration: the sandbox
// image is the locally built pause, and oom_score_adj is restricted
// (quirk 2: the host refuses negative values inside the node).
func nodeContainerdConfig(kindCfg, pauseRef string) (string, error) {
	var out []string
	sandbox, oom := false, false
	for _, line := range strings.Split(kindCfg, "\n") {
		trimmed := strings.TrimSpace(line)
		indent := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		switch {
		case strings.HasPrefix(trimmed, "sandbox_image ="):
			line, sandbox = fmt.Sprintf("%ssandbox_image = %q", indent, pauseRef), true
		case strings.HasPrefix(trimmed, "restrict_oom_score_adj ="):
			line, oom = indent+"restrict_oom_score_adj = true", true
		}
		out = append(out, line)
	}
	if !sandbox || !oom {
		return "", fmt.Errorf("kind's containerd config.toml has no sandbox_image or restrict_oom_score_adj setting")
	}
	return strings.Join(out, "\n"), nil
}

// filesOnlyTar is a tarball of files (no folder entries, so the folders
// they land in keep their owner and mode), owned by root.
func filesOnlyTar(files []File) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		data, mode := f.Data, f.Mode
		if f.Source != "" {
			var err error
			if data, err = os.ReadFile(f.Source); err != nil {
				return nil, err
			}
			if mode == 0 {
				mode = 0o755
			}
		} else if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(f.Path, "/"), Mode: int64(mode.Perm()),
			Size: int64(len(data)), ModTime: time.Now()}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
