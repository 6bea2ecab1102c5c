//go:build linux

package kindcluster

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/cluster"

	"onprem.dev/onprem/e2e/internal/cmdout"
)

const (
	// SkipEnv, set to 1, skips the kind tests (CI never sets it).
	SkipEnv = "ONPREM_SKIP_KIND"
	// KeepEnv, set to 1, keeps clusters after their test; the test log
	// says how to reach and delete them.
	KeepEnv = "ONPREM_KEEP_CLUSTER"
)

// kindConfig is the cluster configuration: one control-plane node and
// workers more, containerd reading per-registry hosts.toml files
// (TrustRegistry), and the kubeadm patches of quirk 3 (a cgroup v1 host:
// Kubernetes 1.35+ refuses cgroup v1 unless told, and kubeadm's
// SystemVerification preflight fails).
//
// Each cluster has a pod subnet of its own (podSubnet): clusters of
// parallel tests share kind's docker network, and with the same pod
// addresses in two clusters a route learnt from the wrong one sent a
// test's request to a pod of the other cluster (seen once in CI: kube-router
// of one cluster, Traefik of `onprem local up`'s answering).
//
// The control-plane node mounts patchesDir (writeKubeadmPatches) where
// kubeadm reads its patches of the control plane's static pods.
//
// A nodeGrace above zero shortens the time a lost node takes to be marked
// NotReady (nodeLeaseSeconds).
func kindConfig(workers int, podSubnet, patchesDir string, nodeGrace time.Duration) string {
	nodes := "- role: control-plane\n  extraMounts:\n  - {hostPath: " + strconv.Quote(patchesDir) + ", containerPath: " + kubeadmPatchesPath + ", readOnly: true}\n" +
		strings.Repeat("- role: worker\n", workers)
	return `kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  podSubnet: ` + podSubnet + `
nodes:
` + nodes + `containerdConfigPatches:
- |-
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
` + nodeLease(nodeGrace) + `- |
  kind: InitConfiguration
  patches:
    directory: ` + kubeadmPatchesPath + `
  nodeRegistration:
    ignorePreflightErrors:
    - SystemVerification
- |
  kind: JoinConfiguration
  nodeRegistration:
    ignorePreflightErrors:
    - SystemVerification
`
}

// nodeLease is the kubelet's configuration line for a node grace period:
// the kubelet renews its lease every quarter of nodeLeaseDurationSeconds,
// so a lease of the grace period renews it four times in that period
// (kubeadm's default of 40 s renews it every 10 s, too seldom for a grace
// of 16 s on a busy machine).
func nodeLease(grace time.Duration) string {
	if grace <= 0 {
		return ""
	}
	return fmt.Sprintf("  nodeLeaseDurationSeconds: %d\n", nodeLeaseSeconds(grace))
}

func nodeLeaseSeconds(grace time.Duration) int {
	return max(4, int(grace.Round(time.Second)/time.Second))
}

// kubeadmPatchesPath is where the control-plane node finds the kubeadm
// patches.
const kubeadmPatchesPath = "/kind/onprem-patches"

// ControlPlaneCPURequest is the CPU request of each control-plane pod
// (etcd, the API server, the controller manager, the scheduler) and of
// CoreDNS's. kubeadm asks 650m for the four and 200m for CoreDNS, over a
// third of the project's 2-core machine, where
// the platform (its requests lowered by the e2e's overlay) and a GitOps
// runtime on the real upstream chart (about 1 CPU of requests, kept as
// the chart sets them, so that its scheduling is real) must fit beside
// them. A request only reserves: what the pods use is unchanged.
const ControlPlaneCPURequest = "10m"

// DNSNodeSelector is the node label that places the cluster's DNS
// (CoreDNS's two replicas) on the control-plane node, which the e2e never
// loses. kubeadm's CoreDNS only prefers two nodes, and its pods are placed
// on whichever nodes are ready first while the cluster starts: in one CI
// run both landed on a worker that a node-loss step then killed, and
// every name lookup in the cluster timed out for minutes. The cluster's
// DNS is the cluster's to keep available, not the platform's (preflight
// warns when it all runs on one of the platform's nodes,
// docs/availability.md); the ring keeps it where a node loss does not
// reach it, so that each loss measures the platform.
const DNSNodeSelector = "node-role.kubernetes.io/control-plane"

// writeKubeadmPatches writes, in dir, kubeadm's strategic-merge patches
// of the control plane's static pods and of CoreDNS: their CPU request
// lowered to ControlPlaneCPURequest, CoreDNS kept on the control-plane
// node (DNSNodeSelector).
//
// A nodeGrace above zero adds the controller manager's
// --node-monitor-grace-period (a JSON patch, which appends to the
// command's flags; the default is 50 s).
func writeKubeadmPatches(dir string, nodeGrace time.Duration) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("kindcluster: kubeadm patches: %w", err)
	}
	cpu := "    resources:\n      requests:\n        cpu: " + ControlPlaneCPURequest + "\n"
	patches := map[string]string{
		// CoreDNS's two replicas (kubeadm's addon, patched as
		// corednsdeployment), kept on the control-plane node
		// (DNSNodeSelector).
		"corednsdeployment": "spec:\n  template:\n    spec:\n      nodeSelector:\n        " + DNSNodeSelector + ": \"\"\n      containers:\n      - name: coredns\n" + indent(cpu, "    "),
	}
	for _, target := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
		patches[target] = "spec:\n  containers:\n  - name: " + target + "\n" + cpu
	}
	for target, patch := range patches {
		if err := os.WriteFile(filepath.Join(dir, target+"+strategic.yaml"), []byte(patch), 0o644); err != nil {
			return fmt.Errorf("kindcluster: kubeadm patches: %w", err)
		}
	}
	if nodeGrace > 0 {
		// The controller looks at the nodes every --node-monitor-period
		// (5 s by default): a node is marked NotReady up to that long
		// after its grace period ends; every 2 s, at most 2 s.
		patch := fmt.Sprintf("- op: add\n  path: /spec/containers/0/command/-\n  value: --node-monitor-grace-period=%ds\n", nodeLeaseSeconds(nodeGrace)) +
			"- op: add\n  path: /spec/containers/0/command/-\n  value: --node-monitor-period=2s\n"
		if err := os.WriteFile(filepath.Join(dir, "kube-controller-manager-nodeloss+json.yaml"), []byte(patch), 0o644); err != nil {
			return fmt.Errorf("kindcluster: kubeadm patches: %w", err)
		}
	}
	return nil
}

// indent prefixes every line of s with pre.
func indent(s, pre string) string {
	lines := strings.SplitAfter(s, "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pre + l
		}
	}
	return strings.Join(lines, "")
}

// podSubnet is the cluster's pod subnet: 10.N.0.0/16 with N from 128 to
// 191 chosen by the cluster's name, away from kind's 10.244.0.0/16 (which
// `onprem local up` uses) and from the Service range 10.96.0.0/12.
func podSubnet(name string) string {
	h := fnv.New32a()
	h.Write([]byte(name))
	return fmt.Sprintf("10.%d.0.0/16", 128+h.Sum32()%64)
}

// Option changes how Start creates a cluster.
type Option func(*config)

type config struct {
	name     string
	timeout  time.Duration
	cacheDir string
	workers  int
	// nodeGrace: WithNodeGracePeriod.
	nodeGrace time.Duration
}

// WithName sets the cluster's name; the default is "onprem-" and a random
// suffix. kind names the node container <name>-control-plane.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithStartTimeout bounds the cluster's creation and readiness (not the
// toolchain's build); the default is 5 minutes.
func WithStartTimeout(d time.Duration) Option { return func(c *config) { c.timeout = d } }

// WithWorkers adds n worker nodes to the control-plane node (default
// none), named <name>-worker, <name>-worker2, ...
func WithWorkers(n int) Option { return func(c *config) { c.workers = n } }

// WithNodeGracePeriod makes a lost node NotReady after grace (at least
// 4 s) instead of Kubernetes' 50 s: the controller manager's
// --node-monitor-grace-period (looked at every 2 s, --node-monitor-period),
// and a kubelet lease of that length (renewed every quarter of it). Once a node is NotReady its pods are no longer
// ready and leave their Services' endpoints, so this bounds how long a
// Service still sends requests to a killed node (KillNode).
func WithNodeGracePeriod(grace time.Duration) Option { return func(c *config) { c.nodeGrace = grace } }

// WithCacheDir sets the toolchain's cache folder (Options.CacheDir).
func WithCacheDir(dir string) Option { return func(c *config) { c.cacheDir = dir } }

// Cluster is a running kind cluster.
type Cluster struct {
	// Name is the kind cluster's name.
	Name string
	// Kubeconfig is the path of the cluster's kubeconfig (admin).
	Kubeconfig string
	// RESTConfig and Client reach the cluster as admin.
	RESTConfig *rest.Config
	Client     kubernetes.Interface
	// Nodes are the node containers' names, which are also the
	// Kubernetes node names.
	Nodes []string
	// Toolchain is what the cluster was made with.
	Toolchain *Toolchain

	logf        func(string, ...any)
	provisioner *provisioner
	owner       *owner
	deleteOnce  sync.Once
	deleteErr   error
}

// Start creates a kind cluster from the node image of Ensure (building the
// toolchain first if needed), waits until its node is Ready, CoreDNS runs
// and the default ServiceAccount exists, and starts the dynamic volume
// provisioner of the default StorageClass StorageClassName. The cluster
// is deleted in t.Cleanup unless ONPREM_KEEP_CLUSTER=1. With
// ONPREM_SKIP_KIND=1 the test is skipped.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	if os.Getenv(SkipEnv) == "1" {
		t.Skipf("%s=1: kind clusters are skipped", SkipEnv)
	}
	c, err := New(context.Background(), t.TempDir(), t.Logf, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if keepRequested() {
			c.Keep()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.Delete(ctx); err != nil {
			t.Errorf("kindcluster: %v", err)
		}
	})
	return c
}

// New is Start without testing.TB: it creates a cluster whose kubeconfig
// goes in dir and logs through logf. The caller deletes it with Delete.
func New(ctx context.Context, dir string, logf func(string, ...any), opts ...Option) (*Cluster, error) {
	cfg := config{timeout: 5 * time.Minute}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.name == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		cfg.name = NamePrefix + hex.EncodeToString(b[:])
	}
	if logf == nil {
		logf = func(string, ...any) {}
	}
	tc, err := Ensure(ctx, Options{Log: logf, CacheDir: cfg.cacheDir})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	c := &Cluster{Name: cfg.name, Kubeconfig: filepath.Join(dir, "kubeconfig"), Toolchain: tc, logf: logf}
	// Clusters of killed runs go first (they hold memory and ports); ours
	// is claimed before it exists, so that no other run reaps it.
	if err := c.reapLeftovers(ctx); err != nil {
		logf("%v (carrying on)", err)
	}
	if c.owner, err = claim(clustersDir(tc), c.Name); err != nil {
		return nil, err
	}
	patches, err := filepath.Abs(filepath.Join(dir, "kubeadm-patches"))
	if err != nil {
		return nil, fmt.Errorf("kindcluster: %w", err)
	}
	if err := writeKubeadmPatches(patches, cfg.nodeGrace); err != nil {
		return nil, err
	}
	kindCfg := kindConfig(cfg.workers, podSubnet(cfg.name), patches, cfg.nodeGrace)
	if err := os.WriteFile(filepath.Join(dir, "kind-config.yaml"), []byte(kindCfg), 0o644); err != nil {
		return nil, fmt.Errorf("kindcluster: %w", err)
	}
	t0 := time.Now()
	logf("kindcluster: creating cluster %s from %s", c.Name, tc.NodeImage)
	p, klog := c.provider()
	// kind's Create takes no context; it is bounded by its own wait.
	if err := ctx.Err(); err != nil {
		return nil, c.failed(err)
	}
	// No wait in kind: waitReady waits for the CNI (kube-router, which
	// kind applies from the node image: cni.go) and the nodes, and says
	// why when they do not come up.
	if err := p.Create(c.Name, cluster.CreateWithRawConfig([]byte(kindCfg)), cluster.CreateWithNodeImage(tc.NodeImage),
		cluster.CreateWithKubeconfigPath(c.Kubeconfig), cluster.CreateWithRetain(true),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false)); err != nil {
		err = fmt.Errorf("kindcluster: creating kind cluster %s: %w\n%s", c.Name, err, klog.tail())
		return nil, c.failed(err)
	}
	created := time.Since(t0)
	if err := c.connect(ctx); err != nil {
		return nil, c.failed(err)
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, c.failed(err)
	}
	if err := c.weighPods(ctx); err != nil {
		return nil, c.failed(err)
	}
	c.provisioner = startProvisioner(c.Client, c.nodeExecQuiet, logf)
	logf("kindcluster: cluster %s ready in %s (kind create %s); kubeconfig %s",
		c.Name, time.Since(t0).Round(100*time.Millisecond), created.Round(100*time.Millisecond), c.Kubeconfig)
	return c, nil
}

// PodsCPUShares is the CPU weight of the pods' cgroup (kubelet.slice) in
// every node of a cgroup v1 host.
//
// There, the node's own processes (containerd, the kubelet, one shim per
// container, systemd) sit as tasks in the node's root cgroup, and each
// task weighs as much as all the pods together (1024 shares): on two cores,
// a roll that starts sixteen pods kept containerd and the kubelet busy
// and left the ingress controller and the databases so little CPU that
// requests through them timed out and the controller failed its liveness
// probe. A production node gives its pods' slice the node's allocatable
// share against one system slice; 8192 gives the pods that precedence
// back. On a cgroup v2 host nothing changes (no such file).
const PodsCPUShares = 8192

// podsCPUSharesFile is where PodsCPUShares is written in a node.
const podsCPUSharesFile = "/sys/fs/cgroup/cpu/kubelet.slice/cpu.shares"

// weighPods sets PodsCPUShares in every node of a cgroup v1 host.
func (c *Cluster) weighPods(ctx context.Context) error {
	for _, n := range c.Nodes {
		if err := c.weighNode(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// weighNode sets PodsCPUShares in one node (nothing on cgroup v2).
func (c *Cluster) weighNode(ctx context.Context, node string) error {
	script := fmt.Sprintf(`f=%s; [ -e "$f" ] || exit 0; echo %d > "$f"`, podsCPUSharesFile, PodsCPUShares)
	if err := c.nodeExecQuiet(ctx, node, "sh", "-c", script); err != nil {
		return fmt.Errorf("kindcluster: giving the pods of node %s their CPU weight: %w", node, err)
	}
	return nil
}

// failed logs what explains a failed start, then deletes the cluster
// (unless ONPREM_KEEP_CLUSTER=1) and returns err.
func (c *Cluster) failed(err error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	node := c.Name + "-control-plane"
	for _, diag := range [][]string{
		{"exec", node, "kubectl", "--kubeconfig=/etc/kubernetes/admin.conf", "get", "nodes,pods", "-A", "-o", "wide"},
		{"exec", node, "journalctl", "--no-pager", "-u", "kubelet", "-n", "40"},
		{"exec", node, "journalctl", "--no-pager", "-u", "containerd", "-n", "20"},
	} {
		out, derr := exec.CommandContext(ctx, c.Toolchain.Docker, diag...).CombinedOutput()
		c.logf("kindcluster: docker %s (%v):\n%s", strings.Join(diag, " "), derr, cmdout.Tail(out, 40))
	}
	if keepRequested() {
		c.Keep()
		return err
	}
	return errors.Join(err, c.Delete(ctx))
}

func (c *Cluster) connect(ctx context.Context) error {
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kindcluster: kubeconfig %s: %w", c.Kubeconfig, err)
	}
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("kindcluster: client: %w", err)
	}
	c.RESTConfig, c.Client = rc, cs
	p, _ := c.provider()
	nodes, err := p.ListNodes(c.Name)
	if err != nil {
		return fmt.Errorf("kindcluster: the nodes of kind cluster %s: %w", c.Name, err)
	}
	c.Nodes = nil
	for _, n := range nodes {
		c.Nodes = append(c.Nodes, n.String())
	}
	if len(c.Nodes) == 0 {
		return fmt.Errorf("kindcluster: cluster %s has no node", c.Name)
	}
	return nil
}

// waitReady waits for kube-router on every node, every node to be Ready,
// CoreDNS to be available, the default ServiceAccount to exist and the
// StorageClass to be there (it is created if kind did not apply it). Its
// error carries kube-router's log: whatever is not ready, nodes and CoreDNS
// included, waits on the pod network first.
func (c *Cluster) waitReady(ctx context.Context) error {
	err := c.waitUntilReady(ctx)
	if err != nil {
		err = fmt.Errorf("%w\nkube-router's log:\n%s", err, c.cniLogTail(ctx))
	}
	return err
}

func (c *Cluster) waitUntilReady(ctx context.Context) error {
	var last string
	t0 := time.Now()
	for {
		ok, why, err := c.ready(ctx)
		if err != nil || ok {
			return err
		}
		if cutShort(ctx, why) && last != "" {
			// The deadline cut this round's requests short: what they
			// say is only that, and the reason the cluster was not
			// ready is the one the round before found.
			return fmt.Errorf("kindcluster: cluster %s not ready: %s: %w", c.Name, last, cmp.Or(ctx.Err(), context.DeadlineExceeded))
		}
		if why != last {
			c.logf("kindcluster: waiting for cluster %s (%s): %s", c.Name, time.Since(t0).Round(time.Second), why)
			last = why
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kindcluster: cluster %s not ready: %s: %w", c.Name, why, ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// cutShort reports whether a round's reason is only that the deadline
// came: the context has ended, or a request failed on its way there
// (client-go's rate limiter refuses a request that would end after the
// deadline, before the context itself ends).
func cutShort(ctx context.Context, why string) bool {
	// "context deadline exceeded", and the limiter's "would exceed
	// context deadline".
	return ctx.Err() != nil || strings.Contains(why, "context deadline")
}

func (c *Cluster) ready(ctx context.Context) (bool, string, error) {
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error(), nil
	}
	if len(nodes.Items) != len(c.Nodes) {
		return false, fmt.Sprintf("%d of %d nodes registered", len(nodes.Items), len(c.Nodes)), nil
	}
	if ok, why, err := cniReady(ctx, c.Client, len(c.Nodes)); !ok {
		return false, why, err
	}
	for _, n := range nodes.Items {
		if !nodeReady(&n) {
			return false, "node " + n.Name + " not Ready", nil
		}
	}
	dns, err := c.Client.AppsV1().Deployments("kube-system").Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		return false, "coredns: " + err.Error(), nil
	}
	if !deploymentAvailable(dns) {
		return false, fmt.Sprintf("coredns: %d of %d replicas available", dns.Status.AvailableReplicas, replicas(dns)), nil
	}
	if _, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{}); err != nil {
		return false, "default ServiceAccount: " + err.Error(), nil
	}
	_, err = c.Client.StorageV1().StorageClasses().Get(ctx, StorageClassName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.Client.StorageV1().StorageClasses().Create(ctx, storageClass(), metav1.CreateOptions{})
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return false, "StorageClass: " + err.Error(), nil
	}
	return true, "", nil
}

func nodeReady(n *corev1.Node) bool {
	return NodeReadyCondition(n).Status == corev1.ConditionTrue
}

func replicas(d *appsv1.Deployment) int32 {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}

func deploymentAvailable(d *appsv1.Deployment) bool {
	return d.Status.ObservedGeneration >= d.Generation && d.Status.UpdatedReplicas == replicas(d) &&
		d.Status.AvailableReplicas == replicas(d)
}

// NodeExec runs a command in a node's container (docker exec) and returns
// its combined output.
func (c *Cluster) NodeExec(ctx context.Context, node string, stdin io.Reader, args ...string) ([]byte, error) {
	dargs := []string{"exec"}
	if stdin != nil {
		dargs = append(dargs, "-i")
	}
	dargs = append(append(dargs, node), args...)
	cmd := exec.CommandContext(ctx, c.Toolchain.Docker, dargs...)
	cmd.Stdin = stdin
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("docker exec %s %s: %w: %s", node, strings.Join(args, " "), err, cmdout.Tail(out.Bytes(), 20))
	}
	return out.Bytes(), nil
}

func (c *Cluster) nodeExecQuiet(ctx context.Context, node string, args ...string) error {
	_, err := c.NodeExec(ctx, node, nil, args...)
	return err
}

// LoadImages imports image archives (docker-archive, as docker save and
// WriteImageArchive write them, or OCI layout tarballs) into the
// containerd of every node, where pods find them with no registry: use
// imagePullPolicy IfNotPresent (or Never) and a tag other than :latest.
func (c *Cluster) LoadImages(ctx context.Context, archives ...string) error {
	for _, a := range archives {
		for _, node := range c.Nodes {
			f, err := os.Open(a)
			if err != nil {
				return fmt.Errorf("kindcluster: load image archive: %w", err)
			}
			t0 := time.Now()
			_, err = c.NodeExec(ctx, node, f, "ctr", "--namespace=k8s.io", "images", "import",
				"--all-platforms", "--digests", "--snapshotter=overlayfs", "-")
			f.Close()
			if err != nil {
				return fmt.Errorf("kindcluster: load %s into %s: %w", a, node, err)
			}
			c.logf("kindcluster: loaded %s into %s in %s", filepath.Base(a), node, time.Since(t0).Round(100*time.Millisecond))
		}
	}
	return nil
}

// LoadDockerImages copies images from the local docker (docker save) into
// every node, like LoadImages.
func (c *Cluster) LoadDockerImages(ctx context.Context, refs ...string) error {
	dir, err := os.MkdirTemp("", "kindcluster-images-")
	if err != nil {
		return fmt.Errorf("kindcluster: %w", err)
	}
	defer os.RemoveAll(dir)
	archive := filepath.Join(dir, "images.tar")
	args := append([]string{"save", "-o", archive}, refs...)
	if out, err := exec.CommandContext(ctx, c.Toolchain.Docker, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("kindcluster: docker save %s: %w: %s", strings.Join(refs, " "), err, out)
	}
	return c.LoadImages(ctx, archive)
}

// Keep stops the provisioner and leaves the cluster running, logging how
// to reach and delete it. Its kubeconfig is copied out of the test's
// temporary folder.
func (c *Cluster) Keep() {
	if c.provisioner != nil {
		c.provisioner.stop()
	}
	// Kept on purpose: the next run's reaping leaves it alone.
	_ = os.WriteFile(filepath.Join(clustersDir(c.Toolchain), c.Name+".keep"), nil, 0o644)
	c.owner.release(false)
	kc := filepath.Join(os.TempDir(), "kindcluster-"+c.Name+".kubeconfig")
	if data, err := os.ReadFile(c.Kubeconfig); err == nil && os.WriteFile(kc, data, 0o600) == nil {
		c.Kubeconfig = kc
	}
	c.logf("kindcluster: %s=1: keeping cluster %s (no volume provisioner runs any more):\n"+
		"\texport KUBECONFIG=%s   (or: %s get kubeconfig --name %s)\n"+
		"\t%s exec -it %s-control-plane bash\n"+
		"\t%s delete cluster --name %s",
		KeepEnv, c.Name, c.Kubeconfig, c.Toolchain.Kind, c.Name, c.Toolchain.Docker, c.Name, c.Toolchain.Kind, c.Name)
}

// Delete stops the provisioner and deletes the cluster. It is safe to call
// more than once.
func (c *Cluster) Delete(ctx context.Context) error {
	c.deleteOnce.Do(func() {
		if c.provisioner != nil {
			c.provisioner.stop()
		}
		t0 := time.Now()
		p, klog := c.provider()
		if err := p.Delete(c.Name, c.Kubeconfig); err != nil {
			// Unowned now: the next run reaps it.
			c.owner.release(false)
			c.deleteErr = fmt.Errorf("deleting kind cluster %s: %w: %s", c.Name, err, klog.tail())
			return
		}
		c.owner.release(true)
		c.logf("kindcluster: deleted cluster %s in %s", c.Name, time.Since(t0).Round(100*time.Millisecond))
	})
	return c.deleteErr
}

// KeepEnvE2E is the name the platform e2e documents for KeepEnv; either
// keeps clusters.
const KeepEnvE2E = "ONPREM_E2E_KEEP"

func keepRequested() bool { return os.Getenv(KeepEnv) == "1" || os.Getenv(KeepEnvE2E) == "1" }
