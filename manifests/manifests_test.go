package manifests

import (
	"io/fs"
	"net/netip"
	"path"
	"reflect"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

const testNamespace = "ci-platform"

// components lists the folders of components/, so that a new component is
// built by these tests without being named here.
func components(t *testing.T) []string {
	t.Helper()
	entries, err := fs.ReadDir(FS, "components")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		t.Fatal("no components embedded")
	}
	return names
}

// memFS copies the embedded manifests (not the Go files) to /onprem of an
// in-memory filesystem, as the render pipeline does.
func memFS(t *testing.T) filesys.FileSystem {
	t.Helper()
	fsys := filesys.MakeFsInMemory()
	err := fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasSuffix(p, ".go") {
			return err
		}
		data, err := fs.ReadFile(FS, p)
		if err != nil {
			return err
		}
		return fsys.WriteFile(path.Join("/onprem", p), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

// platformKustomization is what the render pipeline writes: the base, the
// configured namespace, and the components the config selects.
func platformKustomization(namespace string, comps ...string) string {
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
	if namespace != "" {
		k += "namespace: " + namespace + "\n"
	}
	k += "resources:\n  - ../onprem/base\n"
	if len(comps) > 0 {
		k += "components:\n"
		for _, c := range comps {
			k += "  - ../onprem/components/" + c + "\n"
		}
	}
	return k
}

// object is one built object, decoded strictly into its typed form.
type object struct {
	kind, name, namespace string
	typed                 any
}

type build struct {
	yaml    string
	objects []object
}

func (b build) ids() []string {
	var ids []string
	for _, o := range b.objects {
		ids = append(ids, o.kind+"/"+o.name)
	}
	sort.Strings(ids)
	return ids
}

func (b build) policies() []networkingv1.NetworkPolicy {
	var ps []networkingv1.NetworkPolicy
	for _, o := range b.objects {
		if p, ok := o.typed.(*networkingv1.NetworkPolicy); ok {
			ps = append(ps, *p)
		}
	}
	return ps
}

func (b build) find(kind, name string) any {
	for _, o := range b.objects {
		if o.kind == kind && o.name == name {
			return o.typed
		}
	}
	return nil
}

// kustomize builds the kustomization at dir of fsys and decodes every
// object strictly; an unexpected kind or an unknown field fails the test.
func kustomize(t *testing.T, fsys filesys.FileSystem, dir string) build {
	t.Helper()
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(fsys, dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	all, err := rm.AsYaml()
	if err != nil {
		t.Fatal(err)
	}
	b := build{yaml: string(all)}
	for _, r := range rm.Resources() {
		data, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		var typed any
		switch r.GetKind() {
		case "Namespace":
			typed = &corev1.Namespace{}
		case "NetworkPolicy":
			typed = &networkingv1.NetworkPolicy{}
		case "Role":
			typed = &rbacv1.Role{}
		case "RoleBinding":
			typed = &rbacv1.RoleBinding{}
		case "Deployment":
			typed = &appsv1.Deployment{}
		case "StatefulSet":
			typed = &appsv1.StatefulSet{}
		case "Job":
			typed = &batchv1.Job{}
		case "DaemonSet":
			typed = &appsv1.DaemonSet{}
		case "Pod":
			typed = &corev1.Pod{}
		default:
			t.Fatalf("unexpected kind %s:\n%s", r.GetKind(), data)
		}
		if err := yaml.UnmarshalStrict(data, typed); err != nil {
			t.Fatalf("%s %s does not decode strictly: %v\n%s", r.GetKind(), r.GetName(), err, data)
		}
		b.objects = append(b.objects, object{kind: r.GetKind(), name: r.GetName(), namespace: r.GetNamespace(), typed: typed})
	}
	return b
}

func buildPlatform(t *testing.T, namespace string, comps ...string) build {
	t.Helper()
	fsys := memFS(t)
	if err := fsys.WriteFile("/platform/kustomization.yaml", []byte(platformKustomization(namespace, comps...))); err != nil {
		t.Fatal(err)
	}
	return kustomize(t, fsys, "/platform")
}

// checkNamespaced asserts the Namespace is the configured one, with Pod
// Security Admission, and that every namespaced object lives in it.
func checkNamespaced(t *testing.T, b build, namespace string) {
	t.Helper()
	var namespaces int
	for _, o := range b.objects {
		if o.kind == "Namespace" {
			namespaces++
			ns := o.typed.(*corev1.Namespace)
			if ns.Name != namespace {
				t.Errorf("Namespace named %q, want %q", ns.Name, namespace)
			}
			for _, mode := range []string{"enforce", "audit", "warn"} {
				key := "pod-security.kubernetes.io/" + mode
				if ns.Labels[key] != "restricted" || ns.Labels[key+"-version"] != "latest" {
					t.Errorf("Namespace label %s = %q (version %q), want restricted (latest)", key, ns.Labels[key], ns.Labels[key+"-version"])
				}
			}
			continue
		}
		if o.namespace != namespace {
			t.Errorf("%s %s in namespace %q, want %q", o.kind, o.name, o.namespace, namespace)
		}
		if rb, ok := o.typed.(*rbacv1.RoleBinding); ok {
			for _, s := range rb.Subjects {
				// Empty means the binding's namespace for a ServiceAccount
				// subject of a RoleBinding; anything else must be ours.
				if s.Namespace != "" && s.Namespace != namespace {
					t.Errorf("RoleBinding %s binds %s/%s, outside %s", rb.Name, s.Namespace, s.Name, namespace)
				}
			}
		}
	}
	if namespaces != 1 {
		t.Errorf("%d Namespace objects, want 1", namespaces)
	}
}

func TestManifestEveryComponentBuilds(t *testing.T) {
	comps := components(t)
	cases := map[string][]string{"base": nil, "all components": comps}
	for _, c := range comps {
		cases[c] = []string{c}
	}
	for name, cs := range cases {
		t.Run(name, func(t *testing.T) {
			b := buildPlatform(t, testNamespace, cs...)
			checkNamespaced(t, b, testNamespace)
		})
	}
}

// The namespace transformer of the pipeline's kustomization renames the
// Namespace object itself (metadata.name of a v1 Namespace is one of its
// field specs), so the base can name it "onprem" and still follow the
// configuration.
func TestManifestNamespaceFollowsConfig(t *testing.T) {
	for _, ns := range []string{"ci-platform", "onprem", "team-a-ci"} {
		checkNamespaced(t, buildPlatform(t, ns, components(t)...), ns)
	}
	// Without one, the base's own namespace.
	checkNamespaced(t, buildPlatform(t, ""), "onprem")
}

// peer is one end of a connection: a pod (namespace, its labels, its
// labels) or an address outside the pod network.
type peer struct {
	namespace string
	nsLabels  map[string]string
	labels    map[string]string
	ip        string
}

func podIn(namespace string, kv ...string) peer {
	l := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		l[kv[i]] = kv[i+1]
	}
	return peer{namespace: namespace, nsLabels: map[string]string{"kubernetes.io/metadata.name": namespace}, labels: l}
}

func pod(kv ...string) peer { return podIn(testNamespace, kv...) }

// podRuntime is a pod of the namespace of a GitOps runtime that onprem
// installed (the namespace labelled onprem.dev/runtime=runtime).
func podRuntime(namespace, runtime string, kv ...string) peer {
	p := podIn(namespace, kv...)
	p.nsLabels["onprem.dev/runtime"] = runtime
	return p
}
func addr(ip string) peer { return peer{ip: ip} }

func (p peer) isPod() bool       { return p.ip == "" }
func (p peer) inNamespace() bool { return p.isPod() && p.namespace == testNamespace }
func (p peer) String() string {
	if !p.isPod() {
		return p.ip
	}
	return p.namespace + "/" + labels.Set(p.labels).String()
}

func selects(t *testing.T, s *metav1.LabelSelector, l map[string]string) bool {
	t.Helper()
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		t.Fatalf("selector %v: %v", s, err)
	}
	return sel.Matches(labels.Set(l))
}

// peerMatches evaluates one NetworkPolicyPeer of a policy in testNamespace.
func peerMatches(t *testing.T, np networkingv1.NetworkPolicyPeer, other peer) bool {
	t.Helper()
	if np.IPBlock != nil {
		if other.isPod() {
			// Whether ipBlock matches pod addresses depends on the CNI;
			// these policies never rely on it.
			return false
		}
		ip := netip.MustParseAddr(other.ip)
		if !netip.MustParsePrefix(np.IPBlock.CIDR).Contains(ip) {
			return false
		}
		for _, e := range np.IPBlock.Except {
			if netip.MustParsePrefix(e).Contains(ip) {
				return false
			}
		}
		return true
	}
	if !other.isPod() {
		return false
	}
	if np.NamespaceSelector == nil {
		if other.namespace != testNamespace {
			return false
		}
	} else if !selects(t, np.NamespaceSelector, other.nsLabels) {
		return false
	}
	return np.PodSelector == nil || selects(t, np.PodSelector, other.labels)
}

func portMatches(t *testing.T, ports []networkingv1.NetworkPolicyPort, proto corev1.Protocol, port int32) bool {
	t.Helper()
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pp := corev1.ProtocolTCP
		if p.Protocol != nil {
			pp = *p.Protocol
		}
		if pp != proto {
			continue
		}
		if p.Port == nil {
			return true
		}
		if p.Port.StrVal != "" {
			t.Fatalf("named port %q: these policies use numbers only", p.Port.StrVal)
		}
		lo, hi := p.Port.IntVal, p.Port.IntVal
		if p.EndPort != nil {
			hi = *p.EndPort
		}
		if port >= lo && port <= hi {
			return true
		}
	}
	return false
}

func hasType(p networkingv1.NetworkPolicy, pt networkingv1.PolicyType) bool {
	for _, x := range p.Spec.PolicyTypes {
		if x == pt {
			return true
		}
	}
	return false
}

// allowedAt says whether the policies of testNamespace let self send to
// (egress) or receive from (ingress) other, the way NetworkPolicy is
// specified: a pod that no policy of that direction selects is open; a
// selected one only admits what some rule of those policies allows.
func allowedAt(t *testing.T, pols []networkingv1.NetworkPolicy, dir networkingv1.PolicyType, self, other peer, proto corev1.Protocol, port int32) bool {
	t.Helper()
	isolated := false
	for _, p := range pols {
		if !hasType(p, dir) || !selects(t, &p.Spec.PodSelector, self.labels) {
			continue
		}
		isolated = true
		if dir == networkingv1.PolicyTypeEgress {
			for _, r := range p.Spec.Egress {
				if portMatches(t, r.Ports, proto, port) && anyPeer(t, r.To, other) {
					return true
				}
			}
		} else {
			for _, r := range p.Spec.Ingress {
				if portMatches(t, r.Ports, proto, port) && anyPeer(t, r.From, other) {
					return true
				}
			}
		}
	}
	return !isolated
}

func anyPeer(t *testing.T, peers []networkingv1.NetworkPolicyPeer, other peer) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if peerMatches(t, p, other) {
			return true
		}
	}
	return false
}

// allowed says whether a connection from -> to on proto/port is open: the
// egress side if the source is in the namespace, the ingress side if the
// destination is (the other namespaces' policies are not ours).
func allowed(t *testing.T, pols []networkingv1.NetworkPolicy, from, to peer, proto corev1.Protocol, port int32) bool {
	t.Helper()
	if from.inNamespace() && !allowedAt(t, pols, networkingv1.PolicyTypeEgress, from, to, proto, port) {
		return false
	}
	if to.inNamespace() && !allowedAt(t, pols, networkingv1.PolicyTypeIngress, to, from, proto, port) {
		return false
	}
	return true
}

type flow struct {
	from, to peer
	proto    corev1.Protocol
	port     int32
	want     bool
}

func checkFlows(t *testing.T, pols []networkingv1.NetworkPolicy, flows []flow) {
	t.Helper()
	for _, f := range flows {
		if got := allowed(t, pols, f.from, f.to, f.proto, f.port); got != f.want {
			verb := "blocked"
			if got {
				verb = "allowed"
			}
			t.Errorf("%s -> %s %s/%d is %s", f.from, f.to, f.proto, f.port, verb)
		}
	}
}

const tcp, udp = corev1.ProtocolTCP, corev1.ProtocolUDP

func TestManifestDefaultDeny(t *testing.T) {
	pols := buildPlatform(t, testNamespace).policies()
	var found bool
	for _, p := range pols {
		if len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.PodSelector.MatchExpressions) == 0 &&
			hasType(p, networkingv1.PolicyTypeIngress) && hasType(p, networkingv1.PolicyTypeEgress) &&
			len(p.Spec.Ingress) == 0 && len(p.Spec.Egress) == 0 {
			found = true
		}
	}
	if !found {
		t.Fatal("no policy selects every pod and denies both directions")
	}
	plain := pod("app.kubernetes.io/name", "something")
	checkFlows(t, pols, []flow{
		{plain, pod("app.kubernetes.io/name", "other"), tcp, 8080, false},
		{plain, addr("203.0.113.9"), tcp, 443, false},
		{addr("203.0.113.9"), plain, tcp, 8080, false},
		{podIn("elsewhere"), plain, tcp, 8080, false},
	})
}

func TestManifestDNSFlow(t *testing.T) {
	pols := buildPlatform(t, testNamespace).policies()
	any := pod("app.kubernetes.io/name", "pipelines-api")
	dns := podIn("kube-system", "k8s-app", "kube-dns")
	checkFlows(t, pols, []flow{
		{any, dns, udp, 53, true},
		{any, dns, tcp, 53, true},
		{any, podIn("openshift-dns", "k8s-app", "kube-dns"), udp, 53, true},
		{any, dns, tcp, 80, false},
		// The selector version, not port 53 anywhere.
		{any, addr("8.8.8.8"), udp, 53, false},
		{any, podIn("kube-system", "k8s-app", "metrics-server"), udp, 53, false},
	})
}

var databases = []struct {
	name string
	port int32
}{{"mongodb", 27017}, {"postgresql", 5432}, {"redis", 6379}, {"rabbitmq", 5672}}

func TestManifestDatabaseFlows(t *testing.T) {
	pols := buildPlatform(t, testNamespace).policies()
	for _, db := range databases {
		client := pod("onprem.dev/client-"+db.name, "true")
		server := pod("app.kubernetes.io/name", db.name)
		checkFlows(t, pols, []flow{
			{client, server, tcp, db.port, true},
			{client, server, udp, db.port, false},
			{client, server, tcp, db.port + 1, false},
			{pod("app.kubernetes.io/name", "pipelines-ui"), server, tcp, db.port, false},
			{pod("onprem.dev/client-"+db.name, "false"), server, tcp, db.port, false},
			{client, podIn("other", "app.kubernetes.io/name", db.name), tcp, db.port, false},
			{podIn("other", "onprem.dev/client-"+db.name, "true"), server, tcp, db.port, false},
			{client, addr("192.0.2.10"), tcp, db.port, false},
		})
		for _, other := range databases {
			if other.name != db.name {
				checkFlows(t, pols, []flow{{client, pod("app.kubernetes.io/name", other.name), tcp, other.port, false}})
			}
		}
	}
}

func TestManifestIngressFlows(t *testing.T) {
	pols := buildPlatform(t, testNamespace).policies()
	controller := pod("app.kubernetes.io/name", "ingress-controller")
	routed := pod("app.kubernetes.io/name", "pipelines-ui", "onprem.dev/ingress", "true")
	worker := pod("app.kubernetes.io/name", "runtime-manager")
	checkFlows(t, pols, []flow{
		{addr("203.0.113.7"), controller, tcp, 8000, true},
		{addr("203.0.113.7"), controller, tcp, 8443, true},
		{podIn("monitoring"), controller, tcp, 8443, true},
		{addr("203.0.113.7"), controller, tcp, 8080, false},
		{controller, routed, tcp, 8080, true},
		{controller, routed, tcp, 9090, false},
		{controller, worker, tcp, 8080, false},
		{controller, addr("10.96.0.1"), tcp, 443, true},
		{controller, addr("172.18.0.2"), tcp, 6443, true},
		{controller, addr("203.0.113.7"), tcp, 80, false},
		// A GitOps runtime's pods, in a namespace labelled by onprem; not
		// another namespace's.
		{controller, podRuntime("gitops", "codefresh", "app.kubernetes.io/name", "app-proxy"), tcp, 3017, true},
		{controller, podIn("monitoring", "app.kubernetes.io/name", "app-proxy"), tcp, 3017, false},
		{pod("app.kubernetes.io/name", "runtime-manager"), podRuntime("gitops", "codefresh"), tcp, 3017, false},
		// Nothing but the platform's controller reaches a routed service:
		// not another pod of the namespace, nor a pod elsewhere.
		{pod("app.kubernetes.io/name", "runtime-manager"), routed, tcp, 8080, false},
		{pod(), routed, tcp, 8080, false},
		{podIn("ingress-nginx", "app.kubernetes.io/name", "ingress-nginx"), routed, tcp, 8080, false},
		{podIn("other", "app.kubernetes.io/name", "ingress-controller"), routed, tcp, 8080, false},
		{addr("203.0.113.7"), routed, tcp, 8080, false},
	})
}

// With the operator's own controller (ingress.mode existing, Gateway API),
// in a namespace of its own, routed services admit any namespace's pods on
// their http port, and only there.
func TestManifestIngressAnyNamespace(t *testing.T) {
	pols := buildPlatform(t, testNamespace, "ingress-any-namespace").policies()
	routed := pod("app.kubernetes.io/name", "pipelines-ui", "onprem.dev/ingress", "true")
	worker := pod("app.kubernetes.io/name", "runtime-manager")
	checkFlows(t, pols, []flow{
		{podIn("ingress-nginx", "app.kubernetes.io/name", "ingress-nginx"), routed, tcp, 8080, true},
		{pod("app.kubernetes.io/name", "ingress-controller"), routed, tcp, 8080, true},
		{podIn("ingress-nginx"), routed, tcp, 9090, false},
		{podIn("ingress-nginx"), worker, tcp, 8080, false},
		{addr("203.0.113.7"), routed, tcp, 8080, false},
	})
}

func TestManifestKubeAPIFlow(t *testing.T) {
	pols := buildPlatform(t, testNamespace).policies()
	api := pod("app.kubernetes.io/name", "runtime-manager", "onprem.dev/kube-api", "true")
	checkFlows(t, pols, []flow{
		{api, addr("10.96.0.1"), tcp, 443, true},
		{api, addr("172.18.0.2"), tcp, 6443, true},
		{api, addr("172.18.0.2"), tcp, 10250, false},
		{api, addr("172.18.0.2"), udp, 443, false},
		{pod("app.kubernetes.io/name", "pipelines-api"), addr("10.96.0.1"), tcp, 443, false},
	})
}

func TestManifestExternalDatabaseComponents(t *testing.T) {
	base := buildPlatform(t, testNamespace)
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			b := buildPlatform(t, testNamespace, "external-"+db.name)
			pols := b.policies()
			client := pod("onprem.dev/client-"+db.name, "true")
			ports := []int32{db.port}
			if db.name == "rabbitmq" {
				ports = []int32{5671, 5672}
			}
			var flows []flow
			for _, p := range ports {
				flows = append(flows,
					flow{client, addr("192.0.2.10"), tcp, p, true},
					flow{client, addr("198.51.100.200"), tcp, p, true},
					flow{pod("app.kubernetes.io/name", "pipelines-ui"), addr("192.0.2.10"), tcp, p, false},
				)
			}
			flows = append(flows,
				flow{client, addr("192.0.2.10"), tcp, 443, false},
				flow{client, addr("192.0.2.10"), udp, db.port, false},
				// Replaced, not added to: nothing in the namespace is the
				// server any more.
				flow{client, pod("app.kubernetes.io/name", db.name), tcp, db.port, false},
			)
			checkFlows(t, pols, flows)
			if b.find("NetworkPolicy", "onprem-"+db.name+"-server-ingress") != nil {
				t.Error("the server-side policy of an external database is left behind")
			}
			// The other databases keep their in-namespace flows.
			for _, other := range databases {
				if other.name == db.name {
					continue
				}
				checkFlows(t, pols, []flow{
					{pod("onprem.dev/client-"+other.name, "true"), pod("app.kubernetes.io/name", other.name), tcp, other.port, true},
					{pod("onprem.dev/client-"+other.name, "true"), addr("192.0.2.10"), tcp, other.port, false},
				})
			}
			if got, want := len(b.objects), len(base.objects)-1; got != want {
				t.Errorf("%d objects, want %d (base less the server-side policy)", got, want)
			}
		})
	}
}

func TestManifestPipelinesComponent(t *testing.T) {
	base := buildPlatform(t, testNamespace)
	b := buildPlatform(t, testNamespace, "pipelines")
	have := map[string]bool{}
	for _, id := range base.ids() {
		have[id] = true
	}
	var added []string
	for _, id := range b.ids() {
		if !have[id] {
			added = append(added, id)
		}
	}
	want := []string{"Role/helm-manager", "Role/runtime-manager", "RoleBinding/helm-manager", "RoleBinding/runtime-manager"}
	if !reflect.DeepEqual(added, want) || len(b.objects) != len(base.objects)+len(want) {
		t.Fatalf("pipelines adds %v (%d objects over %d), want exactly %v", added, len(b.objects), len(base.objects), want)
	}
	for _, id := range base.ids() {
		if strings.HasPrefix(id, "Role") {
			t.Errorf("%s in the base: RBAC belongs to the pipelines component", id)
		}
	}

	rules := map[string][]rbacv1.PolicyRule{
		"runtime-manager": {
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"onprem-runner-tokens"}, Verbs: []string{"get", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
		},
		"helm-manager": {
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}},
		},
	}
	for name, want := range rules {
		role, _ := b.find("Role", name).(*rbacv1.Role)
		if role == nil {
			t.Fatalf("no Role %s", name)
		}
		if !reflect.DeepEqual(role.Rules, want) {
			t.Errorf("Role %s rules:\n got  %+v\n want %+v", name, role.Rules, want)
		}
		rb, _ := b.find("RoleBinding", name).(*rbacv1.RoleBinding)
		if rb == nil {
			t.Fatalf("no RoleBinding %s", name)
		}
		if rb.RoleRef != (rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}) {
			t.Errorf("RoleBinding %s roleRef = %+v", name, rb.RoleRef)
		}
		if len(rb.Subjects) != 1 || rb.Subjects[0].Kind != rbacv1.ServiceAccountKind || rb.Subjects[0].Name != name {
			t.Errorf("RoleBinding %s subjects = %+v, want the ServiceAccount %s", name, rb.Subjects, name)
		}
	}
}

// The restricted and hardening components are meant for the charts'
// output; over the base (no workloads) they must change nothing.
func TestManifestHardeningLeavesBaseAlone(t *testing.T) {
	if a, b := buildPlatform(t, testNamespace).yaml, buildPlatform(t, testNamespace, "restricted", "hardening").yaml; a != b {
		t.Errorf("hardening changed the base:\n%s\n----\n%s", a, b)
	}
}

// hardeningFixture stands for a chart's rendered output.
const hardeningFixture = `
apiVersion: apps/v1
kind: Deployment
metadata:
  name: ui
spec:
  selector: {matchLabels: {app: ui}}
  template:
    metadata: {labels: {app: ui}}
    spec:
      containers: [{name: ui, image: ui:1}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: operator
  labels: {onprem.dev/kube-api: "true"}
spec:
  selector: {matchLabels: {app: operator}}
  template:
    metadata: {labels: {app: operator, onprem.dev/kube-api: "true"}}
    spec:
      automountServiceAccountToken: true
      containers: [{name: operator, image: operator:1}]
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: watcher
  labels: {onprem.dev/kube-api: "true"}
spec:
  selector: {matchLabels: {app: watcher}}
  template:
    metadata: {labels: {app: watcher}}
    spec:
      containers: [{name: watcher, image: watcher:1}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      enableServiceLinks: true
      securityContext:
        runAsUser: 999
        fsGroup: 999
      containers: [{name: db, image: db:1}]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: provision
spec:
  template:
    spec:
      restartPolicy: Never
      automountServiceAccountToken: true
      containers: [{name: provision, image: provision:1}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: agent, image: agent:1}]
---
apiVersion: v1
kind: Pod
metadata:
  name: test-connection
  annotations: {helm.sh/hook: test}
spec:
  restartPolicy: Never
  containers: [{name: test, image: test:1}]
---
apiVersion: v1
kind: Namespace
metadata:
  name: untouched
`

// hardened builds the hardening fixture with the given components.
func hardened(t *testing.T, components string) build {
	t.Helper()
	fsys := memFS(t)
	files := map[string]string{
		"/chart/rendered.yaml": hardeningFixture,
		"/chart/kustomization.yaml": `apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [rendered.yaml]
components: [` + components + `]
`,
	}
	for p, data := range files {
		if err := fsys.WriteFile(p, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	return kustomize(t, fsys, "/chart")
}

func TestManifestHardeningComponent(t *testing.T) {
	b := hardened(t, "../onprem/components/restricted, ../onprem/components/hardening")
	pods := map[string]*corev1.PodSpec{}
	for _, o := range b.objects {
		switch w := o.typed.(type) {
		case *appsv1.Deployment:
			pods["Deployment/"+o.name] = &w.Spec.Template.Spec
		case *appsv1.StatefulSet:
			pods["StatefulSet/"+o.name] = &w.Spec.Template.Spec
		case *batchv1.Job:
			pods["Job/"+o.name] = &w.Spec.Template.Spec
		}
	}
	if len(pods) != 5 {
		t.Fatalf("workloads %v, want the fixture's 5", pods)
	}
	for id, spec := range pods {
		sc := spec.SecurityContext
		if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod seccompProfile not RuntimeDefault: %+v", id, sc)
		}
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: pod runAsNonRoot not true: %+v", id, sc)
		}
		if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
			t.Errorf("%s: enableServiceLinks not false", id)
		}
		if len(spec.Containers) != 1 || spec.Containers[0].Image == "" {
			t.Errorf("%s: containers changed: %+v", id, spec.Containers)
		}
	}

	token := func(id string) *bool { return pods[id].AutomountServiceAccountToken }
	for _, id := range []string{"Deployment/ui", "StatefulSet/db", "Job/provision"} {
		if v := token(id); v == nil || *v {
			t.Errorf("%s: automountServiceAccountToken = %v, want false (not labelled kube-api)", id, v)
		}
	}
	if v := token("Deployment/operator"); v == nil || !*v {
		t.Errorf("Deployment/operator (kube-api): automountServiceAccountToken = %v, want its own true", v)
	}
	if v := token("Deployment/watcher"); v != nil {
		t.Errorf("Deployment/watcher (kube-api): automountServiceAccountToken = %v, want it left unset", *v)
	}

	// Strategic merge keeps what the chart set beside the hardened fields.
	db := pods["StatefulSet/db"].SecurityContext
	if db == nil || db.RunAsUser == nil || *db.RunAsUser != 999 || db.FSGroup == nil || *db.FSGroup != 999 {
		t.Errorf("StatefulSet/db: the chart's runAsUser/fsGroup were lost: %+v", db)
	}
	if ns, _ := b.find("Namespace", "untouched").(*corev1.Namespace); ns == nil || len(ns.Labels) != 0 || len(ns.Annotations) != 0 {
		t.Errorf("hardening touched a Namespace: %+v", ns)
	}
}

// An upstream chart's output (a GitOps runtime's) gets the restricted
// component alone: the Pod Security fields, on bare Pods (Helm test hooks)
// and DaemonSets too, and nothing of the platform's own hardening.
func TestManifestRestrictedComponent(t *testing.T) {
	b := hardened(t, "../onprem/components/restricted")
	n := 0
	for _, o := range b.objects {
		var spec *corev1.PodSpec
		switch w := o.typed.(type) {
		case *appsv1.Deployment:
			spec = &w.Spec.Template.Spec
		case *appsv1.StatefulSet:
			spec = &w.Spec.Template.Spec
		case *batchv1.Job:
			spec = &w.Spec.Template.Spec
		case *appsv1.DaemonSet:
			spec = &w.Spec.Template.Spec
		case *corev1.Pod:
			spec = &w.Spec
		default:
			continue
		}
		n++
		sc := spec.SecurityContext
		if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: not restricted: %+v", o.name, sc)
		}
		if want := o.name == "db"; (spec.EnableServiceLinks != nil) != want || (want && !*spec.EnableServiceLinks) {
			t.Errorf("%s: enableServiceLinks changed by the restricted component: %v", o.name, spec.EnableServiceLinks)
		}
		if o.name == "ui" && spec.AutomountServiceAccountToken != nil {
			t.Errorf("%s: automountServiceAccountToken set by the restricted component", o.name)
		}
	}
	if n != 7 {
		t.Errorf("%d workloads, want the fixture's 7", n)
	}
}
