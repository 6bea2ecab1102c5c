//go:build linux

package testcluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"onprem.dev/onprem/e2e/internal/cmdout"
)

// KeepEnv is the environment variable that keeps the folder of a cluster
// whose test failed (logs, etcd data, certificates, kubeconfig): set it
// to 1.
const KeepEnv = "ONPREM_KEEP_CLUSTER"

const (
	serviceCIDR     = "10.96.0.0/16"
	serviceIP       = "10.96.0.1" // first address of serviceCIDR: the kubernetes Service
	podCIDR         = "10.0.0.0/16"
	fakeNodeIP      = "10.255.0.1"
	kwokNodeKey     = "kwok.x-k8s.io/node"
	kwokNodeValue   = "fake"
	saIssuer        = "https://kubernetes.default.svc.cluster.local"
	adminUser       = "onprem-testcluster-admin"
	defaultNodeName = "kwok-node"
)

// Option changes how Start builds a cluster.
type Option func(*config)

type config struct {
	name         string
	nodes        int
	startTimeout time.Duration
	stopGrace    time.Duration
}

// WithName sets the cluster's name (kubeconfig context and folder name).
// The default is made from the test's name.
func WithName(name string) Option { return func(c *config) { c.name = name } }

// WithNodes sets how many fake nodes (kwok-node-0, kwok-node-1, ...) are
// registered; the default is 1.
func WithNodes(n int) Option { return func(c *config) { c.nodes = n } }

// WithStartTimeout bounds the start of the control plane (not the build of
// the binaries); the default is 3 minutes.
func WithStartTimeout(d time.Duration) Option { return func(c *config) { c.startTimeout = d } }

// WithStopGrace sets how long Stop waits for each process after SIGTERM
// before it sends SIGKILL; the default is 5 seconds.
func WithStopGrace(d time.Duration) Option { return func(c *config) { c.stopGrace = d } }

// Cluster is one running control plane. Its fields are valid until Stop.
type Cluster struct {
	// Name is the cluster's name; it is also the kubeconfig's context.
	Name string
	// Dir is the cluster's private folder: pki/, etcd/, logs/, kubeconfig.
	Dir string
	// Kubeconfig is the path of an admin kubeconfig (group system:masters).
	Kubeconfig string
	// RESTConfig is the same admin identity for client-go (QPS 100, burst 200).
	RESTConfig *rest.Config
	// Client is a clientset made from RESTConfig.
	Client kubernetes.Interface
	// Nodes are the names of the fake nodes, all Ready when Start returns.
	Nodes []string

	cfg   config
	tb    testing.TB
	ports ports
	pki   *pki
	bins  *Bins

	mu      sync.Mutex
	procs   []*process
	stopped bool
	stopErr error
}

// process is one component started by the cluster, in its own process group.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has been reaped
	err  error         // cmd.Wait's result, valid after done
}

type ports struct {
	etcdClient, etcdPeer, apiserver, kcm, scheduler, kwok int
}

var clusterSeq atomic.Int64

// Start builds the binaries if needed (see Binaries), starts etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler and kwok on free
// loopback ports, registers the fake nodes and the default StorageClass, and
// returns when /readyz is ok, every node is Ready and untainted and the
// default ServiceAccount exists in the default namespace. The cluster is
// stopped in t.Cleanup, also when the test fails. On any failure Start stops
// what it started and fails the test with the tail of the relevant log.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	cfg := config{nodes: 1, startTimeout: 3 * time.Minute, stopGrace: 5 * time.Second}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.name == "" {
		cfg.name = defaultName(t.Name())
	}
	bins, err := Binaries(context.Background(), t.Logf)
	if err != nil {
		t.Fatalf("testcluster: %v", err)
	}
	// A port picked as free may be taken by another process before the
	// component binds it; then the whole start is retried once.
	for attempt := 1; ; attempt++ {
		c, err := start(t, bins, cfg)
		if err == nil {
			return c
		}
		if attempt < 2 && c != nil && c.portClash() {
			t.Logf("testcluster: %s: a port was taken meanwhile, retrying: %v", cfg.name, err)
			c.stop(false)
			continue
		}
		if c != nil {
			c.stop(true)
		}
		t.Fatalf("testcluster: starting %s: %v", cfg.name, err)
	}
}

func defaultName(testName string) string {
	s := strings.ToLower(testName)
	s = regexp.MustCompile(`[^a-z0-9]+`).ReplaceAllString(s, "-")
	s = strings.Trim(s, "-")
	if len(s) > 40 {
		s = strings.Trim(s[:40], "-")
	}
	if s == "" {
		s = "cluster"
	}
	return fmt.Sprintf("%s-%d", s, clusterSeq.Add(1))
}

func start(t testing.TB, bins *Bins, cfg config) (*Cluster, error) {
	t0 := time.Now()
	dir, err := os.MkdirTemp("", "onprem-testcluster-"+cfg.name+"-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Name: cfg.name, Dir: dir, cfg: cfg, tb: t, bins: bins}
	t.Cleanup(func() { _ = c.Stop() })
	for i := 0; i < cfg.nodes; i++ {
		c.Nodes = append(c.Nodes, fmt.Sprintf("%s-%d", defaultNodeName, i))
	}
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return c, err
	}
	p, err := freePorts(6)
	if err != nil {
		return c, err
	}
	c.ports = ports{etcdClient: p[0], etcdPeer: p[1], apiserver: p[2], kcm: p[3], scheduler: p[4], kwok: p[5]}
	if err := c.writePKI(); err != nil {
		return c, fmt.Errorf("certificates: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.startTimeout)
	defer cancel()
	step := func(name string) { t.Logf("testcluster: %s: %s at +%.2fs", c.Name, name, time.Since(t0).Seconds()) }

	// etcd
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", c.ports.etcdPeer)
	if err := c.spawn("etcd", bins.Etcd,
		"--name=etcd", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=etcd="+peerURL, "--unsafe-no-fsync", "--log-level=warn",
	); err != nil {
		return c, err
	}
	if err := c.waitFor(ctx, "etcd", "etcd healthy", func(ctx context.Context) error {
		return httpOK(ctx, http.DefaultClient, etcdURL+"/health", `"health":"true"`)
	}); err != nil {
		return c, err
	}
	step("etcd healthy")

	// kube-apiserver
	pk := c.pki
	if err := c.spawn("kube-apiserver", bins.KubeAPIServer,
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(c.ports.apiserver),
		"--cert-dir="+pk.dir,
		"--tls-cert-file="+pk.path("apiserver", "crt"), "--tls-private-key-file="+pk.path("apiserver", "key"),
		"--client-ca-file="+pk.path("ca", "crt"),
		"--service-account-issuer="+saIssuer,
		"--service-account-key-file="+pk.path("sa", "pub"),
		"--service-account-signing-key-file="+pk.path("sa", "key"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--enable-admission-plugins=NodeRestriction",
		// Loopback is refused in the kubernetes Endpoints; nothing here
		// reaches the apiserver through the Service anyway.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	); err != nil {
		return c, err
	}
	if err := c.connect(); err != nil {
		return c, err
	}
	if err := c.waitFor(ctx, "kube-apiserver", "kube-apiserver /readyz", func(ctx context.Context) error {
		body, err := c.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(body)) != "ok" {
			return fmt.Errorf("/readyz: %s", body)
		}
		return nil
	}); err != nil {
		return c, err
	}
	step("kube-apiserver ready")

	// The other components, and the objects of the fake kubelet.
	kcmKubeconfig := filepath.Join(dir, "kube-controller-manager.kubeconfig")
	if err := c.spawn("kube-controller-manager", bins.KubeControllerManager,
		"--kubeconfig="+kcmKubeconfig,
		"--authentication-kubeconfig="+kcmKubeconfig, "--authorization-kubeconfig="+kcmKubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.kcm),
		"--leader-elect=false",
		"--service-account-private-key-file="+pk.path("sa", "key"),
		"--root-ca-file="+pk.path("ca", "crt"),
		"--use-service-account-credentials=true",
		"--cluster-signing-cert-file="+pk.path("ca", "crt"), "--cluster-signing-key-file="+pk.path("ca", "key"),
		"--service-cluster-ip-range="+serviceCIDR,
		"--kube-api-qps=200", "--kube-api-burst=400",
		"--profiling=false",
	); err != nil {
		return c, err
	}
	schedKubeconfig := filepath.Join(dir, "kube-scheduler.kubeconfig")
	if err := c.spawn("kube-scheduler", bins.KubeScheduler,
		"--kubeconfig="+schedKubeconfig,
		"--authentication-kubeconfig="+schedKubeconfig, "--authorization-kubeconfig="+schedKubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.scheduler),
		"--leader-elect=false",
		"--profiling=false",
	); err != nil {
		return c, err
	}
	kwokConf, err := kwokConfig(bins.KwokStages)
	if err != nil {
		return c, fmt.Errorf("kwok stages: %w", err)
	}
	kwokConfPath := filepath.Join(dir, "kwok.yaml")
	if err := os.WriteFile(kwokConfPath, kwokConf, 0o644); err != nil {
		return c, err
	}
	if err := c.spawnWith("kwok", kwokRace, bins.Kwok,
		"--kubeconfig="+c.Kubeconfig,
		"--config="+kwokConfPath,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+kwokNodeKey+"="+kwokNodeValue,
		"--server-address="+fmt.Sprintf("127.0.0.1:%d", c.ports.kwok),
		// Without it (0 in the binary) no Lease is held and the node flaps.
		"--node-lease-duration-seconds=40",
		"--node-ip="+fakeNodeIP,
		"--cidr="+podCIDR,
	); err != nil {
		return c, err
	}
	if err := c.createObjects(ctx); err != nil {
		return c, err
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // #nosec: loopback health check
	waits := []struct {
		proc, what string
		check      func(context.Context) error
	}{
		{"kube-controller-manager", "kube-controller-manager /healthz", func(ctx context.Context) error {
			return httpOK(ctx, insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports.kcm), "ok")
		}},
		{"kube-scheduler", "kube-scheduler /healthz", func(ctx context.Context) error {
			return httpOK(ctx, insecure, fmt.Sprintf("https://127.0.0.1:%d/healthz", c.ports.scheduler), "ok")
		}},
		{"kwok", "kwok /healthz", func(ctx context.Context) error {
			return httpOK(ctx, http.DefaultClient, fmt.Sprintf("http://127.0.0.1:%d/healthz", c.ports.kwok), "")
		}},
		{"kwok", "nodes Ready and untainted", c.nodesReady},
		{"kube-controller-manager", "default ServiceAccount", func(ctx context.Context) error {
			_, err := c.Client.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
			return err
		}},
	}
	for _, w := range waits {
		if err := c.waitFor(ctx, w.proc, w.what, w.check); err != nil {
			return c, err
		}
		step(w.what)
	}
	return c, nil
}

// writePKI makes the certificates and the kubeconfigs of every component.
func (c *Cluster) writePKI() error {
	p, err := newPKI(filepath.Join(c.Dir, "pki"))
	if err != nil {
		return err
	}
	c.pki = p
	if _, err := p.serving("apiserver", net.ParseIP(serviceIP)); err != nil {
		return err
	}
	if err := p.serviceAccountKey(); err != nil {
		return err
	}
	server := fmt.Sprintf("https://127.0.0.1:%d", c.ports.apiserver)
	for _, id := range []struct{ file, user, group string }{
		{"kubeconfig", adminUser, "system:masters"},
		{"kube-controller-manager.kubeconfig", "system:kube-controller-manager", ""},
		{"kube-scheduler.kubeconfig", "system:kube-scheduler", ""},
	} {
		var groups []string
		if id.group != "" {
			groups = []string{id.group}
		}
		name := strings.TrimSuffix(id.file, ".kubeconfig")
		if name == "kubeconfig" {
			name = "admin"
		}
		cert, err := p.client(name, id.user, groups...)
		if err != nil {
			return err
		}
		kc := clientcmdapi.NewConfig()
		kc.Clusters[c.Name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: p.caPEM}
		kc.AuthInfos[id.user] = &clientcmdapi.AuthInfo{ClientCertificateData: cert.certPEM, ClientKeyData: cert.keyPEM}
		kc.Contexts[c.Name] = &clientcmdapi.Context{Cluster: c.Name, AuthInfo: id.user, Namespace: "default"}
		kc.CurrentContext = c.Name
		path := filepath.Join(c.Dir, id.file)
		if err := clientcmd.WriteToFile(*kc, path); err != nil {
			return err
		}
		if id.file == "kubeconfig" {
			c.Kubeconfig = path
		}
	}
	return nil
}

// connect makes RESTConfig and Client from the admin kubeconfig.
func (c *Cluster) connect() error {
	rc, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = 100, 200
	rc.UserAgent = "onprem-testcluster"
	c.RESTConfig = rc
	cs, err := kubernetes.NewForConfig(rest.CopyConfig(rc))
	if err != nil {
		return err
	}
	c.Client = cs
	return nil
}

// createObjects registers the fake nodes (kwok manages nodes with the
// annotation kwok.x-k8s.io/node=fake) and the default StorageClass.
func (c *Cluster) createObjects(ctx context.Context) error {
	for _, name := range c.Nodes {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Annotations: map[string]string{
				kwokNodeKey:                    kwokNodeValue,
				"node.alpha.kubernetes.io/ttl": "0",
			},
			Labels: map[string]string{
				"kubernetes.io/hostname": name,
				"kubernetes.io/os":       "linux",
				"kubernetes.io/arch":     "amd64",
				"type":                   "kwok",
			},
		}}
		if _, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create node %s: %w", name, err)
		}
	}
	deleteReclaim := corev1.PersistentVolumeReclaimDelete
	immediate := storagev1.VolumeBindingImmediate
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       "kwok.x-k8s.io/volume",
		ReclaimPolicy:     &deleteReclaim,
		VolumeBindingMode: &immediate,
	}
	if _, err := c.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create StorageClass: %w", err)
	}
	return nil
}

func (c *Cluster) nodesReady(ctx context.Context) error {
	for _, name := range c.Nodes {
		n, err := c.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		ready := false
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
				ready = true
			}
		}
		if !ready {
			return fmt.Errorf("node %s not Ready", name)
		}
		if len(n.Spec.Taints) > 0 {
			return fmt.Errorf("node %s still tainted: %v", name, n.Spec.Taints)
		}
	}
	return nil
}

// spawn starts a component in its own process group, its output in
// logs/<name>.log. On Linux the process is killed if the test binary dies.
func (c *Cluster) spawn(name, bin string, args ...string) error {
	return c.spawnWith(name, "", bin, args...)
}

// kwokRace is what kwok v0.8.0 prints when two of its controllers register
// the same CEL types at once (an unguarded map in its easycel library): a
// crash of kwok itself, now and then in its first seconds, unrelated to
// the test. kwok keeps no state of its own (the API server has it all), so
// the cluster starts it again.
const kwokRace = "fatal error: concurrent map writes"

// maxRestarts bounds the restarts of a component after its known crash.
const maxRestarts = 3

// crashes counts the lines of a component's log that hold text, leaving
// out the lines the cluster writes itself ("# " and the command line).
func crashes(log []byte, text string) int {
	n := 0
	for _, line := range strings.Split(string(log), "\n") {
		if !strings.HasPrefix(line, "# ") && strings.Contains(line, text) {
			n++
		}
	}
	return n
}

// spawnWith starts a component; when it exits with restartOn in its log
// (a known crash of the component itself), it is started again, up to
// maxRestarts times, while the cluster runs. "" never restarts.
func (c *Cluster) spawnWith(name, restartOn, bin string, args ...string) error {
	logPath := c.LogPath(name)
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own copy
	fmt.Fprintf(f, "# %s %s\n", bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid: true,
		// The guard against orphans: if the test binary is killed (even
		// with SIGKILL), the kernel kills the component. The signal is tied
		// to the thread that forked; Go's threads live as long as the
		// process unless a goroutine exits while locked to one, which this
		// package never does.
		Pdeathsig: syscall.SIGKILL,
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("cluster stopped")
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		restarts := 0
		for {
			err := cmd.Wait()
			if restartOn == "" || restarts == maxRestarts {
				p.err = err
				close(p.done)
				return
			}
			b, _ := os.ReadFile(logPath)
			if crashes(b, restartOn) <= restarts {
				p.err = err
				close(p.done)
				return
			}
			restarts++
			next := exec.Command(bin, args...)
			next.Dir, next.SysProcAttr = cmd.Dir, cmd.SysProcAttr
			f, ferr := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND, 0o644)
			if ferr == nil {
				fmt.Fprintf(f, "# testcluster: %s crashed of its known race: restart %d of %d\n", name, restarts, maxRestarts)
				next.Stdout, next.Stderr = f, f
			}
			c.mu.Lock()
			if c.stopped {
				c.mu.Unlock()
				if f != nil {
					f.Close()
				}
				p.err = err
				close(p.done)
				return
			}
			serr := next.Start()
			if f != nil {
				f.Close() // the child has its own copy
			}
			if serr != nil {
				c.mu.Unlock()
				p.err = fmt.Errorf("restart %s after %v: %w", name, err, serr)
				close(p.done)
				return
			}
			p.cmd, cmd = next, next
			c.mu.Unlock()
			c.tb.Logf("testcluster: %s: %s crashed with its known race (%q in its log) and was started again (%d of %d)", c.Name, name, restartOn, restarts, maxRestarts)
		}
	}()
	c.procs = append(c.procs, p)
	return nil
}

// waitFor polls check until it succeeds. It fails early when any component
// has exited, and on timeout it returns check's last error with the tail of
// proc's log.
func (c *Cluster) waitFor(ctx context.Context, proc, what string, check func(context.Context) error) error {
	var last error
	for {
		if p := c.exited(); p != nil {
			return fmt.Errorf("waiting for %s: %s exited (%v); tail of %s:\n%s", what, p.name, p.err, p.log, c.logTail(p.name))
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = check(cctx)
		cancel()
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %s: %v; tail of %s:\n%s", what, last, c.LogPath(proc), c.logTail(proc))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *Cluster) exited() *process {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		select {
		case <-p.done:
			return p
		default:
		}
	}
	return nil
}

// portClash reports whether a component could not bind its port.
func (c *Cluster) portClash() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if b, err := os.ReadFile(p.log); err == nil && strings.Contains(string(b), "address already in use") {
			return true
		}
	}
	return false
}

// LogPath returns the log file of a component: etcd, kube-apiserver,
// kube-controller-manager, kube-scheduler or kwok.
func (c *Cluster) LogPath(component string) string {
	return filepath.Join(c.Dir, "logs", component+".log")
}

func (c *Cluster) logTail(component string) string {
	b, err := os.ReadFile(c.LogPath(component))
	if err != nil {
		return err.Error()
	}
	return cmdout.Tail(b, 30)
}

// PIDs returns the process ID of every component started, by name. Each is
// also the ID of the component's process group.
func (c *Cluster) PIDs() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := make(map[string]int, len(c.procs))
	for _, p := range c.procs {
		m[p.name] = p.cmd.Process.Pid
	}
	return m
}

// Stop stops every component: SIGTERM to each process group in reverse
// start order, SIGKILL after the grace period (WithStopGrace). It then
// removes the cluster's folder, unless the test failed and
// ONPREM_KEEP_CLUSTER=1 is set. Stop is idempotent and also runs in the
// test's cleanup.
func (c *Cluster) Stop() error {
	return c.stop(c.tb.Failed())
}

func (c *Cluster) stop(failed bool) error {
	c.mu.Lock()
	if c.stopped {
		c.mu.Unlock()
		return c.stopErr
	}
	c.stopped = true
	procs := append([]*process(nil), c.procs...)
	c.mu.Unlock()

	t0 := time.Now()
	var errs []error
	for i := len(procs) - 1; i >= 0; i-- {
		if err := procs[i].terminate(c.cfg.stopGrace); err != nil {
			errs = append(errs, err)
		}
	}
	if len(procs) > 0 {
		c.tb.Logf("testcluster: %s: stopped %d processes in %.2fs", c.Name, len(procs), time.Since(t0).Seconds())
	}
	if failed && os.Getenv(KeepEnv) == "1" {
		c.tb.Logf("testcluster: %s: kept %s (logs/, etcd/, kubeconfig) because %s=1", c.Name, c.Dir, KeepEnv)
	} else if err := os.RemoveAll(c.Dir); err != nil {
		errs = append(errs, err)
	}
	c.stopErr = errors.Join(errs...)
	return c.stopErr
}

// terminate signals the process group and waits for the process to be
// reaped, escalating from SIGTERM to SIGKILL after grace.
func (p *process) terminate(grace time.Duration) error {
	pgid := p.cmd.Process.Pid
	select {
	case <-p.done:
	default:
		if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("SIGTERM %s: %w", p.name, err)
		}
		select {
		case <-p.done:
		case <-time.After(grace):
			if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				return fmt.Errorf("SIGKILL %s: %w", p.name, err)
			}
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				return fmt.Errorf("%s (pid %d) did not exit after SIGKILL", p.name, pgid)
			}
		}
	}
	// Anything the component left in its group goes too.
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGKILL group of %s: %w", p.name, err)
	}
	return nil
}

// httpOK GETs url and checks for a 200 whose body contains want.
func httpOK(ctx context.Context, client *http.Client, url, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	body := string(b)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, body)
	}
	if want != "" && !strings.Contains(strings.ReplaceAll(body, " ", ""), want) {
		return fmt.Errorf("GET %s: unexpected body %q", url, body)
	}
	return nil
}

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

// freePorts returns n distinct free loopback TCP ports, never handing out
// the same port twice in this process.
func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		port := l.Addr().(*net.TCPAddr).Port
		if portsUsed[port] {
			continue
		}
		portsUsed[port] = true
		out = append(out, port)
	}
	return out, nil
}
