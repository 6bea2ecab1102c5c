//go:build linux

package images

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/e2e/images/internal/sandbox"
)

// The pod tests run an image the way a kubelet would run the chart's pod:
// the chart is rendered, and its container's command, args, environment
// (Secrets resolved from the test's values), securityContext (user, group,
// fsGroup, read-only root) and volumes (persistent volumes as folders
// owned root:fsGroup 2775 with a lost+found, emptyDirs, Secret and
// ConfigMap files with the kubelet's modes) become a sandbox.Spec.

const testNamespace = "onprem"

// podOf renders chart with values and returns the pod template and volume
// claim names of its workload (a StatefulSet's, or a Deployment's) that
// runs container (a chart may have several: the runner's agent and
// engine).
func podOf(t *testing.T, chart, container string, values map[string]any) (corev1.PodTemplateSpec, []string, map[string]map[string]string) {
	t.Helper()
	c, err := charts.Load(chart)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := charts.Template(c, chart, testNamespace, values)
	if err != nil {
		t.Fatal(err)
	}
	var (
		pod    *corev1.PodTemplateSpec
		claims []string
	)
	// take keeps the first workload that runs container, else the last.
	take := func(tpl *corev1.PodTemplateSpec, cs []string) {
		if pod != nil && slices.ContainsFunc(pod.Spec.Containers, func(c corev1.Container) bool { return c.Name == container }) {
			return
		}
		pod, claims = tpl, cs
	}
	configMaps := map[string]map[string]string{}
	for _, m := range ms {
		for _, doc := range strings.Split(m.Content, "\n---") {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", m.Template, err)
			}
			switch meta.Kind {
			case "StatefulSet":
				var sts appsv1.StatefulSet
				if err := yaml.UnmarshalStrict([]byte(doc), &sts); err != nil {
					t.Fatalf("%s: %v", m.Template, err)
				}
				var cs []string
				for _, c := range sts.Spec.VolumeClaimTemplates {
					cs = append(cs, c.Name)
				}
				take(&sts.Spec.Template, cs)
			case "Deployment":
				var d appsv1.Deployment
				if err := yaml.UnmarshalStrict([]byte(doc), &d); err != nil {
					t.Fatalf("%s: %v", m.Template, err)
				}
				take(&d.Spec.Template, nil)
			case "ConfigMap":
				var cm corev1.ConfigMap
				if err := yaml.UnmarshalStrict([]byte(doc), &cm); err != nil {
					t.Fatalf("%s: %v", m.Template, err)
				}
				configMaps[cm.Name] = cm.Data
			}
		}
	}
	if pod == nil {
		t.Fatalf("chart %s renders no StatefulSet or Deployment", chart)
	}
	return *pod, claims, configMaps
}

// podIP is the pod's address (status.podIP): in the sandbox, a loopback
// address its hosts file gives the pod's own names.
const podIP = "127.0.1.1"

// expandRefs replaces $(NAME) in v with the value of NAME among the
// variables set before it, as the kubelet does; $$( stays a literal $(,
// and a reference to an unknown variable is left as it is.
func expandRefs(v string, env []string) string {
	var b strings.Builder
	for {
		i := strings.Index(v, "$")
		if i < 0 || i == len(v)-1 {
			b.WriteString(v)
			return b.String()
		}
		b.WriteString(v[:i])
		v = v[i:]
		switch {
		case strings.HasPrefix(v, "$$"):
			b.WriteString("$")
			v = v[2:]
		case strings.HasPrefix(v, "$("):
			end := strings.Index(v, ")")
			if end < 0 {
				b.WriteString(v)
				return b.String()
			}
			name := v[2:end]
			val, ok := "", false
			for _, kv := range env {
				if k, x, found := strings.Cut(kv, "="); found && k == name {
					val, ok = x, true
				}
			}
			if ok {
				b.WriteString(val)
			} else {
				b.WriteString(v[:end+1])
			}
			v = v[end+1:]
		default:
			b.WriteString("$")
			v = v[1:]
		}
	}
}

// pod is one container of a chart's pod running in a sandbox.
type pod struct {
	t         *testing.T
	sb        *sandbox.Sandbox
	container corev1.Container
	env       []string
	uid, gid  int
	// volumes maps the persistent volumes' names to their folders on this
	// machine (they survive a restart of the pod).
	volumes map[string]string
}

// podConfig is what a test gives runPod.
type podConfig struct {
	chart     string
	values    map[string]any
	container string
	name      string // the pod's name (hostname)
	secrets   map[string]map[string]string
	// root is the image unpacked; volumes the persistent volumes of an
	// earlier run (nil: fresh ones).
	root    string
	volumes map[string]string
	// args replaces the container's command+args (e.g. `traefik version`).
	args []string
}

// runPod starts the chart's container from the unpacked image at cfg.root.
func runPod(t *testing.T, img Image, cfg podConfig) *pod {
	t.Helper()
	tpl, claims, configMaps := podOf(t, cfg.chart, cfg.container, cfg.values)
	var c *corev1.Container
	for i := range tpl.Spec.Containers {
		if tpl.Spec.Containers[i].Name == cfg.container {
			c = &tpl.Spec.Containers[i]
		}
	}
	if c == nil {
		t.Fatalf("chart %s has no container %s", cfg.chart, cfg.container)
	}
	cf, err := img.Image.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	// Command and args, as the kubelet combines them with the image's.
	argv := append([]string(nil), cf.Config.Entrypoint...)
	args := cf.Config.Cmd
	if len(c.Command) > 0 {
		argv = append([]string(nil), c.Command...)
		args = nil
	}
	if len(c.Args) > 0 {
		args = c.Args
	}
	argv = append(argv, args...)
	if cfg.args != nil {
		argv = cfg.args
	}
	// Identity.
	psc, csc := tpl.Spec.SecurityContext, c.SecurityContext
	if psc == nil || csc == nil || csc.RunAsUser == nil || csc.RunAsGroup == nil {
		t.Fatalf("chart %s: container %s has no runAsUser/runAsGroup", cfg.chart, c.Name)
	}
	uid, gid := int(*csc.RunAsUser), int(*csc.RunAsGroup)
	var groups []int
	fsGroup := -1
	if psc.FSGroup != nil {
		fsGroup = int(*psc.FSGroup)
		groups = append(groups, fsGroup)
	}
	for _, g := range psc.SupplementalGroups {
		groups = append(groups, int(g))
	}
	groupOr := func(def int) int {
		if fsGroup >= 0 {
			return fsGroup
		}
		return def
	}
	// Environment: the image's, then the container's.
	// A container's variable replaces the image's of the same name.
	env := append([]string(nil), cf.Config.Env...)
	env = setEnv(env, "HOSTNAME", cfg.name)
	for _, e := range c.Env {
		v := e.Value
		if f := e.ValueFrom; f != nil && f.FieldRef != nil {
			// The downward API, for the fields the charts use.
			switch f.FieldRef.FieldPath {
			case "metadata.namespace":
				v = testNamespace
			case "metadata.name":
				v = cfg.name
			case "status.podIP":
				v = podIP
			default:
				t.Fatalf("env %s: field %s is not supported here", e.Name, f.FieldRef.FieldPath)
			}
		} else if e.ValueFrom != nil {
			ref := e.ValueFrom.SecretKeyRef
			if ref == nil {
				t.Fatalf("env %s: only values, secretKeyRef and fieldRef are supported here", e.Name)
			}
			s, ok := cfg.secrets[ref.Name][ref.Key]
			if !ok {
				t.Fatalf("env %s: the test gives no Secret %s key %s", e.Name, ref.Name, ref.Key)
			}
			v = s
		}
		env = setEnv(env, e.Name, expandRefs(v, env))
	}
	if !hasEnv(env, "HOME") {
		env = append(env, "HOME="+homeOf(t, cfg.root, uid))
	}
	// Volumes.
	dir := t.TempDir()
	hosts := filepath.Join(dir, "hosts")
	// The pod's names: its FQDN, the name.service.namespace that a real
	// pod resolves through its search domains, its hostname.
	writeFile(t, hosts, fmt.Sprintf("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s.%s-headless.%s.svc.cluster.local\t%[2]s.%[3]s-headless.%[4]s\t%[2]s\n",
		podIP, cfg.name, cfg.chart, testNamespace), 0o644)
	mounts := []sandbox.Mount{{Target: "/etc/hosts", Source: hosts}}
	volumes := cfg.volumes
	if volumes == nil {
		volumes = map[string]string{}
	}
	for _, vm := range c.VolumeMounts {
		if contains(claims, vm.Name) {
			host, ok := volumes[vm.Name]
			if !ok {
				// A fresh volume as the kubelet leaves it with fsGroup:
				// root:fsGroup, setgid, group-writable, and ext4's lost+found.
				host = filepath.Join(t.TempDir(), vm.Name)
				mkdir(t, host, 0o755|os.ModeSetgid|0o070, 0, groupOr(0))
				mkdir(t, filepath.Join(host, "lost+found"), 0o700, 0, 0)
				volumes[vm.Name] = host
			}
			mounts = append(mounts, sandbox.Mount{Target: vm.MountPath, Source: host, ReadOnly: vm.ReadOnly})
			continue
		}
		var vol *corev1.Volume
		for i := range tpl.Spec.Volumes {
			if tpl.Spec.Volumes[i].Name == vm.Name {
				vol = &tpl.Spec.Volumes[i]
			}
		}
		if vol == nil {
			t.Fatalf("chart %s: volumeMount %s has no volume", cfg.chart, vm.Name)
		}
		switch {
		case vol.EmptyDir != nil:
			mounts = append(mounts, sandbox.Mount{Target: vm.MountPath, Mode: 0o777 | os.ModeSetgid, GID: groupOr(0)})
		case vol.Secret != nil:
			data := cfg.secrets[vol.Secret.SecretName]
			mode := os.FileMode(0o644)
			if vol.Secret.DefaultMode != nil {
				mode = os.FileMode(*vol.Secret.DefaultMode)
			}
			if fsGroup >= 0 {
				mode |= 0o440 // the kubelet makes them group-readable
			}
			var files []sandbox.File
			if len(vol.Secret.Items) == 0 {
				for k, v := range data {
					files = append(files, sandbox.File{Name: k, Data: []byte(v), Mode: mode, GID: groupOr(0)})
				}
			}
			for _, it := range vol.Secret.Items {
				v, ok := data[it.Key]
				if !ok {
					t.Fatalf("volume %s: the test gives no Secret %s key %s", vm.Name, vol.Secret.SecretName, it.Key)
				}
				files = append(files, sandbox.File{Name: it.Path, Data: []byte(v), Mode: mode, GID: groupOr(0)})
			}
			mounts = append(mounts, sandbox.Mount{Target: vm.MountPath, Mode: 0o755, GID: groupOr(0), Files: files, ReadOnly: true})
		case vol.ConfigMap != nil:
			data, ok := configMaps[vol.ConfigMap.Name]
			if !ok {
				t.Fatalf("volume %s: the chart renders no ConfigMap %s", vm.Name, vol.ConfigMap.Name)
			}
			if vm.SubPath == "" {
				// The whole ConfigMap: one file per key, read-only.
				var files []sandbox.File
				for k, v := range data {
					files = append(files, sandbox.File{Name: k, Data: []byte(v), Mode: 0o644, GID: groupOr(0)})
				}
				mounts = append(mounts, sandbox.Mount{Target: vm.MountPath, Mode: 0o755, GID: groupOr(0), Files: files, ReadOnly: true})
				continue
			}
			f := filepath.Join(dir, "configmap-"+vm.Name+"-"+vm.SubPath)
			writeFile(t, f, data[vm.SubPath], 0o644)
			mounts = append(mounts, sandbox.Mount{Target: vm.MountPath, Source: f, ReadOnly: true})
		case vol.Projected != nil:
			t.Fatalf("volume %s: projected volumes are not supported here", vm.Name)
		default:
			t.Fatalf("volume %s: unsupported volume type", vm.Name)
		}
	}
	if tpl.Spec.AutomountServiceAccountToken != nil && *tpl.Spec.AutomountServiceAccountToken {
		// The service account's files; no API server answers.
		mounts = append(mounts, sandbox.Mount{Target: "/var/run/secrets/kubernetes.io/serviceaccount", Mode: 0o755, ReadOnly: true, Files: []sandbox.File{
			{Name: "token", Data: []byte("not-a-real-token"), Mode: 0o644},
			{Name: "namespace", Data: []byte(testNamespace), Mode: 0o644},
			{Name: "ca.crt", Data: nil, Mode: 0o644},
		}})
		env = setEnv(setEnv(env, "KUBERNETES_SERVICE_HOST", "127.0.0.1"), "KUBERNETES_SERVICE_PORT", "6443")
	}
	workDir := c.WorkingDir
	if workDir == "" {
		workDir = cf.Config.WorkingDir
	}
	spec := sandbox.Spec{
		Root:         cfg.root,
		ReadOnlyRoot: csc.ReadOnlyRootFilesystem != nil && *csc.ReadOnlyRootFilesystem,
		Hostname:     cfg.name,
		Args:         argv,
		Env:          env,
		Dir:          workDir,
		UID:          uid, GID: gid, Groups: groups,
		Mounts: mounts,
	}
	logPath := filepath.Join(os.TempDir(), fmt.Sprintf("onprem-images-%s-%s.log", cfg.name, randHex(4)))
	sb, err := sandbox.Start(spec, logPath)
	if err != nil {
		t.Fatal(err)
	}
	p := &pod{t: t, sb: sb, container: *c, env: env, uid: uid, gid: gid, volumes: volumes}
	t.Cleanup(func() {
		_ = sb.Stop(30 * time.Second)
		if t.Failed() {
			t.Logf("%s's output (%s):\n%s", cfg.name, logPath, tailFile(logPath, 60))
		} else {
			_ = os.Remove(logPath)
		}
		_ = os.Remove(logPath + ".spec.json")
	})
	t.Logf("pod %s: %s as %d:%d (groups %v), read-only root %v", cfg.name, strings.Join(argv, " "), uid, gid, groups, spec.ReadOnlyRoot)
	return p
}

// stop stops the pod with the image's stop signal semantics (SIGTERM to
// the program; images that want SIGINT get it from their entrypoint's
// server) and returns its exit error.
func (p *pod) stop() error { return p.sb.Stop(60 * time.Second) }

// output is what the program wrote so far.
func (p *pod) output() string {
	data, _ := os.ReadFile(p.sb.Log())
	return string(data)
}

// dial reaches the pod's loopback.
func (p *pod) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	return p.sb.Dial(ctx, network, addr)
}

// httpClient talks HTTP to the pod's loopback.
func (p *pod) httpClient() *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: p.dial, DisableKeepAlives: true}}
}

// probe runs a probe of the container once, the way the kubelet does.
func (p *pod) probe(ctx context.Context, pr *corev1.Probe) error {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(max(pr.TimeoutSeconds, 1)+2)*time.Second)
	defer cancel()
	port := func(ps intOrName) (int, error) { return p.port(ps) }
	switch {
	case pr.TCPSocket != nil:
		n, err := port(intOrName{pr.TCPSocket.Port.IntValue(), pr.TCPSocket.Port.StrVal})
		if err != nil {
			return err
		}
		c, err := p.dial(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(n)))
		if err != nil {
			return err
		}
		return c.Close()
	case pr.HTTPGet != nil:
		n, err := port(intOrName{pr.HTTPGet.Port.IntValue(), pr.HTTPGet.Port.StrVal})
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", n, pr.HTTPGet.Path), nil)
		if err != nil {
			return err
		}
		resp, err := p.httpClient().Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode < 200 || resp.StatusCode >= 400 {
			return fmt.Errorf("GET %s: %s", pr.HTTPGet.Path, resp.Status)
		}
		return nil
	case pr.Exec != nil:
		out, err := p.sb.Exec(ctx, p.uid, p.gid, p.env, pr.Exec.Command...)
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(pr.Exec.Command, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return fmt.Errorf("probe with no handler")
}

type intOrName struct {
	n    int
	name string
}

func (p *pod) port(ps intOrName) (int, error) {
	if ps.name == "" {
		return ps.n, nil
	}
	for _, cp := range p.container.Ports {
		if cp.Name == ps.name {
			return int(cp.ContainerPort), nil
		}
	}
	return 0, fmt.Errorf("no container port named %s", ps.name)
}

// waitProbes waits until the container's startup, readiness and liveness
// probes all pass (each once, in that order), failing the test with the
// program's output when it exits or time runs out.
func (p *pod) waitProbes(timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for _, named := range []struct {
		name string
		pr   *corev1.Probe
	}{{"startup", p.container.StartupProbe}, {"readiness", p.container.ReadinessProbe}, {"liveness", p.container.LivenessProbe}} {
		if named.pr == nil {
			continue
		}
		for {
			err := p.probe(context.Background(), named.pr)
			if err == nil {
				break
			}
			select {
			case <-p.sb.Done():
				p.t.Fatalf("%s exited (%v) before its %s probe passed (%v); output:\n%s", p.container.Name, p.sb.Err(), named.name, err, tail(p.output(), 60))
			default:
			}
			if time.Now().After(deadline) {
				p.t.Fatalf("%s: %s probe still failing after %s: %v; output:\n%s", p.container.Name, named.name, timeout, err, tail(p.output(), 60))
			}
			time.Sleep(300 * time.Millisecond)
		}
	}
}

// waitExit waits for the program to exit and returns its output.
func (p *pod) waitExit(timeout time.Duration) (string, error) {
	select {
	case <-p.sb.Done():
		return p.output(), p.sb.Err()
	case <-time.After(timeout):
		p.t.Fatalf("%s still running after %s; output:\n%s", p.container.Name, timeout, tail(p.output(), 40))
		return "", nil
	}
}

var (
	unpackMu   sync.Mutex
	unpackRoot string
	unpacked   = map[string]string{}
)

// unpack returns a folder holding the image's file system, unpacked once
// per test binary (the sandboxes only add mount points to it) and removed
// when the tests end (cleanupUnpacked).
func unpack(t *testing.T, img Image) string {
	t.Helper()
	d, err := img.Image.Digest()
	if err != nil {
		t.Fatal(err)
	}
	unpackMu.Lock()
	defer unpackMu.Unlock()
	if dir, ok := unpacked[d.Hex]; ok {
		return dir
	}
	if unpackRoot == "" {
		if unpackRoot, err = os.MkdirTemp("", "onprem-images-rootfs-"); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(unpackRoot, img.Name+"-"+d.Hex[:12])
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := sandbox.Unpack(img.Image, dir); err != nil {
		t.Fatalf("unpacking %s: %v", img.Name, err)
	}
	t.Logf("unpacked %s in %s", img.Name, time.Since(t0).Round(time.Millisecond))
	unpacked[d.Hex] = dir
	return dir
}

func cleanupUnpacked() {
	if unpackRoot != "" {
		_ = os.RemoveAll(unpackRoot)
	}
}

// homeOf is uid's home in the image's /etc/passwd ("/" when it has none),
// which the container runtime sets as HOME.
func homeOf(t *testing.T, root string, uid int) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		return "/"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) >= 6 && fs[2] == strconv.Itoa(uid) {
			return fs[5]
		}
	}
	return "/"
}

// setEnv sets name in env, in place of an earlier value.
func setEnv(env []string, name, value string) []string {
	for i, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			env[i] = name + "=" + value
			return env
		}
	}
	return append(env, name+"="+value)
}

func hasEnv(env []string, name string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func mkdir(t *testing.T, path string, mode os.FileMode, uid, gid int) {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no output: %v)", err)
	}
	return tail(string(data), n)
}
