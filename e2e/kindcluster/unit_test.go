//go:build linux

package kindcluster

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

// TestWriteImageArchive checks the images WriteImageArchive makes without
// any tool: references, entrypoint, platform and the files in the layer.
func TestWriteImageArchive(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "app")
	if err := os.WriteFile(src, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "images.tar")
	err := WriteImageArchive(archive,
		ImageSpec{Ref: "onprem.dev/app:v1", Files: []File{{Path: "/usr/local/bin/app", Source: src}, {Path: "etc/app.conf", Data: []byte("x=1\n")}},
			Entrypoint: []string{"/usr/local/bin/app"}, Env: []string{"A=b"}},
		ImageSpec{Ref: "registry.k8s.io/pause:3.10.2", Files: []File{{Path: "/pause", Data: []byte("p"), Mode: 0o755}}, Entrypoint: []string{"/pause"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("onprem.dev/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture == "" || strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/app" ||
		!strings.HasPrefix(cf.Config.Env[0], "PATH=") || cf.Config.Env[1] != "A=b" {
		t.Fatalf("config: os %q arch %q entrypoint %v env %v", cf.OS, cf.Architecture, cf.Config.Entrypoint, cf.Config.Env)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got[h.Name] = h.FileInfo().Mode().String() + " " + string(data)
	}
	for name, want := range map[string]string{
		"tmp/":              "dtrwxrwxrwx ",
		"usr/local/bin/":    "drwxr-xr-x ",
		"usr/local/bin/app": "-rwxr-xr-x #!binary",
		"etc/app.conf":      "-rw-r--r-- x=1\n",
	} {
		if got[name] != want {
			t.Errorf("layer entry %s = %q, want %q (all: %v)", name, got[name], want, got)
		}
	}
	pauseTag, _ := name.NewTag("registry.k8s.io/pause:3.10.2")
	if _, err := tarball.ImageFromPath(archive, &pauseTag); err != nil {
		t.Errorf("second image: %v", err)
	}
}

func TestMirrorFrom(t *testing.T) {
	deb822 := "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n" +
		"Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
	if got := mirrorFrom(deb822, true); got != "http://mirror.example/debian" {
		t.Errorf("deb822: %q", got)
	}
	oneLine := "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://other.example/x nodistro main\n" +
		"deb [signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n"
	if got := mirrorFrom(oneLine, false); got != "http://mirror.example/debian" {
		t.Errorf("one-line: %q", got)
	}
	if got := mirrorFrom("deb http://x.example/debian trixie main\n", false); got != "" {
		t.Errorf("other suite: %q", got)
	}
}

func TestNodeContainerdConfig(t *testing.T) {
	in := "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.10\"\n  restrict_oom_score_adj = false\n"
	out, err := nodeContainerdConfig(in, "registry.k8s.io/pause:3.10.2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "  sandbox_image = \"registry.k8s.io/pause:3.10.2\"\n") || !strings.Contains(out, "  restrict_oom_score_adj = true") {
		t.Errorf("config:\n%s", out)
	}
	if _, err := nodeContainerdConfig("version = 2\n", "p"); err == nil {
		t.Error("a config without the settings was accepted")
	}
}

func TestRegistryHostsTOML(t *testing.T) {
	got := registryHostsTOML("172.18.0.1:5000")
	want := "server = \"http://172.18.0.1:5000\"\n\n[host.\"http://172.18.0.1:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
	if got != want {
		t.Errorf("hosts.toml:\n%s\nwant:\n%s", got, want)
	}
}

// kube-router's manifest, as kind applies it from the node image: the five
// objects, the preloaded image never pulled, the CNI configuration written
// by the init container, and the start script finding the API server in
// the node's kubelet.conf.
func TestKubeRouterManifest(t *testing.T) {
	m, err := kubeRouterManifest()
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	var ds *appsv1.DaemonSet
	for _, doc := range strings.Split(m, "---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		kinds = append(kinds, meta.Kind)
		if meta.Kind == "DaemonSet" {
			ds = &appsv1.DaemonSet{}
			if err := yaml.UnmarshalStrict([]byte(doc), ds); err != nil {
				t.Fatal(err)
			}
		}
	}
	if want := []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet"}; !slices.Equal(kinds, want) {
		t.Fatalf("manifest kinds %v, want %v", kinds, want)
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || len(spec.InitContainers) != 1 || len(spec.Containers) != 1 {
		t.Fatalf("DaemonSet pod spec: %+v", spec)
	}
	for _, c := range append(spec.InitContainers, spec.Containers...) {
		if c.Image != KubeRouterImage || c.ImagePullPolicy != corev1.PullNever {
			t.Errorf("container %s: image %s, pull %s; want the preloaded %s, never pulled", c.Name, c.Image, c.ImagePullPolicy, KubeRouterImage)
		}
	}
	if !slices.Contains(spec.InitContainers[0].Command, kubeRouterCNIConf) {
		t.Errorf("init container does not write %s: %v", kubeRouterCNIConf, spec.InitContainers[0].Command)
	}
	if !slices.Contains(spec.Containers[0].Args, "--run-firewall=true") {
		t.Errorf("kube-router does not enforce NetworkPolicies: %v", spec.Containers[0].Args)
	}

	dir := t.TempDir()
	conf := filepath.Join(dir, "kubelet.conf")
	script := strings.NewReplacer("/etc/kubernetes/kubelet.conf", conf,
		"exec /usr/local/bin/kube-router", `echo "$KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT"`).Replace(kubeRouterStart)
	run := func() (string, error) {
		out, err := exec.Command("sh", "-c", script, "kube-router", "--run-router=true").CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	if err := os.WriteFile(conf, []byte("apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: AAAA\n    server: https://onprem-1a2b3c4d-control-plane:6443\n  name: kind\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err != nil || out != "onprem-1a2b3c4d-control-plane 6443 --run-router=true" {
		t.Errorf("start script with a kubelet.conf: %q, %v; want the control plane's host and port, then the arguments", out, err)
	}
	if err := os.WriteFile(conf, []byte("apiVersion: v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(); err == nil || !strings.Contains(out, "no API server") {
		t.Errorf("start script without a server: %q, %v; want a failure that says so", out, err)
	}
}

// cniReady: ready only when kube-router's current version is available on
// every node; a container that keeps restarting is an error at once.
func TestCNIReady(t *testing.T) {
	ctx := context.Background()
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: kubeRouterName, Namespace: kubeRouterNS, Generation: 2},
		Status: appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 2, NumberAvailable: 2}}
	pod := func(restarts int32) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-router-abcde", Namespace: kubeRouterNS, Labels: map[string]string{"k8s-app": kubeRouterName}},
			Spec:       corev1.PodSpec{NodeName: "onprem-1-worker"},
			Status:     corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: kubeRouterName, RestartCount: restarts}}},
		}
	}
	for _, tc := range []struct {
		name     string
		change   func(*appsv1.DaemonSet)
		restarts int32
		ready    bool
		why, err string
	}{
		{name: "available everywhere", ready: true},
		{name: "one node short", change: func(d *appsv1.DaemonSet) { d.Status.NumberAvailable = 1 }, why: "1 of 2 nodes have it available"},
		{name: "rollout not seen yet", change: func(d *appsv1.DaemonSet) { d.Generation = 3 }, why: "run its current version"},
		{name: "rollout under way", change: func(d *appsv1.DaemonSet) { d.Status.UpdatedNumberScheduled = 1 }, why: "1 of 2 nodes run its current version"},
		{name: "crash loop", restarts: kubeRouterMaxRestarts, err: "container kube-router of pod kube-router-abcde on node onprem-1-worker restarted 4 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := ds.DeepCopy()
			if tc.change != nil {
				tc.change(d)
			}
			cs := fake.NewSimpleClientset(d, pod(tc.restarts))
			ok, why, err := cniReady(ctx, cs, 2)
			if ok != tc.ready || !strings.Contains(why, tc.why) || (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("cniReady = %v, %q, %v; want %v, %q, an error saying %q", ok, why, err, tc.ready, tc.why, tc.err)
			}
		})
	}
}

// waitUntilReady: when the deadline cuts a round's requests short, the
// error names why the cluster was not ready (the round before's finding),
// not the request the deadline interrupted: one that ran into the
// deadline, or one client-go's rate limiter refused because it would
// have ended after it (before the context itself ends).
func TestWaitUntilReadyKeepsTheReason(t *testing.T) {
	for name, cut := range map[string]func(ctx context.Context) error{
		"deadline": func(ctx context.Context) error {
			<-ctx.Done()
			return fmt.Errorf("Get %q: %w", "https://127.0.0.1/apis/apps/v1/namespaces/kube-system/daemonsets/kube-router", ctx.Err())
		},
		"rate limiter": func(context.Context) error {
			return errors.New("client rate limiter Wait returned an error: rate: Wait(n=1) would exceed context deadline")
		},
	} {
		t.Run(name, func(t *testing.T) {
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: kubeRouterName, Namespace: kubeRouterNS, Generation: 1},
				Status: appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 2, UpdatedNumberScheduled: 1, NumberAvailable: 1}}
			node := func(n string) *corev1.Node { return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}} }
			cs := fake.NewSimpleClientset(ds, node("onprem-1-control-plane"), node("onprem-1-worker"))
			ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
			defer cancel()
			var gets atomic.Int32
			cs.PrependReactor("get", "daemonsets", func(k8stesting.Action) (bool, runtime.Object, error) {
				if gets.Add(1) == 1 {
					return false, nil, nil
				}
				return true, nil, cut(ctx)
			})
			c := &Cluster{Name: "onprem-1", Nodes: []string{"onprem-1-control-plane", "onprem-1-worker"}, Client: cs, logf: t.Logf}
			err := c.waitUntilReady(ctx)
			if err == nil || !strings.Contains(err.Error(), "kube-router (the CNI): 1 of 2 nodes run its current version") || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("waitUntilReady = %v; want the deadline and the reason the round before found", err)
			}
		})
	}
}
