package snapshot

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	restclient "k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"onprem.dev/onprem/installer/backup"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/preflight"
)

const platformNS = "platform"

func certPEM(t *testing.T, cn string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn}, DNSNames: []string{cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// helmSecret is a Helm release revision as Helm stores it: base64 of a
// gzipped JSON release.
func helmSecret(t *testing.T, ns, name string, rev int, status string) *corev1.Secret {
	t.Helper()
	rel := map[string]any{"name": name, "version": rev,
		"info":   map[string]any{"status": status, "description": "Upgrade complete", "last_deployed": "2026-11-28T04:00:00Z"},
		"chart":  map[string]any{"metadata": map[string]any{"name": name, "version": "1.0." + string(rune('0'+rev)), "appVersion": "2.0"}},
		"config": map[string]any{"replicas": rev}}
	raw, err := json.Marshal(rel)
	if err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(raw)
	_ = zw.Close()
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1." + name + ".v" + string(rune('0'+rev)), Namespace: ns,
		Labels: map[string]string{"owner": "helm", "name": name}},
		Type: "helm.sh/release.v1", Data: map[string][]byte{"release": []byte(base64.StdEncoding.EncodeToString(gz.Bytes()))}}
}

func readyPod(ns, name, node string, cpu string, statuses ...corev1.ContainerStatus) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("64Mi")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "main", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}, Ready: true}}},
	}
	if len(statuses) > 0 {
		p.Status.ContainerStatuses = statuses
	}
	return p
}

// dnsPod is one of the cluster's DNS pods (preflight.DNSSelector in
// kube-system), ready or not.
func dnsPod(name, node string, ready bool) *corev1.Pod {
	p := readyPod(preflight.DNSNamespace, name, node, "100m")
	p.Labels = map[string]string{"k8s-app": "kube-dns"}
	p.Spec.Containers[0].Name = "coredns"
	p.Status.ContainerStatuses[0].Name = "coredns"
	if !ready {
		p.Status.Conditions[0].Status = corev1.ConditionFalse
		p.Status.ContainerStatuses[0].Ready = false
	}
	return p
}

// proxyAnswer stands for a service's answer through the API server's
// service proxy.
type proxyAnswer struct {
	body []byte
	err  error
}

func (p proxyAnswer) DoRaw(context.Context) ([]byte, error) { return p.body, p.err }
func (p proxyAnswer) Stream(context.Context) (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(p.body)), p.err
}

var _ restclient.ResponseWrapper = proxyAnswer{}

// readyzDeployment is a service whose readyz the collector asks: in its
// startup probe as the service chart has it (its readiness asks healthz),
// or, for an older chart's, in its readiness probe.
func readyzDeployment(name string, inReadiness bool) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	get := func(path string) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt32(8080)}}}
	}
	c := corev1.Container{Name: "main", StartupProbe: get("/api/readyz"), ReadinessProbe: get("/api/healthz")}
	if inReadiness {
		c = corev1.Container{Name: "main", ReadinessProbe: get("/api/readyz")}
	}
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: platformNS, Labels: map[string]string{render.ComponentLabel: name}},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}}}
}

func service(name string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: platformNS},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
}

// cluster is a platform on a fake API server: a state naming a runner on
// this cluster and a runtime on another, Secrets with values, Helm
// releases, two nodes, services with readiness endpoints.
func cluster(t *testing.T) *fake.Clientset {
	t.Helper()
	c := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: backup.ConfigSecret, Namespace: platformNS}, Data: map[string][]byte{backup.ConfigKey: []byte("kind: Installation\n")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "onprem-api-mongodb", Namespace: platformNS,
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"password":"aHVudGVyMg=="}}`, "note": "kept"}},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"password": []byte("hunter2"), "database": []byte("api")}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "onprem-tls", Namespace: platformNS}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{"tls.crt": certPEM(t, "platform.example"), "tls.key": []byte("PRIVATE KEY hunter2")}},
		helmSecret(t, platformNS, "pipelines", 2, "deployed"),
		helmSecret(t, platformNS, "pipelines", 1, "superseded"),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.broken.v1", Namespace: platformNS, Labels: map[string]string{"owner": "helm"}},
			Data: map[string][]byte{"release": []byte("%%% not base64")}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}},
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}},
		readyPod(platformNS, "api-0", "node-1", "250m"),
		readyPod(platformNS, "ui-0", "node-1", "500m", corev1.ContainerStatus{Name: "main", RestartCount: 2, Ready: true,
			State:                corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 137}}}),
		readyPod(platformNS, "pending-0", "", "1", corev1.ContainerStatus{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}),
		readyPod("runner", "agent-0", "node-2", "100m"),
		readyPod("elsewhere", "other-0", "node-2", "2"),
		dnsPod("coredns-a", "cp-1", true), dnsPod("coredns-b", "cp-2", false),
		readyPod(preflight.DNSNamespace, "kube-proxy-x", "cp-1", "10m"),
		readyzDeployment("api", false), service("api"),
		readyzDeployment("ui", true), service("ui"),
		readyzDeployment("broker", false), service("broker"),
	)
	st := &state.State{Installation: "acme", Namespace: platformNS, Version: "1.2.3",
		Runners:  map[string]state.Runner{"r1": {Namespace: "runner", EngineNamespace: "runner-engine"}},
		Runtimes: map[string]state.Runtime{"remote": {Namespace: "rt-remote", Kubeconfig: "/elsewhere"}, "local": {Namespace: "rt"}},
		History:  []state.Operation{{ID: "op-1", Kind: state.KindInstall, Outcome: state.OutcomeSucceeded}}}
	if err := state.NewStore(c, platformNS).Save(context.Background(), st); err != nil {
		t.Fatal(err)
	}
	c.PrependProxyReactor("services", func(a k8stesting.Action) (bool, restclient.ResponseWrapper, error) {
		switch a.(k8stesting.ProxyGetAction).GetName() {
		case "api":
			return true, proxyAnswer{body: []byte(`{"ready":true,"deps":{"mongodb":"ok"}}`)}, nil
		case "ui": // a 503 carries the answer too
			return true, proxyAnswer{body: []byte(`{"ready":false,"deps":{"redis":"connection refused"}}`), err: errors.New("the server is currently unable to handle the request")}, nil
		default:
			return true, proxyAnswer{body: []byte("<html>hello</html>")}, nil
		}
	})
	return c
}

func collect(t *testing.T, c *fake.Clientset, o Options) *Snapshot {
	t.Helper()
	o.Namespace = platformNS
	o.Now = func() time.Time { return time.Date(2026, 11, 28, 5, 0, 0, 0, time.FixedZone("CET", 3600)) }
	s, err := Collect(context.Background(), &kube.Cluster{Client: c, Server: "https://api:6443", ServerVersion: "v1.36.3"}, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCollect(t *testing.T) {
	var mu sync.Mutex // the collectors of a phase end at once
	var progress []string
	s := collect(t, cluster(t), Options{Progress: func(r CollectorResult) {
		mu.Lock()
		defer mu.Unlock()
		progress = append(progress, r.Name)
	}})

	if !s.Meta.CollectedAt.Equal(time.Date(2026, 11, 28, 4, 0, 0, 0, time.UTC)) || s.Meta.CollectedAt.Location() != time.UTC {
		t.Errorf("CollectedAt %v, want the clock's time in UTC", s.Meta.CollectedAt)
	}
	if s.Meta.Limits != (LogLimits{Lines: DefaultLogLines, Age: DefaultLogAge, Bytes: DefaultLogBytes}) {
		t.Errorf("limits %+v, want the defaults", s.Meta.Limits)
	}
	// The platform's namespace and those of the runner and runtime on the
	// same cluster; not the remote runtime's, not an unrelated one.
	if want := []string{platformNS, "rt", "runner", "runner-engine"}; !slices.Equal(s.Meta.Namespaces, want) {
		t.Errorf("namespaces %v, want %v", s.Meta.Namespaces, want)
	}
	var order []string
	for _, c := range s.Meta.Collectors {
		order = append(order, c.Name)
	}
	if want := []string{"state", "config", "objects", "secrets", "cluster", "helm", "health", "preflight", "attachments", "drift", "mongodb-replica-set", "cluster-dns", "logs"}; !slices.Equal(order, want) {
		t.Errorf("collectors %v, want %v", order, want)
	}
	slices.Sort(progress)
	slices.Sort(order)
	if !slices.Equal(progress, order) {
		t.Errorf("progress told of %v", progress)
	}
	if s.State == nil || s.State.Version != "1.2.3" || string(s.Config) != "kind: Installation\n" {
		t.Errorf("state %+v, config %q", s.State, s.Config)
	}
	for name, want := range map[string]string{"preflight": "not run", "attachments": "not read", "drift": "not compared", "mongodb-replica-set": "not asked"} {
		if c := s.Collector(name); c == nil || !slices.Equal(c.Skipped, []string{want}) {
			t.Errorf("collector %s: %+v, want skipped %q", name, c, want)
		}
	}

	// Objects of the collected namespaces only.
	if got := len(s.Objects(platformNS).Pods); got != 3 {
		t.Errorf("%d pods in the platform namespace, want 3", got)
	}
	if got := len(s.Objects("runner").Pods); got != 1 {
		t.Errorf("%d pods in the runner's namespace, want 1", got)
	}
	if _, ok := s.Namespaces["elsewhere"]; ok {
		t.Error("an unrelated namespace was collected")
	}

	// Secrets: names, types and sorted keys; kubectl's copy of the values
	// dropped; certificates found.
	var api *SecretInfo
	for i, si := range s.Objects(platformNS).Secrets {
		if si.Name == "onprem-api-mongodb" {
			api = &s.Objects(platformNS).Secrets[i]
		}
	}
	if api == nil || !slices.Equal(api.Keys, []string{"database", "password"}) || api.Type != "Opaque" {
		t.Fatalf("Secret onprem-api-mongodb collected as %+v", api)
	}
	if _, ok := api.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; ok || api.Annotations["note"] != "kept" {
		t.Errorf("annotations %v: kubectl's copy must go, the others stay", api.Annotations)
	}
	if len(s.Certificates) != 1 || s.Certificates[0].Secret != "onprem-tls" || s.Certificates[0].Key != "tls.crt" || !slices.Equal(s.Certificates[0].DNSNames, []string{"platform.example"}) {
		t.Errorf("certificates %+v", s.Certificates)
	}

	// No value leaves the collection, in any written file.
	files, err := s.Files()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		for _, v := range []string{"hunter2", "aHVudGVyMg==", "PRIVATE KEY"} {
			if bytes.Contains(f.Data, []byte(v)) {
				t.Errorf("%s holds a Secret's value (%s)", f.Path, v)
			}
		}
	}

	// Helm: revisions oldest first, values kept; a broken release skipped
	// with its name.
	if len(s.Releases) != 1 || s.Releases[0].Name != "pipelines" {
		t.Fatalf("releases %+v", s.Releases)
	}
	revs := s.Releases[0].Revisions
	if len(revs) != 2 || revs[0].Revision != 1 || s.Releases[0].Last().Status != "deployed" || string(s.Releases[0].Last().Values) != `{"replicas":2}` {
		t.Errorf("revisions %+v", revs)
	}
	if h := s.Collector("helm"); h == nil || h.Items != 2 || len(h.Skipped) != 1 || !strings.Contains(h.Skipped[0], "sh.helm.release.v1.broken.v1") {
		t.Errorf("helm collector %+v", h)
	}

	// The nodes' allocations: the requests of the pods scheduled there.
	cpu := s.Cluster.Allocated["node-1"][corev1.ResourceCPU]
	if cpu.String() != "750m" {
		t.Errorf("node-1 cpu allocated %s, want 750m", cpu.String())
	}
	mem := s.Cluster.Allocated["node-2"][corev1.ResourceMemory]
	if mem.String() != "128Mi" {
		t.Errorf("node-2 memory allocated %s, want 128Mi", mem.String())
	}
	if len(s.Cluster.Nodes) != 2 {
		t.Errorf("%d nodes", len(s.Cluster.Nodes))
	}

	// Health: an answer, a 503 that carries an answer, and something that
	// is not a readiness report.
	health := map[string]Health{}
	for _, h := range s.Health {
		health[h.Service] = h
	}
	if h := health["api"]; !h.Answered || !h.Ready || h.Deps["mongodb"] != "ok" || h.Path != "/api/readyz" || h.Component != "api" {
		t.Errorf("api health %+v", h)
	}
	if h := health["ui"]; !h.Answered || h.Ready || h.Deps["redis"] != "connection refused" {
		t.Errorf("ui health %+v", h)
	}
	if h := health["broker"]; h.Answered || !strings.Contains(h.Error, "not a readiness report") {
		t.Errorf("broker health %+v", h)
	}

	// Logs: each running container's, the previous run's of the one that
	// restarted, none of a container that never ran.
	var logs []string
	for _, l := range s.Logs {
		logs = append(logs, LogPath(l))
	}
	slices.Sort(logs)
	want := []string{"logs/kube-system/coredns-a/coredns.log", "logs/kube-system/coredns-b/coredns.log",
		"logs/platform/api-0/main.log", "logs/platform/ui-0/main.log", "logs/platform/ui-0/main.previous.log", "logs/runner/agent-0/main.log"}
	if !slices.Equal(logs, want) {
		t.Errorf("logs %v, want %v", logs, want)
	}
}

func TestCollectTroubledLogsOnlyAndNoLogs(t *testing.T) {
	s := collect(t, cluster(t), Options{TroubledLogsOnly: true})
	var logs []string
	for _, l := range s.Logs {
		logs = append(logs, LogPath(l))
	}
	slices.Sort(logs)
	if want := []string{"logs/kube-system/coredns-b/coredns.log", "logs/platform/ui-0/main.log", "logs/platform/ui-0/main.previous.log"}; !slices.Equal(logs, want) {
		t.Errorf("troubled logs %v, want %v", logs, want)
	}

	s = collect(t, cluster(t), Options{NoLogs: true})
	if len(s.Logs) != 0 || s.Collector("logs") != nil || s.Meta.Limits != (LogLimits{}) {
		t.Errorf("NoLogs: %d logs, collector %+v, limits %+v", len(s.Logs), s.Collector("logs"), s.Meta.Limits)
	}
}

// The cluster's DNS pods, and only they of kube-system, are collected and
// written out, and read back from the files.
func TestCollectClusterDNS(t *testing.T) {
	s := collect(t, cluster(t), Options{NoLogs: true})
	var names []string
	for _, p := range s.Cluster.DNS {
		names = append(names, p.Name+"@"+p.Spec.NodeName)
	}
	slices.Sort(names)
	if want := []string{"coredns-a@cp-1", "coredns-b@cp-2"}; !slices.Equal(names, want) {
		t.Errorf("DNS pods %v, want %v", names, want)
	}
	if c := s.Collector("cluster-dns"); c == nil || c.Items != 2 || len(c.Skipped) != 0 {
		t.Errorf("collector cluster-dns: %+v", c)
	}
	if _, ok := s.Namespaces[preflight.DNSNamespace]; ok {
		t.Error("kube-system's objects were collected: only its DNS pods are")
	}
	_, byPath := filesByPath(t, s)
	if _, ok := byPath[FileClusterDNS]; !ok {
		t.Fatalf("no %s written", FileClusterDNS)
	}
	back, err := FromFiles(byPath)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Cluster.DNS) != 2 || back.Cluster.DNS[0].Labels["k8s-app"] != "kube-dns" {
		t.Errorf("read back %d DNS pods: %+v", len(back.Cluster.DNS), back.Cluster.DNS)
	}

	// No DNS pod: said, and nothing written.
	c := cluster(t)
	for _, n := range []string{"coredns-a", "coredns-b"} {
		if err := c.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), preflight.DNSNamespace, n); err != nil {
			t.Fatal(err)
		}
	}
	s = collect(t, c, Options{NoLogs: true})
	if col := s.Collector("cluster-dns"); col == nil || len(col.Skipped) != 1 || !strings.Contains(col.Skipped[0], "no pod labelled k8s-app=kube-dns in namespace kube-system") {
		t.Errorf("collector cluster-dns with no DNS pod: %+v", col)
	}

	// Forbidden: said, the rest collected.
	c = cluster(t)
	c.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == preflight.DNSNamespace {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("RBAC"))
		}
		return false, nil, nil
	})
	s = collect(t, c, Options{NoLogs: true})
	if col := s.Collector("cluster-dns"); col == nil || len(col.Skipped) != 1 || !strings.Contains(col.Skipped[0], "forbidden") || s.Cluster.DNS != nil {
		t.Errorf("collector cluster-dns, forbidden: %+v, DNS %v", col, s.Cluster.DNS)
	}
	if len(s.Objects(platformNS).Pods) != 3 {
		t.Errorf("the platform's pods not collected when DNS pods are forbidden")
	}
}

// A pod on a lost node (Ready Unknown or False) has its logs listed as
// not read, saying why, and never asked for: the API server would wait for
// that node's kubelet. Pods on the other nodes are read as before.
func TestCollectSkipsLogsOnLostNodes(t *testing.T) {
	c := cluster(t)
	for name, st := range map[string]corev1.ConditionStatus{"node-3": corev1.ConditionUnknown, "node-4": corev1.ConditionFalse} {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: st}}
		if err := c.Tracker().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	for pod, node := range map[string]string{"lost-0": "node-3", "lost-1": "node-4"} {
		if err := c.Tracker().Add(readyPod(platformNS, pod, node, "100m")); err != nil {
			t.Fatal(err)
		}
	}
	s := collect(t, c, Options{})
	errs := map[string]string{}
	for _, l := range s.Logs {
		errs[l.Pod] = l.Error
	}
	for pod, want := range map[string]string{
		"lost-0": "its node node-3 is unreachable (Ready Unknown): the kubelet there does not answer",
		"lost-1": "its node node-4 is not Ready: the kubelet there does not answer",
		"api-0":  "",
	} {
		if got, ok := errs[pod]; !ok || got != want {
			t.Errorf("log of %s: listed %v, error %q; want %q", pod, ok, got, want)
		}
	}
	// The fake's log requests carry no pod name: count them against the
	// logs that were read.
	asked, read := 0, 0
	for _, a := range c.Actions() {
		if a.GetVerb() == "get" && a.GetSubresource() == "log" {
			asked++
		}
	}
	for _, l := range s.Logs {
		if l.Error == "" {
			read++
		}
	}
	if asked != read {
		t.Errorf("%d log requests for %d logs read: a lost node's pod was asked for", asked, read)
	}
}

// A read that is forbidden is recorded as skipped, saying so, and the
// other collectors go on.
func TestCollectRecordsForbiddenReads(t *testing.T) {
	c := cluster(t)
	c.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "", errors.New("RBAC"))
	})
	s := collect(t, c, Options{NoLogs: true})
	cl := s.Collector("cluster")
	if cl == nil || len(cl.Skipped) != 1 || !strings.HasPrefix(cl.Skipped[0], "nodes: forbidden") {
		t.Fatalf("cluster collector %+v, want nodes skipped as forbidden", cl)
	}
	if len(s.Cluster.Nodes) != 0 || s.Cluster.Allocated["node-1"] == nil {
		t.Errorf("the other cluster reads did not go on: %+v", s.Cluster)
	}
}

// A collector that runs out of time is listed as skipped with what it had;
// the collection goes on. One whose context ends makes Collect fail.
func TestCollectTimeouts(t *testing.T) {
	o := Options{NoLogs: true, Timeout: 200 * time.Millisecond,
		Preflight: func(ctx context.Context, _ *Snapshot) (*preflight.Report, error) {
			<-ctx.Done()
			return &preflight.Report{Skipped: []string{"half"}}, ctx.Err()
		}}
	s := collect(t, cluster(t), o)
	p := s.Collector("preflight")
	if p == nil || !slices.ContainsFunc(p.Skipped, func(s string) bool { return strings.Contains(s, "the collector's time limit") }) {
		t.Errorf("preflight collector %+v, want a time limit noted", p)
	}
	if s.Preflight == nil || !slices.Equal(s.Preflight.Skipped, []string{"half"}) {
		t.Errorf("what the timed-out collector had was not kept: %+v", s.Preflight)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Collect(ctx, &kube.Cluster{Client: cluster(t)}, Options{Namespace: platformNS}); !errors.Is(err, context.Canceled) {
		t.Errorf("Collect with its context ended: %v", err)
	}
}

func TestTroubled(t *testing.T) {
	running := corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
	ready := []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	for _, tc := range []struct {
		name string
		st   corev1.PodStatus
		want bool
	}{
		{"healthy", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready, ContainerStatuses: []corev1.ContainerStatus{{State: running}}}, false},
		{"failed", corev1.PodStatus{Phase: corev1.PodFailed}, true},
		{"succeeded despite restarts", corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: []corev1.ContainerStatus{{RestartCount: 3}}}, false},
		{"restarted", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: ready, ContainerStatuses: []corev1.ContainerStatus{{State: running, RestartCount: 1}}}, true},
		{"init container waiting", corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{}}}}}, true},
		{"not ready", corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}, ContainerStatuses: []corev1.ContainerStatus{{State: running}}}, true},
	} {
		if got := troubled(&corev1.Pod{Status: tc.st}); got != tc.want {
			t.Errorf("%s: troubled = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDecodeRelease(t *testing.T) {
	plain := base64.StdEncoding.EncodeToString([]byte(`{"name":"x","version":3,"info":{"status":"failed"}}`))
	r, err := decodeRelease([]byte(plain))
	if err != nil || r.Name != "x" || r.Version != 3 || r.Info.Status != "failed" {
		t.Errorf("an uncompressed release: %+v, %v", r, err)
	}
	gz := helmSecret(t, "ns", "y", 2, "deployed").Data["release"]
	if r, err := decodeRelease(gz); err != nil || r.Name != "y" || r.Chart.Metadata.AppVersion != "2.0" {
		t.Errorf("a gzipped release: %+v, %v", r, err)
	}
	if _, err := decodeRelease([]byte("%%%")); err == nil || !strings.Contains(err.Error(), "not base64") {
		t.Errorf("not base64: %v", err)
	}
}

func TestFirstLine(t *testing.T) {
	if got := firstLine("  one\ntwo\n"); got != "one" {
		t.Errorf("firstLine = %q", got)
	}
	if got := firstLine(strings.Repeat("x", 400)); len(got) != 303 || !strings.HasSuffix(got, "...") {
		t.Errorf("a long line is cut to %d characters", len(got))
	}
}
