package snapshot

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/certs"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/installer/topology"
	"onprem.dev/onprem/installer/version"
	"onprem.dev/onprem/preflight"
)

// Default bounds of a collection.
const (
	DefaultLogLines    = 200
	DefaultLogAge      = 24 * time.Hour
	DefaultLogBytes    = 256 << 10
	DefaultConcurrency = 4
	DefaultTimeout     = 60 * time.Second
	// healthTimeout bounds one service's readiness answer.
	healthTimeout = 5 * time.Second
)

// Options say what to collect.
type Options struct {
	// Namespace is the platform's.
	Namespace string
	// Logs bound each container's log (defaults above when zero).
	Logs LogLimits
	// NoLogs collects no log; TroubledLogsOnly collects those of pods that
	// are not ready, restarted, or failed only (what the analyzers read).
	NoLogs           bool
	TroubledLogsOnly bool
	// Concurrency is how many collectors, and log reads, run at once.
	Concurrency int
	// Timeout bounds each collector; one that runs out is listed as
	// skipped with what it had.
	Timeout time.Duration
	// Preflight, when set, runs the preflight checks (the action layer
	// knows the configuration they need).
	Preflight func(ctx context.Context, s *Snapshot) (*preflight.Report, error)
	// Attachments, when set, reads the runners, runtimes, Git sources and
	// managed clusters with their health.
	Attachments func(ctx context.Context, s *Snapshot) (*Attachments, error)
	// Drift, when set, compares each component's live objects with its
	// deployed release (it changes nothing).
	Drift func(ctx context.Context, s *Snapshot) ([]Drift, error)
	// MongoDB, when set, asks a member of MongoDB's replica set (spec.
	// availability high) for the set's status: each member's role and
	// lag, which MongoDB publishes in no Kubernetes object. It only reads.
	MongoDB *topology.MongoDBProbe
	// Progress is told when each collector ends; the collectors of a
	// phase run at once, so it may be called from several goroutines at a
	// time.
	Progress func(r CollectorResult)
	// Now is the clock (tests).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.Logs.Lines <= 0 {
		o.Logs.Lines = DefaultLogLines
	}
	if o.Logs.Age <= 0 {
		o.Logs.Age = DefaultLogAge
	}
	if o.Logs.Bytes <= 0 {
		o.Logs.Bytes = DefaultLogBytes
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Progress == nil {
		o.Progress = func(CollectorResult) {}
	}
}

// collector is one part of a collection. run fills its part of the
// snapshot under mu and returns how many items it collected; skipped
// lists what it could not collect and why (never a reason to fail the
// whole collection).
type collector struct {
	name string
	run  func(ctx context.Context, c *collection) (items int, skipped []string)
}

type collection struct {
	client kubernetes.Interface
	o      Options
	mu     sync.Mutex
	s      *Snapshot
}

// Collect gathers a Snapshot of the installation in o.Namespace. It fails
// only when ctx ends; a collector that cannot read something (permission,
// timeout, a pod whose logs are gone) records it in Meta.Collectors and
// the others go on.
func Collect(ctx context.Context, cl *kube.Cluster, o Options) (*Snapshot, error) {
	o.defaults()
	c := &collection{client: cl.Client, o: o, s: &Snapshot{
		Meta: Meta{Onprem: version.Version, CollectedAt: o.Now().UTC(), Server: cl.Server, ServerVersion: cl.ServerVersion,
			Namespace: o.Namespace, Limits: o.Logs},
		Namespaces: map[string]*Objects{},
	}}
	if o.NoLogs {
		c.s.Meta.Limits = LogLimits{}
	}
	// The record first: it names the runners' and runtimes' namespaces.
	c.phase(ctx, []collector{{"state", collectState}, {"config", collectConfig}})
	c.s.Meta.Namespaces = c.namespaces()
	c.phase(ctx, []collector{
		{"objects", collectObjects}, {"secrets", collectSecrets}, {"cluster", collectCluster},
		{"helm", collectReleases}, {"health", collectHealth}, {"preflight", collectPreflight},
		{"attachments", collectAttachments}, {"drift", collectDrift}, {"mongodb-replica-set", collectMongoDB},
		{"cluster-dns", collectClusterDNS},
	})
	if !o.NoLogs {
		c.phase(ctx, []collector{{"logs", collectLogs}})
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.s, nil
}

// phase runs collectors at most o.Concurrency at once, each under
// o.Timeout, and records how each went in the order given.
func (c *collection) phase(ctx context.Context, cs []collector) {
	results := make([]CollectorResult, len(cs))
	sem := make(chan struct{}, c.o.Concurrency)
	var wg sync.WaitGroup
	for i, col := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, c.o.Timeout)
			defer cancel()
			start := time.Now()
			items, skipped := col.run(cctx, c)
			if cctx.Err() != nil && ctx.Err() == nil {
				skipped = append(skipped, fmt.Sprintf("stopped after %s (the collector's time limit): what it had is kept", c.o.Timeout))
			}
			results[i] = CollectorResult{Name: col.name, Duration: time.Since(start).Round(time.Millisecond), Items: items, Skipped: skipped}
			c.o.Progress(results[i])
		}()
	}
	wg.Wait()
	c.s.Meta.Collectors = append(c.s.Meta.Collectors, results...)
}

// namespaces are the platform's and those of the runners and runtimes on
// the same cluster.
func (c *collection) namespaces() []string {
	set := map[string]bool{c.o.Namespace: true}
	if st := c.s.State; st != nil {
		for _, r := range st.Runners {
			if r.Kubeconfig == "" && r.Context == "" {
				set[r.Namespace] = true
				if r.EngineNamespace != "" {
					set[r.EngineNamespace] = true
				}
			}
		}
		for _, r := range st.Runtimes {
			if r.Kubeconfig == "" && r.Context == "" {
				set[r.Namespace] = true
			}
		}
	}
	delete(set, "")
	out := make([]string, 0, len(set))
	for n := range set {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// why says in a line why a read failed.
func why(what string, err error) string {
	switch {
	case apierrors.IsForbidden(err):
		return what + ": forbidden (the kubeconfig's user may not read it): " + err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		return what + ": timed out"
	default:
		return what + ": " + err.Error()
	}
}

func collectState(ctx context.Context, c *collection) (int, []string) {
	st, err := state.NewStore(c.client, c.o.Namespace).Load(ctx)
	if err != nil {
		return 0, []string{why("the state record (Secret "+c.o.Namespace+"/"+state.SecretName+")", err)}
	}
	if !st.Stored() {
		return 0, []string{"no state record: nothing installed in namespace " + c.o.Namespace}
	}
	c.mu.Lock()
	c.s.State = st
	c.mu.Unlock()
	return 1 + len(st.History), nil
}

func collectConfig(ctx context.Context, c *collection) (int, []string) {
	sec, err := c.client.CoreV1().Secrets(c.o.Namespace).Get(ctx, backup.ConfigSecret, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return 0, []string{"no effective configuration recorded (Secret " + backup.ConfigSecret + ")"}
	}
	if err != nil {
		return 0, []string{why("the effective configuration", err)}
	}
	c.mu.Lock()
	c.s.Config = sec.Data[backup.ConfigKey]
	c.mu.Unlock()
	return 1, nil
}

// list is one kind of namespaced object read into the namespace's
// Objects.
type list struct {
	kind string
	read func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error)
}

func items[T any](dst *[]T, src []T, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	*dst = src
	return len(src), nil
}

var lists = []list{
	{"pods", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.Pods, l.Items, nil)
	}},
	{"deployments", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.Deployments, l.Items, nil)
	}},
	{"statefulsets", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.AppsV1().StatefulSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.StatefulSets, l.Items, nil)
	}},
	{"daemonsets", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.AppsV1().DaemonSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.DaemonSets, l.Items, nil)
	}},
	{"replicasets", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.AppsV1().ReplicaSets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.ReplicaSets, l.Items, nil)
	}},
	{"jobs", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.Jobs, l.Items, nil)
	}},
	{"cronjobs", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.BatchV1().CronJobs(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.CronJobs, l.Items, nil)
	}},
	{"services", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.Services, l.Items, nil)
	}},
	{"endpointslices", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.EndpointSlices, l.Items, nil)
	}},
	{"endpoints", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.CoreV1().Endpoints(ns).List(ctx, metav1.ListOptions{LabelSelector: topology.ClusterLabel})
		if err != nil {
			return 0, err
		}
		return items(&o.Endpoints, l.Items, nil)
	}},
	{"ingresses", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.NetworkingV1().Ingresses(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.Ingresses, l.Items, nil)
	}},
	{"networkpolicies", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.NetworkPolicies, l.Items, nil)
	}},
	{"persistentvolumeclaims", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.CoreV1().PersistentVolumeClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.PersistentVolumeClaims, l.Items, nil)
	}},
	{"configmaps", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.ConfigMaps, l.Items, nil)
	}},
	{"serviceaccounts", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.ServiceAccounts, l.Items, nil)
	}},
	{"events", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.Events, l.Items, nil)
	}},
	{"leases", func(ctx context.Context, cl kubernetes.Interface, ns string, o *Objects) (int, error) {
		l, err := cl.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		return items(&o.Leases, l.Items, nil)
	}},
}

func collectObjects(ctx context.Context, c *collection) (int, []string) {
	total := 0
	var skipped []string
	for _, ns := range c.s.Meta.Namespaces {
		o := &Objects{}
		for _, l := range lists {
			n, err := l.read(ctx, c.client, ns, o)
			if err != nil {
				skipped = append(skipped, why(l.kind+" in namespace "+ns, err))
				continue
			}
			total += n
		}
		c.mu.Lock()
		if cur := c.s.Namespaces[ns]; cur != nil {
			o.Secrets = cur.Secrets
		}
		c.s.Namespaces[ns] = o
		c.mu.Unlock()
	}
	return total, skipped
}

// collectSecrets keeps each Secret's name, type and keys, and the
// certificates among its values; no value leaves this function.
func collectSecrets(ctx context.Context, c *collection) (int, []string) {
	total := 0
	var skipped []string
	for _, ns := range c.s.Meta.Namespaces {
		l, err := c.client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			skipped = append(skipped, why("secrets in namespace "+ns, err))
			continue
		}
		var infos []SecretInfo
		var found []Certificate
		for _, s := range l.Items {
			info := SecretInfo{Name: s.Name, Type: string(s.Type), Labels: s.Labels, Annotations: withoutLastApplied(s.Annotations), Created: s.CreationTimestamp.UTC()}
			for k, v := range s.Data {
				info.Keys = append(info.Keys, k)
				if strings.HasSuffix(k, ".crt") || strings.HasSuffix(k, ".pem") {
					found = append(found, certs.Parse(ns, s.Name, k, v)...)
				}
			}
			sort.Strings(info.Keys)
			infos = append(infos, info)
		}
		total += len(infos)
		c.mu.Lock()
		if c.s.Namespaces[ns] == nil {
			c.s.Namespaces[ns] = &Objects{}
		}
		c.s.Namespaces[ns].Secrets = infos
		c.s.Certificates = append(c.s.Certificates, found...)
		c.mu.Unlock()
	}
	c.mu.Lock()
	slices.SortFunc(c.s.Certificates, func(a, b Certificate) int {
		return strings.Compare(a.Namespace+"/"+a.Secret+"/"+a.Key, b.Namespace+"/"+b.Secret+"/"+b.Key)
	})
	c.mu.Unlock()
	return total, skipped
}

// withoutLastApplied drops kubectl's copy of the whole object (which holds
// the values).
func withoutLastApplied(a map[string]string) map[string]string {
	const key = "kubectl.kubernetes.io/last-applied-configuration"
	if _, ok := a[key]; !ok {
		return a
	}
	out := map[string]string{}
	for k, v := range a {
		if k != key {
			out[k] = v
		}
	}
	return out
}

func collectCluster(ctx context.Context, c *collection) (int, []string) {
	var out ClusterObjects
	var skipped []string
	total := 0
	if l, err := c.client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		skipped = append(skipped, why("nodes", err))
	} else {
		out.Nodes, total = l.Items, total+len(l.Items)
	}
	if l, err := c.client.StorageV1().StorageClasses().List(ctx, metav1.ListOptions{}); err != nil {
		skipped = append(skipped, why("storage classes", err))
	} else {
		out.StorageClasses, total = l.Items, total+len(l.Items)
	}
	if l, err := c.client.CoreV1().PersistentVolumes().List(ctx, metav1.ListOptions{}); err != nil {
		skipped = append(skipped, why("persistent volumes", err))
	} else {
		out.PersistentVolumes, total = l.Items, total+len(l.Items)
	}
	if l, err := c.client.NetworkingV1().IngressClasses().List(ctx, metav1.ListOptions{}); err != nil {
		skipped = append(skipped, why("ingress classes", err))
	} else {
		out.IngressClasses, total = l.Items, total+len(l.Items)
	}
	if l, err := c.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.phase!=Succeeded,status.phase!=Failed"}); err != nil {
		skipped = append(skipped, why("the pods of every namespace (the nodes' allocations)", err))
	} else {
		out.Allocated = map[string]corev1.ResourceList{}
		for _, p := range l.Items {
			if p.Spec.NodeName == "" {
				continue
			}
			sum := out.Allocated[p.Spec.NodeName]
			if sum == nil {
				sum = corev1.ResourceList{corev1.ResourceCPU: resource.Quantity{}, corev1.ResourceMemory: resource.Quantity{}}
			}
			for _, ct := range p.Spec.Containers {
				for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
					if q, ok := ct.Resources.Requests[r]; ok {
						cur := sum[r]
						cur.Add(q)
						sum[r] = cur
					}
				}
			}
			out.Allocated[p.Spec.NodeName] = sum
		}
	}
	c.mu.Lock()
	out.DNS = c.s.Cluster.DNS // collectClusterDNS's, in the same phase
	c.s.Cluster = out
	c.mu.Unlock()
	return total, skipped
}

// collectClusterDNS reads the cluster's DNS pods: a service finds its
// databases by name, so DNS pods that are not ready, or all on a lost
// node, stop the whole platform while every pod of its own looks well.
// Their logs are read with the platform's (collectLogs).
func collectClusterDNS(ctx context.Context, c *collection) (int, []string) {
	l, err := c.client.CoreV1().Pods(preflight.DNSNamespace).List(ctx, metav1.ListOptions{LabelSelector: preflight.DNSSelector})
	if err != nil {
		return 0, []string{why("the cluster's DNS pods ("+preflight.DNSSelector+" in namespace "+preflight.DNSNamespace+")", err)}
	}
	pods := l.Items
	if pods == nil {
		pods = []corev1.Pod{}
	}
	c.mu.Lock()
	c.s.Cluster.DNS = pods
	c.mu.Unlock()
	if len(pods) == 0 {
		return 0, []string{"no pod labelled " + preflight.DNSSelector + " in namespace " + preflight.DNSNamespace + ": the cluster's DNS is not one onprem knows, and is not collected"}
	}
	return len(pods), nil
}

// helmRelease is the part of Helm's stored release that is read here.
type helmRelease struct {
	Name    string `json:"name"`
	Version int    `json:"version"`
	Info    struct {
		Status       string    `json:"status"`
		Description  string    `json:"description"`
		LastDeployed time.Time `json:"last_deployed"`
	} `json:"info"`
	Chart struct {
		Metadata struct {
			Name       string `json:"name"`
			Version    string `json:"version"`
			AppVersion string `json:"appVersion"`
		} `json:"metadata"`
	} `json:"chart"`
	Config json.RawMessage `json:"config"`
}

// decodeRelease reads Helm's storage format: base64 of a gzipped JSON
// release, inside the Secret's data.
func decodeRelease(data []byte) (*helmRelease, error) {
	raw, err := base64.StdEncoding.DecodeString(string(data))
	if err != nil {
		return nil, fmt.Errorf("not base64: %w", err)
	}
	if len(raw) > 2 && raw[0] == 0x1f && raw[1] == 0x8b {
		zr, err := gzip.NewReader(bytes.NewReader(raw))
		if err != nil {
			return nil, err
		}
		if raw, err = io.ReadAll(io.LimitReader(zr, 64<<20)); err != nil {
			return nil, err
		}
	}
	var r helmRelease
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func collectReleases(ctx context.Context, c *collection) (int, []string) {
	var out []Release
	var skipped []string
	total := 0
	for _, ns := range c.s.Meta.Namespaces {
		l, err := c.client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{LabelSelector: "owner=helm"})
		if err != nil {
			skipped = append(skipped, why("Helm releases in namespace "+ns, err))
			continue
		}
		byName := map[string]*Release{}
		for _, s := range l.Items {
			r, err := decodeRelease(s.Data["release"])
			if err != nil {
				skipped = append(skipped, fmt.Sprintf("Helm release Secret %s/%s: %v", ns, s.Name, err))
				continue
			}
			rel := byName[r.Name]
			if rel == nil {
				rel = &Release{Namespace: ns, Name: r.Name}
				byName[r.Name] = rel
			}
			rel.Revisions = append(rel.Revisions, Revision{Revision: r.Version, Status: r.Info.Status, Chart: r.Chart.Metadata.Name,
				ChartVersion: r.Chart.Metadata.Version, AppVersion: r.Chart.Metadata.AppVersion, Description: r.Info.Description,
				Deployed: r.Info.LastDeployed.UTC(), Values: r.Config})
			total++
		}
		for _, rel := range byName {
			slices.SortFunc(rel.Revisions, func(a, b Revision) int { return a.Revision - b.Revision })
			out = append(out, *rel)
		}
	}
	slices.SortFunc(out, func(a, b Release) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	c.mu.Lock()
	c.s.Releases = out
	c.mu.Unlock()
	return total, skipped
}

// healthAnswer is a platform service's readiness answer.
type healthAnswer struct {
	Ready bool              `json:"ready"`
	Deps  map[string]string `json:"deps"`
}

// collectHealth asks each platform service that has a readiness endpoint,
// through the API server's service proxy, how its dependencies answer it.
func collectHealth(ctx context.Context, c *collection) (int, []string) {
	ns := c.o.Namespace
	deps, err := c.client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, []string{why("deployments in namespace "+ns, err)}
	}
	svcs, err := c.client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, []string{why("services in namespace "+ns, err)}
	}
	type probe struct {
		svc       corev1.Service
		component string
		path      string
	}
	var probes []probe
	for _, d := range deps.Items {
		path := ""
		for _, ct := range d.Spec.Template.Spec.Containers {
			// The service chart asks readyz in its startup probe (its
			// readiness asks healthz); older charts in the readiness probe.
			for _, p := range []*corev1.Probe{ct.StartupProbe, ct.ReadinessProbe} {
				if p != nil && p.HTTPGet != nil && strings.HasSuffix(p.HTTPGet.Path, "readyz") && path == "" {
					path = p.HTTPGet.Path
				}
			}
		}
		if path == "" {
			continue
		}
		for _, s := range svcs.Items {
			if len(s.Spec.Selector) > 0 && len(s.Spec.Ports) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) {
				probes = append(probes, probe{svc: s, component: d.Labels[render.ComponentLabel], path: path})
				break
			}
		}
	}
	out := make([]Health, len(probes))
	sem := make(chan struct{}, c.o.Concurrency)
	var wg sync.WaitGroup
	for i, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			h := Health{Namespace: ns, Service: p.svc.Name, Component: p.component, Path: p.path}
			hctx, cancel := context.WithTimeout(ctx, healthTimeout)
			defer cancel()
			port := p.svc.Spec.Ports[0]
			portName := port.Name
			if portName == "" {
				portName = fmt.Sprint(port.Port)
			}
			body, err := c.client.CoreV1().Services(ns).ProxyGet("http", p.svc.Name, portName, p.path, nil).DoRaw(hctx)
			var a healthAnswer
			// A 503 carries the answer too.
			if jerr := json.Unmarshal(body, &a); jerr == nil && (a.Deps != nil || err == nil) {
				h.Answered, h.Ready, h.Deps = true, a.Ready, a.Deps
			} else if err != nil {
				h.Error = firstLine(err.Error())
			} else {
				h.Error = "answered something that is not a readiness report: " + firstLine(string(body))
			}
			out[i] = h
		}()
	}
	wg.Wait()
	c.mu.Lock()
	c.s.Health = out
	c.mu.Unlock()
	return len(out), nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// collectMongoDB asks the members of MongoDB's replica set, when its pods
// carry topology.MongoDBClusterLabel, for the set's status; the members
// that did not answer are listed as skipped.
func collectMongoDB(ctx context.Context, c *collection) (int, []string) {
	if c.o.MongoDB == nil {
		return 0, []string{"not asked"}
	}
	ns := c.o.Namespace
	pods, err := c.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: topology.MongoDBClusterLabel + "=" + topology.MongoDB})
	if err != nil {
		return 0, []string{why("MongoDB's members in namespace "+ns, err)}
	}
	if len(pods.Items) == 0 {
		return 0, nil
	}
	a := c.o.MongoDB.Ask(ctx, ns, pods.Items)
	c.mu.Lock()
	c.s.MongoDB = a
	c.mu.Unlock()
	n := 0
	if a.Status != nil {
		n = len(a.Status.Members)
	}
	return n, a.Errors
}

func collectPreflight(ctx context.Context, c *collection) (int, []string) {
	if c.o.Preflight == nil {
		return 0, []string{"not run"}
	}
	rep, err := c.o.Preflight(ctx, c.s)
	if rep != nil {
		c.mu.Lock()
		c.s.Preflight = rep
		c.mu.Unlock()
	}
	if err != nil && rep == nil {
		return 0, []string{why("preflight", err)}
	}
	if rep == nil {
		return 0, nil
	}
	return len(rep.Findings), nil
}

func collectAttachments(ctx context.Context, c *collection) (int, []string) {
	if c.o.Attachments == nil {
		return 0, []string{"not read"}
	}
	a, err := c.o.Attachments(ctx, c.s)
	if a != nil {
		c.mu.Lock()
		c.s.Attachments = a
		c.mu.Unlock()
	}
	var skipped []string
	if err != nil {
		skipped = append(skipped, why("runners and runtimes", err))
	}
	if a == nil {
		return 0, skipped
	}
	n := len(a.Runners) + len(a.Runtimes) + len(a.GitSources)
	for _, l := range a.ManagedClusters {
		n += len(l)
	}
	return n, append(skipped, a.Problems...)
}

func collectDrift(ctx context.Context, c *collection) (int, []string) {
	if c.o.Drift == nil {
		return 0, []string{"not compared"}
	}
	d, err := c.o.Drift(ctx, c.s)
	c.mu.Lock()
	c.s.Drift = d
	c.mu.Unlock()
	var skipped []string
	if err != nil {
		skipped = append(skipped, why("drift", err))
	}
	for _, x := range d {
		if x.Error != "" {
			skipped = append(skipped, "drift of "+x.Component+": "+x.Error)
		}
	}
	return len(d), skipped
}

// troubled says whether a pod is worth its logs when only those are
// collected: not ready, restarted, failed, or waiting.
func troubled(p *corev1.Pod) bool {
	if p.Status.Phase == corev1.PodFailed {
		return true
	}
	if p.Status.Phase == corev1.PodSucceeded {
		return false
	}
	for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
		if cs.RestartCount > 0 || cs.State.Waiting != nil || cs.LastTerminationState.Terminated != nil {
			return true
		}
	}
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status != corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// lostNodes names the nodes whose Ready condition is False or Unknown,
// with how ("not Ready", "unreachable"): their kubelets do not answer, and
// the API server, which reads a pod's log from its node's kubelet, waits
// for them. A node that cannot be listed, or carries no Ready condition,
// is not counted lost.
func lostNodes(ctx context.Context, c kubernetes.Interface) map[string]string {
	lost := map[string]string{}
	nodes, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return lost
	}
	for i := range nodes.Items {
		if how := topology.NodeLost(&nodes.Items[i]); how != "" {
			lost[nodes.Items[i].Name] = how
		}
	}
	return lost
}

func collectLogs(ctx context.Context, c *collection) (int, []string) {
	type want struct {
		ns, pod, container string
		previous           bool
		// down says why the log is not asked for: its node is lost.
		down string
	}
	var wants []want
	lost := lostNodes(ctx, c.client)
	// The platform's pods, then the cluster's DNS pods.
	type nsPod struct {
		ns string
		p  *corev1.Pod
	}
	var pods []nsPod
	for _, ns := range c.s.Meta.Namespaces {
		for i := range c.s.Objects(ns).Pods {
			pods = append(pods, nsPod{ns, &c.s.Objects(ns).Pods[i]})
		}
	}
	for i := range c.s.Cluster.DNS {
		pods = append(pods, nsPod{preflight.DNSNamespace, &c.s.Cluster.DNS[i]})
	}
	for _, np := range pods {
		ns, p := np.ns, np.p
		if c.o.TroubledLogsOnly && !troubled(p) {
			continue
		}
		down := ""
		if why, ok := lost[p.Spec.NodeName]; ok {
			down = "its node " + p.Spec.NodeName + " is " + why + ": the kubelet there does not answer"
		}
		statuses := map[string]corev1.ContainerStatus{}
		for _, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			statuses[cs.Name] = cs
		}
		for _, ct := range append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...) {
			cs, started := statuses[ct.Name]
			if !started || (cs.State.Running == nil && cs.State.Terminated == nil && cs.LastTerminationState.Terminated == nil) {
				// Never ran: there is no log to read.
				continue
			}
			if cs.State.Running != nil || cs.State.Terminated != nil {
				wants = append(wants, want{ns, p.Name, ct.Name, false, down})
			}
			if cs.RestartCount > 0 || cs.LastTerminationState.Terminated != nil {
				wants = append(wants, want{ns, p.Name, ct.Name, true, down})
			}
		}
	}
	out := make([]Log, len(wants))
	sem := make(chan struct{}, c.o.Concurrency)
	var wg sync.WaitGroup
	since := int64(c.o.Logs.Age / time.Second)
	for i, w := range wants {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			l := Log{Namespace: w.ns, Pod: w.pod, Container: w.container, Previous: w.previous}
			if w.down != "" {
				// The API server would wait for the lost node's kubelet
				// (tens of seconds, doctor's whole run with a node down).
				l.Error = w.down
				out[i] = l
				return
			}
			lines, limit := c.o.Logs.Lines, c.o.Logs.Bytes
			body, err := c.client.CoreV1().Pods(w.ns).GetLogs(w.pod, &corev1.PodLogOptions{Container: w.container, Previous: w.previous,
				TailLines: &lines, SinceSeconds: &since, LimitBytes: &limit}).DoRaw(ctx)
			if err != nil {
				l.Error = firstLine(err.Error())
			} else {
				l.Text = string(body)
			}
			out[i] = l
		}()
	}
	wg.Wait()
	var skipped []string
	n := 0
	for _, l := range out {
		if l.Error != "" {
			skipped = append(skipped, fmt.Sprintf("log of %s/%s container %s%s: %s", l.Namespace, l.Pod, l.Container, map[bool]string{true: " (previous)"}[l.Previous], l.Error))
		} else {
			n++
		}
	}
	if len(skipped) > 20 {
		skipped = append(skipped[:20], fmt.Sprintf("and %d more logs could not be read", len(skipped)-20))
	}
	c.mu.Lock()
	c.s.Logs = out
	c.mu.Unlock()
	return n, skipped
}
