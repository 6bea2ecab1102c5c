package charts

// Tests of the infrastructure charts (ingress, mongodb, postgresql, redis,
// rabbitmq, nats, consul) and of db-provision: every rendering is decoded
// strictly into the typed Kubernetes objects (an unknown or misspelt field
// fails), then checked against the values contract (charts/README.md).

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/e2e/testservers"
)

const infraNamespace = "platform-ns"

// infraChart describes what the contract expects of one chart.
type infraChart struct {
	name      string // chart and folder name
	appName   string // app.kubernetes.io/name and the workload's name
	component string // app.kubernetes.io/component
	imageKeys []string
	stateful  bool // a single-server StatefulSet with a data volume
	// patroni: with global.availability high, a Patroni cluster whose
	// Service of the chart's name has no selector (Patroni keeps its
	// Endpoints on the primary) and whose -replicas Service selects the
	// replicas by their role.
	patroni bool
	// keeper: with global.availability high, the Service of the chart's
	// name has no selector (the keeper sidecar points its Endpoints at the
	// master).
	keeper bool
	// sidecars: containers beside the server (sidecars, init containers,
	// a helper Job's) that ask resources of their own (a request and a
	// memory limit), not the server's.
	sidecars []string
	// inits: the init containers allowed, each one short step before the
	// server starts (no probes; every other container needs them).
	inits []string
	// helperJobs: the name label of the chart's own Jobs, which must never
	// be the server's (its Service, budget and the installer's pod lists
	// select on it).
	helperJobs string
}

var infraCharts = []infraChart{
	{name: "ingress", appName: "ingress-controller", component: "ingress", imageKeys: []string{"controller"}},
	{name: "mongodb", appName: "mongodb", component: "database", imageKeys: []string{"mongodb"}, stateful: true,
		sidecars: []string{"keyfile", "replica-set"}, inits: []string{"keyfile"}, helperJobs: "mongodb-replica-set"},
	{name: "postgresql", appName: "postgresql", component: "database", imageKeys: []string{"postgresql", "postgresqlHA"}, stateful: true, patroni: true},
	{name: "redis", appName: "redis", component: "cache", imageKeys: []string{"redis", "redisHA"}, stateful: true, keeper: true, sidecars: []string{"sentinel", "keeper"}},
	{name: "rabbitmq", appName: "rabbitmq", component: "queue", imageKeys: []string{"rabbitmq"}, stateful: true},
	{name: "nats", appName: "nats", component: "queue", imageKeys: []string{"nats"}, stateful: true},
	{name: "consul", appName: "consul", component: "database", imageKeys: []string{"consul"}, stateful: true},
	{name: "db-provision", appName: "db-provision", component: "provisioning", imageKeys: []string{"mongodb", "postgresql"}},
}

func infraChartNamed(t *testing.T, name string) infraChart {
	t.Helper()
	for _, c := range infraCharts {
		if c.name == name {
			return c
		}
	}
	t.Fatalf("no chart %q", name)
	return infraChart{}
}

// infraRendering is one rendering of a chart, every document decoded
// strictly into its typed object.
type infraRendering struct {
	chart  string
	values map[string]any // the merged values the chart saw
	raw    string
	docs   []infraDoc

	deployments     []*appsv1.Deployment
	statefulSets    []*appsv1.StatefulSet
	jobs            []*batchv1.Job
	services        []*corev1.Service
	serviceAccounts []*corev1.ServiceAccount
	configMaps      []*corev1.ConfigMap
	pdbs            []*policyv1.PodDisruptionBudget
	clusterRoles    []*rbacv1.ClusterRole
	bindings        []*rbacv1.ClusterRoleBinding
	roles           []*rbacv1.Role
	roleBindings    []*rbacv1.RoleBinding
	ingressClasses  []*networkingv1.IngressClass
	networkPolicies []*networkingv1.NetworkPolicy
}

type infraDoc struct {
	template string
	kind     string
	name     string
	text     string
	meta     *objectMeta
}

type objectMeta struct {
	Name      string            `json:"name"`
	Namespace string            `json:"namespace"`
	Labels    map[string]string `json:"labels"`
}

// infraRender renders chart with values (over its values.yaml) as release
// "r-<chart>" in infraNamespace and decodes every document strictly.
func infraRender(t *testing.T, chart string, values map[string]any) (*infraRendering, error) {
	t.Helper()
	c, err := Load(chart)
	if err != nil {
		t.Fatal(err)
	}
	release := "r-" + chart
	ms, err := Template(c, release, infraNamespace, values)
	if err != nil {
		return nil, err
	}
	top, err := chartutil.ToRenderValues(c, values, common.ReleaseOptions{Name: release, Namespace: infraNamespace, IsInstall: true}, common.DefaultCapabilities)
	if err != nil {
		t.Fatal(err)
	}
	merged, err := top.Table("Values")
	if err != nil {
		t.Fatal(err)
	}
	r := &infraRendering{chart: chart, values: merged.AsMap()}
	var raw strings.Builder
	for _, m := range ms {
		raw.WriteString(m.Content + "\n")
		for _, text := range strings.Split(m.Content, "\n---") {
			text = strings.TrimPrefix(text, "---")
			if strings.TrimSpace(infraStripComments(text)) == "" {
				continue
			}
			d := infraDoc{template: m.Template, text: text}
			var head struct {
				Kind     string      `json:"kind"`
				Metadata *objectMeta `json:"metadata"`
			}
			if err := yaml.Unmarshal([]byte(text), &head); err != nil {
				t.Fatalf("%s: not YAML: %v\n%s", m.Template, err, text)
			}
			if head.Metadata == nil {
				t.Fatalf("%s: document without metadata:\n%s", m.Template, text)
			}
			d.kind, d.meta, d.name = head.Kind, head.Metadata, head.Metadata.Name
			var target any
			switch d.kind {
			case "Deployment":
				o := &appsv1.Deployment{}
				r.deployments, target = append(r.deployments, o), o
			case "StatefulSet":
				o := &appsv1.StatefulSet{}
				r.statefulSets, target = append(r.statefulSets, o), o
			case "Job":
				o := &batchv1.Job{}
				r.jobs, target = append(r.jobs, o), o
			case "Service":
				o := &corev1.Service{}
				r.services, target = append(r.services, o), o
			case "ServiceAccount":
				o := &corev1.ServiceAccount{}
				r.serviceAccounts, target = append(r.serviceAccounts, o), o
			case "ConfigMap":
				o := &corev1.ConfigMap{}
				r.configMaps, target = append(r.configMaps, o), o
			case "PodDisruptionBudget":
				o := &policyv1.PodDisruptionBudget{}
				r.pdbs, target = append(r.pdbs, o), o
			case "ClusterRole":
				o := &rbacv1.ClusterRole{}
				r.clusterRoles, target = append(r.clusterRoles, o), o
			case "ClusterRoleBinding":
				o := &rbacv1.ClusterRoleBinding{}
				r.bindings, target = append(r.bindings, o), o
			case "Role":
				o := &rbacv1.Role{}
				r.roles, target = append(r.roles, o), o
			case "RoleBinding":
				o := &rbacv1.RoleBinding{}
				r.roleBindings, target = append(r.roleBindings, o), o
			case "IngressClass":
				o := &networkingv1.IngressClass{}
				r.ingressClasses, target = append(r.ingressClasses, o), o
			case "NetworkPolicy":
				o := &networkingv1.NetworkPolicy{}
				r.networkPolicies, target = append(r.networkPolicies, o), o
			default:
				t.Fatalf("%s: unexpected kind %q (a chart never creates a Secret)", m.Template, d.kind)
			}
			if err := yaml.UnmarshalStrict([]byte(text), target); err != nil {
				t.Fatalf("%s: %s %s does not decode strictly: %v", m.Template, d.kind, d.name, err)
			}
			r.docs = append(r.docs, d)
		}
	}
	r.raw = raw.String()
	return r, nil
}

func infraMustRender(t *testing.T, chart string, values map[string]any) *infraRendering {
	t.Helper()
	r, err := infraRender(t, chart, values)
	if err != nil {
		t.Fatalf("%s: %v", chart, err)
	}
	return r
}

func infraStripComments(text string) string {
	var b strings.Builder
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// infraCases: the chart's own values and each of its ci/*.yaml files.
func infraCases(t *testing.T, chart string) map[string]map[string]any {
	t.Helper()
	cases := map[string]map[string]any{"defaults": nil}
	files, err := fs.Glob(FS, path.Join(chart, "ci", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := fs.ReadFile(FS, f)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := yaml.UnmarshalStrict(data, &v); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cases[path.Base(f)] = v
	}
	return cases
}

func infraDig(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func infraString(m map[string]any, keys ...string) string {
	v := infraDig(m, keys...)
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// infraPod is a pod template with the workload it belongs to.
type infraPod struct {
	owner      string
	ownerMeta  map[string]string
	replicas   int32
	selector   map[string]string
	template   corev1.PodTemplateSpec
	isJob      bool
	claimNames []string
}

func (r *infraRendering) pods() []infraPod {
	var pods []infraPod
	for _, d := range r.deployments {
		pods = append(pods, infraPod{owner: "Deployment/" + d.Name, ownerMeta: d.Labels, replicas: *d.Spec.Replicas, selector: d.Spec.Selector.MatchLabels, template: d.Spec.Template})
	}
	for _, s := range r.statefulSets {
		p := infraPod{owner: "StatefulSet/" + s.Name, ownerMeta: s.Labels, replicas: *s.Spec.Replicas, selector: s.Spec.Selector.MatchLabels, template: s.Spec.Template}
		for _, c := range s.Spec.VolumeClaimTemplates {
			p.claimNames = append(p.claimNames, c.Name)
		}
		pods = append(pods, p)
	}
	for _, j := range r.jobs {
		pods = append(pods, infraPod{owner: "Job/" + j.Name, ownerMeta: j.Labels, replicas: 1, template: j.Spec.Template, isJob: true})
	}
	return pods
}

// TestInfraChartsFollowTheContract renders every chart with its defaults and
// each ci file and checks what the contract asks of every object, pod and
// container.
func TestInfraChartsFollowTheContract(t *testing.T) {
	for _, ch := range infraCharts {
		for cname, vals := range infraCases(t, ch.name) {
			t.Run(ch.name+"/"+cname, func(t *testing.T) {
				r := infraMustRender(t, ch.name, vals)
				infraCheckClean(t, r)
				infraCheckLabels(t, ch, r)
				infraCheckWorkloads(t, ch, r)
				infraCheckNoSecretValues(t, r)
			})
		}
	}
}

// infraCheckClean: no empty values (null or a key without a value), no
// whitespace-only lines, valid names.
func infraCheckClean(t *testing.T, r *infraRendering) {
	t.Helper()
	if m := regexp.MustCompile(`(?m)^[ \t]+$`).FindString(r.raw); m != "" {
		t.Errorf("%s: whitespace-only line in the output", r.chart)
	}
	for _, d := range r.docs {
		var generic any
		if err := yaml.Unmarshal([]byte(d.text), &generic); err != nil {
			t.Fatal(err)
		}
		var walk func(p string, v any)
		walk = func(p string, v any) {
			switch x := v.(type) {
			case nil:
				t.Errorf("%s: %s %s: empty value at %s", d.template, d.kind, d.name, p)
			case map[string]any:
				for k, e := range x {
					walk(p+"."+k, e)
				}
			case []any:
				for i, e := range x {
					walk(fmt.Sprintf("%s[%d]", p, i), e)
				}
			}
		}
		walk("", generic)
		if errs := validation.IsDNS1123Subdomain(d.name); len(errs) > 0 {
			t.Errorf("%s: %s name %q: %v", d.template, d.kind, d.name, errs)
		}
		if d.kind == "Service" {
			if errs := validation.IsDNS1035Label(d.name); len(errs) > 0 {
				t.Errorf("Service name %q: %v", d.name, errs)
			}
		}
	}
}

func infraWantLabels(ch infraChart, r *infraRendering) map[string]string {
	return map[string]string{
		"app.kubernetes.io/name":       ch.appName,
		"app.kubernetes.io/instance":   "r-" + ch.name,
		"app.kubernetes.io/component":  ch.component,
		"app.kubernetes.io/part-of":    "onprem",
		"app.kubernetes.io/version":    infraString(r.values, "global", "platform", "version"),
		"app.kubernetes.io/managed-by": "Helm",
	}
}

func infraCheckLabelSet(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: label %s = %q, want %q", what, k, got[k], v)
		}
	}
	for k, v := range got {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			t.Errorf("%s: label key %q: %v", what, k, errs)
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			t.Errorf("%s: label %s value %q: %v", what, k, v, errs)
		}
	}
}

func infraCheckLabels(t *testing.T, ch infraChart, r *infraRendering) {
	t.Helper()
	want := infraWantLabels(ch, r)
	clusterScoped := map[string]bool{"ClusterRole": true, "ClusterRoleBinding": true, "IngressClass": true}
	for _, d := range r.docs {
		what := d.kind + "/" + d.name
		infraCheckLabelSet(t, what, d.meta.Labels, want)
		if clusterScoped[d.kind] {
			if d.meta.Namespace != "" {
				t.Errorf("%s: cluster-scoped object with a namespace", what)
			}
		} else if d.meta.Namespace != infraNamespace {
			t.Errorf("%s: namespace %q, want the release's %q", what, d.meta.Namespace, infraNamespace)
		}
	}
	selector := map[string]string{"app.kubernetes.io/name": ch.appName, "app.kubernetes.io/instance": "r-" + ch.name}
	// Long-running pods carry every label but the version: a new platform
	// version alone must not restart them. Jobs carry all of them.
	stable := map[string]string{}
	for k, v := range want {
		if k != "app.kubernetes.io/version" {
			stable[k] = v
		}
	}
	for _, p := range r.pods() {
		if p.isJob && ch.helperJobs != "" {
			helper := maps.Clone(want)
			helper["app.kubernetes.io/name"] = ch.helperJobs
			infraCheckLabelSet(t, p.owner+" pod template", p.template.Labels, helper)
		} else if p.isJob {
			infraCheckLabelSet(t, p.owner+" pod template", p.template.Labels, want)
		} else {
			infraCheckLabelSet(t, p.owner+" pod template", p.template.Labels, stable)
			if v, ok := p.template.Labels["app.kubernetes.io/version"]; ok {
				t.Errorf("%s pod template: label app.kubernetes.io/version=%s restarts it on every upgrade", p.owner, v)
			}
		}
		// Flow labels sit on the workload too.
		for k, v := range p.template.Labels {
			if strings.HasPrefix(k, "onprem.dev/") && p.ownerMeta[k] != v {
				t.Errorf("%s: flow label %s=%s on the pods but not on the workload", p.owner, k, v)
			}
		}
		if p.template.Labels["onprem.dev/ingress"] != "" {
			t.Errorf("%s: pods labelled onprem.dev/ingress: none of these is routed to by the ingress controller", p.owner)
		}
		if !p.isJob && !reflect.DeepEqual(p.selector, selector) {
			t.Errorf("%s: selector %v, want exactly %v", p.owner, p.selector, selector)
		}
	}
	for _, s := range r.services {
		want := selector
		if ch.patroni && infraString(r.values, "global", "availability") == "high" {
			switch s.Name {
			case ch.appName:
				// Patroni keeps this Service's Endpoints on the primary.
				want = nil
			case ch.appName + "-replicas":
				want = maps.Clone(selector)
				want["onprem.dev/patroni-cluster"] = ch.appName
				want["onprem.dev/postgresql-role"] = "replica"
			}
		}
		if ch.keeper && infraString(r.values, "global", "availability") == "high" && s.Name == ch.appName {
			want = nil // the keeper keeps its Endpoints on the master
		}
		if !reflect.DeepEqual(s.Spec.Selector, want) {
			t.Errorf("Service/%s: selector %v, want %v", s.Name, s.Spec.Selector, want)
		}
	}
	for _, s := range r.statefulSets {
		for _, c := range s.Spec.VolumeClaimTemplates {
			// Everything but the version, which changes on upgrades while a
			// claim template cannot change.
			for k, v := range want {
				if k == "app.kubernetes.io/version" {
					if _, ok := c.Labels[k]; ok {
						t.Errorf("StatefulSet/%s: claim template %s carries the version label: an upgrade could not update the StatefulSet", s.Name, c.Name)
					}
				} else if c.Labels[k] != v {
					t.Errorf("StatefulSet/%s: claim template %s: label %s = %q, want %q", s.Name, c.Name, k, c.Labels[k], v)
				}
			}
		}
	}
}

func infraWantImagePullSecrets(r *infraRendering) []corev1.LocalObjectReference {
	var refs []corev1.LocalObjectReference
	list, _ := infraDig(r.values, "global", "imagePullSecrets").([]any)
	for _, s := range list {
		refs = append(refs, corev1.LocalObjectReference{Name: fmt.Sprint(s)})
	}
	return refs
}

func infraCheckWorkloads(t *testing.T, ch infraChart, r *infraRendering) {
	t.Helper()
	pods := r.pods()
	if len(pods) == 0 {
		t.Fatalf("%s: no workload", ch.name)
	}
	var images []string
	for _, k := range ch.imageKeys {
		images = append(images, infraString(r.values, "images", k))
	}
	var wantResources corev1.ResourceRequirements
	data, _ := json.Marshal(r.values["resources"])
	if err := json.Unmarshal(data, &wantResources); err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		spec := p.template.Spec
		if spec.SecurityContext == nil || spec.SecurityContext.SeccompProfile == nil || spec.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod seccompProfile is not RuntimeDefault", p.owner)
		}
		if spec.SecurityContext != nil && (spec.SecurityContext.RunAsNonRoot == nil || !*spec.SecurityContext.RunAsNonRoot) {
			t.Errorf("%s: pod runAsNonRoot is not true", p.owner)
		}
		if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
			t.Errorf("%s: enableServiceLinks is not false (a Service named redis would set REDIS_PORT=tcp://...)", p.owner)
		}
		if !reflect.DeepEqual(spec.ImagePullSecrets, infraWantImagePullSecrets(r)) {
			t.Errorf("%s: imagePullSecrets %v, want %v", p.owner, spec.ImagePullSecrets, infraWantImagePullSecrets(r))
		}
		if len(p.claimNames) > 0 || p.isJob || len(spec.Volumes) > 0 {
			if spec.SecurityContext == nil || spec.SecurityContext.FSGroup == nil {
				t.Errorf("%s: volumes but no fsGroup", p.owner)
			}
		}
		// Every mount names a volume of the pod or a claim template; every
		// volume is mounted.
		volumes := map[string]bool{}
		for _, v := range spec.Volumes {
			volumes[v.Name] = true
		}
		for _, n := range p.claimNames {
			volumes[n] = true
		}
		mounted := map[string]bool{}
		containers := append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...)
		for _, c := range spec.InitContainers {
			if !slices.Contains(ch.inits, c.Name) {
				t.Errorf("%s: init container %s (they cannot have the probes every container needs)", p.owner, c.Name)
			}
		}
		for _, c := range containers {
			what := p.owner + " container " + c.Name
			if !slices.Contains(images, c.Image) {
				t.Errorf("%s: image %q is not one of images.%v (%v)", what, c.Image, ch.imageKeys, images)
			}
			if c.ImagePullPolicy != corev1.PullIfNotPresent {
				t.Errorf("%s: imagePullPolicy %q", what, c.ImagePullPolicy)
			}
			if slices.Contains(ch.sidecars, c.Name) {
				if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("%s: a sidecar asks resources of its own (CPU and memory requests, a memory limit): %v", what, c.Resources)
				}
			} else if !apiequality.Semantic.DeepEqual(c.Resources, wantResources) {
				t.Errorf("%s: resources %v, want the values' %v", what, c.Resources, wantResources)
			}
			infraCheckRestricted(t, what, c)
			if p.isJob || slices.Contains(ch.inits, c.Name) {
				if c.LivenessProbe != nil || c.ReadinessProbe != nil || c.StartupProbe != nil {
					t.Errorf("%s: a Job's container has probes", what)
				}
			} else if c.LivenessProbe == nil || c.ReadinessProbe == nil {
				t.Errorf("%s: liveness and readiness probes are required", what)
			}
			for _, m := range c.VolumeMounts {
				if !volumes[m.Name] {
					t.Errorf("%s: mounts %q, which is no volume", what, m.Name)
				}
				mounted[m.Name] = true
			}
		}
		for v := range volumes {
			if !mounted[v] {
				t.Errorf("%s: volume %q is never mounted", p.owner, v)
			}
		}
	}
	// A PodDisruptionBudget exactly for workloads with more than one replica.
	var multi []infraPod
	for _, p := range pods {
		if !p.isJob && p.replicas > 1 {
			multi = append(multi, p)
		}
	}
	if len(r.pdbs) != len(multi) {
		t.Fatalf("%d PodDisruptionBudgets for %d workloads with replicas > 1", len(r.pdbs), len(multi))
	}
	for i, pdb := range r.pdbs {
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
			t.Errorf("PodDisruptionBudget/%s: want maxUnavailable: 1 only", pdb.Name)
		}
		if !reflect.DeepEqual(pdb.Spec.Selector.MatchLabels, multi[i].selector) {
			t.Errorf("PodDisruptionBudget/%s: selector %v, want the workload's %v", pdb.Name, pdb.Spec.Selector.MatchLabels, multi[i].selector)
		}
	}
}

// infraCheckRestricted: the restricted security context of the contract.
func infraCheckRestricted(t *testing.T, what string, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Errorf("%s: no securityContext", what)
		return
	}
	switch {
	case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
		t.Errorf("%s: runAsNonRoot is not true", what)
	case sc.RunAsUser == nil || *sc.RunAsUser <= 0:
		t.Errorf("%s: runAsUser is not a numeric non-root user", what)
	case sc.RunAsGroup == nil:
		t.Errorf("%s: no runAsGroup", what)
	case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
		t.Errorf("%s: allowPrivilegeEscalation is not false", what)
	case sc.Privileged != nil && *sc.Privileged:
		t.Errorf("%s: privileged", what)
	case sc.Capabilities == nil || !reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
		t.Errorf("%s: capabilities are not drop [ALL]", what)
	case sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Errorf("%s: seccompProfile is not RuntimeDefault", what)
	case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
		t.Errorf("%s: root filesystem is not read-only", what)
	}
}

var infraCredentialName = regexp.MustCompile(`(?i)pass|secret|cookie|token|auth|user`)

// infraCheckNoSecretValues: credentials only through Secret references. A
// chart never gets a secret value, so none can be in its output; what could
// be is a literal credential in an environment variable, an argument or a
// configuration file.
func infraCheckNoSecretValues(t *testing.T, r *infraRendering) {
	t.Helper()
	for _, p := range r.pods() {
		for _, c := range p.template.Spec.Containers {
			for _, e := range c.Env {
				if infraCredentialName.MatchString(e.Name) && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
					t.Errorf("%s container %s: %s is not read from a Secret", p.owner, c.Name, e.Name)
				}
			}
			for _, a := range append(append([]string{}, c.Command...), c.Args...) {
				if regexp.MustCompile(`(?i)(requirepass|password|--pass|-p)[ =]+[^"$ -]`).MatchString(a) {
					t.Errorf("%s container %s: a literal credential in %q", p.owner, c.Name, a)
				}
			}
		}
	}
	for _, cm := range r.configMaps {
		for k, v := range cm.Data {
			if regexp.MustCompile(`(?im)^\s*(password|pass|authorization|default_pass|requirepass)\b`).MatchString(v) {
				t.Errorf("ConfigMap/%s %s: holds a credential setting", cm.Name, k)
			}
		}
	}
}

// infraEnvFromSecret returns "secret/key" for each Secret-backed variable of
// the container.
func infraEnvFromSecret(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			m[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	return m
}

func infraEnvValue(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name && e.ValueFrom == nil {
			return e.Value, true
		}
	}
	return "", false
}

func infraContainer(t *testing.T, r *infraRendering, name string) corev1.Container {
	t.Helper()
	for _, p := range r.pods() {
		for _, c := range p.template.Spec.Containers {
			if c.Name == name {
				return c
			}
		}
	}
	t.Fatalf("%s: no container %q", r.chart, name)
	return corev1.Container{}
}

func infraStatefulSet(t *testing.T, r *infraRendering) *appsv1.StatefulSet {
	t.Helper()
	if len(r.statefulSets) != 1 {
		t.Fatalf("%s: %d StatefulSets, want 1", r.chart, len(r.statefulSets))
	}
	return r.statefulSets[0]
}

// TestInfraSecretReferences: every credential comes from the contract's
// Secret and key, and follows global.databases.<db>.secretName.
func TestInfraSecretReferences(t *testing.T) {
	cases := []struct {
		chart, container string
		values           string
		want             map[string]string
	}{
		{"mongodb", "mongodb", "", map[string]string{
			"MONGO_INITDB_ROOT_USERNAME": "onprem-mongodb-admin/username",
			"MONGO_INITDB_ROOT_PASSWORD": "onprem-mongodb-admin/password"}},
		{"postgresql", "postgresql", "", map[string]string{
			"POSTGRES_USER":     "onprem-postgresql-admin/username",
			"POSTGRES_PASSWORD": "onprem-postgresql-admin/password"}},
		{"redis", "redis", "", map[string]string{
			"REDIS_PASSWORD": "onprem-redis/password",
			"REDISCLI_AUTH":  "onprem-redis/password"}},
		{"redis", "redis", "global: {databases: {redis: {secretName: other-redis}}}", map[string]string{
			"REDIS_PASSWORD": "other-redis/password",
			"REDISCLI_AUTH":  "other-redis/password"}},
		{"rabbitmq", "rabbitmq", "", map[string]string{
			"RABBITMQ_DEFAULT_USER": "onprem-rabbitmq/username",
			"RABBITMQ_DEFAULT_PASS": "onprem-rabbitmq/password"}},
		{"db-provision", "mongodb", "", map[string]string{
			"MONGODB_ADMIN_USERNAME": "onprem-mongodb-admin/username",
			"MONGODB_ADMIN_PASSWORD": "onprem-mongodb-admin/password"}},
		{"db-provision", "postgresql", "", map[string]string{
			"PGUSER":     "onprem-postgresql-admin/username",
			"PGPASSWORD": "onprem-postgresql-admin/password"}},
		{"db-provision", "mongodb", "global: {databases: {mongodb: {external: true, secretName: ext-mongo}}}", map[string]string{
			"MONGODB_HOST":           "ext-mongo/host",
			"MONGODB_PORT":           "ext-mongo/port",
			"MONGODB_TLS":            "ext-mongo/tls",
			"MONGODB_REPLICA_SET":    "ext-mongo/replicaSet", // optional: an external replica set's name
			"MONGODB_ADMIN_USERNAME": "ext-mongo/username",
			"MONGODB_ADMIN_PASSWORD": "ext-mongo/password"}},
		{"db-provision", "postgresql", "global: {databases: {postgresql: {external: true, secretName: ext-pg}}}", map[string]string{
			"PGHOST":         "ext-pg/host",
			"PGPORT":         "ext-pg/port",
			"POSTGRESQL_TLS": "ext-pg/tls",
			"PGUSER":         "ext-pg/username",
			"PGPASSWORD":     "ext-pg/password"}},
	}
	for _, tc := range cases {
		t.Run(tc.chart+"/"+tc.container+"/"+tc.values, func(t *testing.T) {
			r := infraMustRender(t, tc.chart, valuesOf(t, tc.values))
			got := infraEnvFromSecret(infraContainer(t, r, tc.container))
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Secret-backed environment:\n got %v\nwant %v", got, tc.want)
			}
		})
	}

	// Internal databases: host and port are literal values of the contract.
	r := infraMustRender(t, "db-provision", valuesOf(t, "global: {databases: {postgresql: {host: pg.example, port: 6432}}}"))
	pg := infraContainer(t, r, "postgresql")
	if h, _ := infraEnvValue(pg, "PGHOST"); h != "pg.example" {
		t.Errorf("PGHOST = %q", h)
	}
	if p, _ := infraEnvValue(pg, "PGPORT"); p != "6432" {
		t.Errorf("PGPORT = %q", p)
	}
	if _, ok := infraEnvValue(pg, "POSTGRESQL_TLS"); ok {
		t.Errorf("POSTGRESQL_TLS set for an internal database")
	}

	// The Erlang cookie: a file from the erlang-cookie key, mode 0400, copied
	// to $HOME/.erlang.cookie before the server starts.
	r = infraMustRender(t, "rabbitmq", valuesOf(t, "global: {databases: {rabbitmq: {secretName: other-rabbitmq}}}"))
	sts := infraStatefulSet(t, r)
	var cookie *corev1.Volume
	for i, v := range sts.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			cookie = &sts.Spec.Template.Spec.Volumes[i]
		}
	}
	if cookie == nil {
		t.Fatal("rabbitmq: no Secret volume for the Erlang cookie")
	}
	if cookie.Secret.SecretName != "other-rabbitmq" || len(cookie.Secret.Items) != 1 || cookie.Secret.Items[0].Key != "erlang-cookie" ||
		cookie.Secret.DefaultMode == nil || *cookie.Secret.DefaultMode != 0o400 {
		t.Errorf("rabbitmq: cookie volume %+v, want key erlang-cookie of other-rabbitmq, mode 0400", cookie.Secret)
	}
	rc := infraContainer(t, r, "rabbitmq")
	script := strings.Join(rc.Command, " ")
	for _, want := range []string{`"$HOME/.erlang.cookie"`, "umask 0377", "/etc/rabbitmq-cookie/erlang-cookie", "exec docker-entrypoint.sh rabbitmq-server"} {
		if !strings.Contains(script, want) {
			t.Errorf("rabbitmq: command %q lacks %q", script, want)
		}
	}
	if _, ok := infraEnvFromSecret(rc)["RABBITMQ_ERLANG_COOKIE"]; ok {
		t.Errorf("rabbitmq: the cookie is also in the environment")
	}
}

// TestInfraStorageClass: storageClassName from persistence, else global,
// else left out; "-" is an explicit "".
func TestInfraStorageClass(t *testing.T) {
	cases := []struct {
		values string
		want   *string
	}{
		{"persistence: {size: 3Gi}", nil},
		{"persistence: {size: 3Gi}\nglobal: {storageClass: standard}", ptrTo("standard")},
		{"persistence: {size: 3Gi, storageClass: fast}\nglobal: {storageClass: standard}", ptrTo("fast")},
		{"persistence: {size: 3Gi, storageClass: fast}", ptrTo("fast")},
		{`persistence: {size: 3Gi, storageClass: "-"}`, ptrTo("")},
	}
	for _, ch := range infraCharts {
		if !ch.stateful {
			continue
		}
		for _, tc := range cases {
			t.Run(ch.name+"/"+tc.values, func(t *testing.T) {
				r := infraMustRender(t, ch.name, valuesOf(t, tc.values))
				sts := infraStatefulSet(t, r)
				if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" {
					t.Fatalf("want one claim template called data")
				}
				claim := sts.Spec.VolumeClaimTemplates[0]
				if !reflect.DeepEqual(claim.Spec.StorageClassName, tc.want) {
					t.Errorf("storageClassName = %v, want %v", infraPtrString(claim.Spec.StorageClassName), infraPtrString(tc.want))
				}
				if got := claim.Spec.Resources.Requests.Storage().String(); got != "3Gi" {
					t.Errorf("size = %s, want 3Gi", got)
				}
				if !reflect.DeepEqual(claim.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
					t.Errorf("accessModes = %v", claim.Spec.AccessModes)
				}
				if tc.want == nil && strings.Contains(r.raw, "storageClassName") {
					t.Errorf("storageClassName rendered although no class is set")
				}
			})
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

func infraPtrString(p *string) string {
	if p == nil {
		return "<absent>"
	}
	return fmt.Sprintf("%q", *p)
}

// TestInfraReplicas: the single-server charts refuse more than one replica
// (copies would split the data) and accept 0; the ingress controller scales,
// with a PodDisruptionBudget and anti-affinity above 1.
func TestInfraReplicas(t *testing.T) {
	for _, ch := range infraCharts {
		if !ch.stateful {
			continue
		}
		t.Run(ch.name, func(t *testing.T) {
			_, err := infraRender(t, ch.name, valuesOf(t, "replicas: 2"))
			if err == nil || !strings.Contains(err.Error(), "replicas") {
				t.Errorf("replicas 2: error %v, want a refusal naming replicas", err)
			}
			r := infraMustRender(t, ch.name, valuesOf(t, "replicas: 0"))
			if got := *infraStatefulSet(t, r).Spec.Replicas; got != 0 {
				t.Errorf("replicas 0: got %d", got)
			}
			if len(r.pdbs) != 0 {
				t.Errorf("a PodDisruptionBudget for a stopped server")
			}
			sts := infraStatefulSet(t, infraMustRender(t, ch.name, nil))
			if sts.Spec.ServiceName != ch.appName+"-headless" {
				t.Errorf("serviceName %q, want %s-headless", sts.Spec.ServiceName, ch.appName)
			}
		})
	}
	for _, n := range []int{1, 2, 3} {
		r := infraMustRender(t, "ingress", valuesOf(t, fmt.Sprintf("replicas: %d", n)))
		d := r.deployments[0]
		if *d.Spec.Replicas != int32(n) {
			t.Errorf("ingress replicas %d: got %d", n, *d.Spec.Replicas)
		}
		if (len(r.pdbs) == 1) != (n > 1) || len(r.pdbs) > 1 {
			t.Errorf("ingress replicas %d: %d PodDisruptionBudgets", n, len(r.pdbs))
		}
		if (d.Spec.Template.Spec.Affinity != nil) != (n > 1) {
			t.Errorf("ingress replicas %d: anti-affinity %v", n, d.Spec.Template.Spec.Affinity)
		}
		// The spread over nodes: a rule with high availability (a lost
		// node must leave a controller serving), a preference otherwise.
		for _, availability := range []string{"single", "high"} {
			r := infraMustRender(t, "ingress", valuesOf(t, fmt.Sprintf("replicas: %d\nglobal: {availability: %s}", n, availability)))
			spread := r.deployments[0].Spec.Template.Spec.TopologySpreadConstraints
			if n == 1 {
				if len(spread) != 0 {
					t.Errorf("ingress replicas 1, %s: topology spread %v", availability, spread)
				}
				continue
			}
			want := corev1.ScheduleAnyway
			if availability == "high" {
				want = corev1.DoNotSchedule
			}
			if len(spread) != 2 || spread[0].TopologyKey != corev1.LabelHostname || spread[0].WhenUnsatisfiable != want ||
				spread[0].NodeTaintsPolicy == nil || *spread[0].NodeTaintsPolicy != corev1.NodeInclusionPolicyHonor ||
				spread[0].LabelSelector == nil || !reflect.DeepEqual(spread[0].LabelSelector.MatchLabels, r.deployments[0].Spec.Selector.MatchLabels) ||
				spread[1].TopologyKey != corev1.LabelTopologyZone || spread[1].WhenUnsatisfiable != corev1.ScheduleAnyway {
				t.Errorf("ingress replicas %d, %s: topology spread %+v, want over nodes (%s) and zones (ScheduleAnyway)", n, availability, spread, want)
			}
		}
	}
}

// TestInfraServices: the Services other charts connect to.
func TestInfraServices(t *testing.T) {
	want := map[string]map[string]int32{
		"mongodb":    {"mongodb": 27017},
		"postgresql": {"postgresql": 5432},
		"redis":      {"redis": 6379},
		"rabbitmq":   {"amqp": 5672, "management": 15672},
		"nats":       {"client": 4222},
		"consul":     {"http": 8500},
	}
	for chart, ports := range want {
		r := infraMustRender(t, chart, nil)
		var found bool
		for _, s := range r.services {
			if s.Name == chart+"-headless" {
				if s.Spec.ClusterIP != corev1.ClusterIPNone {
					t.Errorf("%s: %s is not headless", chart, s.Name)
				}
				continue
			}
			if s.Name != chart {
				t.Errorf("%s: unexpected Service %s", chart, s.Name)
				continue
			}
			found = true
			if s.Spec.Type != corev1.ServiceTypeClusterIP {
				t.Errorf("%s: Service type %s", chart, s.Spec.Type)
			}
			got := map[string]int32{}
			for _, p := range s.Spec.Ports {
				got[p.Name] = p.Port
				if p.TargetPort.StrVal != p.Name {
					t.Errorf("%s: port %s targets %v, want the container port of that name", chart, p.Name, p.TargetPort)
				}
			}
			if !reflect.DeepEqual(got, ports) {
				t.Errorf("%s: ports %v, want %v", chart, got, ports)
			}
		}
		if !found {
			t.Errorf("%s: no Service %s", chart, chart)
		}
	}
}

// TestInfraCommandArgs: the default programs, and the command/args
// overrides of the contract.
func TestInfraCommandArgs(t *testing.T) {
	mongo := func(values string) corev1.Container {
		return infraContainer(t, infraMustRender(t, "mongodb", valuesOf(t, values)), "mongodb")
	}
	c := mongo("")
	if c.Command != nil || !reflect.DeepEqual(c.Args, []string{"mongod", "--bind_ip_all", "--auth", "--wiredTigerCacheSizeGB", "0.25"}) {
		t.Errorf("mongodb defaults: command %q args %q", c.Command, c.Args)
	}
	c = mongo("resources: {limits: {memory: 8Gi}}")
	if !reflect.DeepEqual(c.Args[len(c.Args)-2:], []string{"--wiredTigerCacheSizeGB", "3.50"}) {
		t.Errorf("mongodb 8Gi: args %q, want a 3.50 GB cache", c.Args)
	}
	c = mongo("resources: {limits: null}")
	if !reflect.DeepEqual(c.Args, []string{"mongod", "--bind_ip_all", "--auth"}) {
		t.Errorf("mongodb without a limit: args %q", c.Args)
	}
	c = mongo("command: [/bin/server]\nargs: [--port, '27017']")
	if !reflect.DeepEqual(c.Command, []string{"/bin/server"}) || !reflect.DeepEqual(c.Args, []string{"--port", "27017"}) {
		t.Errorf("mongodb override: command %q args %q", c.Command, c.Args)
	}
	c = mongo("command: [/bin/server]")
	if c.Args != nil {
		t.Errorf("mongodb command override without args: args %q, want none", c.Args)
	}
	c = mongo("args: [mongod, --quiet]")
	if c.Command != nil || !reflect.DeepEqual(c.Args, []string{"mongod", "--quiet"}) {
		t.Errorf("mongodb args override: command %q args %q", c.Command, c.Args)
	}

	c = infraContainer(t, infraMustRender(t, "postgresql", nil), "postgresql")
	if c.Command != nil || c.Args != nil {
		t.Errorf("postgresql defaults: command %q args %q, want the image's", c.Command, c.Args)
	}
	if v, _ := infraEnvValue(c, "PGDATA"); v != "/var/lib/postgresql/data/pgdata" {
		t.Errorf("PGDATA = %q", v)
	}
	if got := strings.Join(c.ReadinessProbe.Exec.Command, " "); !strings.Contains(got, `pg_isready`) || !strings.Contains(got, `--host=127.0.0.1`) || !strings.Contains(got, `"$POSTGRES_USER"`) {
		t.Errorf("postgresql readiness: %q", got)
	}
	if c.LivenessProbe.TCPSocket == nil {
		t.Errorf("postgresql liveness is not a TCP check")
	}

	c = infraContainer(t, infraMustRender(t, "redis", nil), "redis")
	wantRedis := []string{"sh", "-c", `exec redis-server --port 6379 --requirepass "$REDIS_PASSWORD" --dir /data --appendonly yes --maxmemory 402653184 --maxmemory-policy noeviction`}
	if !reflect.DeepEqual(c.Command, wantRedis) || c.Args != nil {
		t.Errorf("redis command:\n got %q\nwant %q", c.Command, wantRedis)
	}
	if got := strings.Join(c.ReadinessProbe.Exec.Command, " "); !strings.Contains(got, "redis-cli") || !strings.Contains(got, "ping") {
		t.Errorf("redis readiness: %q", got)
	}
	c = infraContainer(t, infraMustRender(t, "redis", valuesOf(t, "command: [redis-server]\nargs: [--save, '']")), "redis")
	if !reflect.DeepEqual(c.Command, []string{"redis-server"}) || !reflect.DeepEqual(c.Args, []string{"--save", ""}) {
		t.Errorf("redis override: command %q args %q", c.Command, c.Args)
	}

	c = infraContainer(t, infraMustRender(t, "consul", nil), "consul")
	if !reflect.DeepEqual(c.Command, []string{"consul"}) || !slices.Contains(c.Args, "-bootstrap-expect=1") || !slices.Contains(c.Args, "-data-dir=/consul/data") || !slices.Contains(c.Args, "-ui") {
		t.Errorf("consul: command %q args %q", c.Command, c.Args)
	}
	if c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/v1/status/leader" || c.ReadinessProbe.HTTPGet.Port.StrVal != "http" {
		t.Errorf("consul readiness: %+v", c.ReadinessProbe)
	}

	c = infraContainer(t, infraMustRender(t, "nats", nil), "nats")
	if c.Command != nil || !reflect.DeepEqual(c.Args, []string{"--config", "/etc/nats/nats.conf"}) {
		t.Errorf("nats: command %q args %q", c.Command, c.Args)
	}
	if c.LivenessProbe.HTTPGet == nil || !strings.HasPrefix(c.LivenessProbe.HTTPGet.Path, "/healthz") || c.LivenessProbe.HTTPGet.Port.StrVal != "monitor" {
		t.Errorf("nats liveness: %+v", c.LivenessProbe)
	}
}

// TestInfraMemorySizing: servers that would size themselves from the node's
// memory are sized from the container's limit instead.
func TestInfraMemorySizing(t *testing.T) {
	cm := func(chart, values, key string) string {
		r := infraMustRender(t, chart, valuesOf(t, values))
		if len(r.configMaps) != 1 {
			t.Fatalf("%s: %d ConfigMaps", chart, len(r.configMaps))
		}
		return r.configMaps[0].Data[key]
	}
	if got := cm("rabbitmq", "", "90-onprem.conf"); !strings.Contains(got, "total_memory_available_override_value = 536870912\n") || !strings.Contains(got, "log.file = false") {
		t.Errorf("rabbitmq configuration:\n%s", got)
	}
	if got := cm("rabbitmq", "resources: {limits: {memory: 1.5G}}", "90-onprem.conf"); !strings.Contains(got, "= 1500000000\n") {
		t.Errorf("rabbitmq 1.5G:\n%s", got)
	}
	if got := cm("rabbitmq", "resources: {limits: null}", "90-onprem.conf"); strings.Contains(got, "total_memory") {
		t.Errorf("rabbitmq without a limit:\n%s", got)
	}
	if got := cm("nats", "persistence: {size: 10Gi}", "nats.conf"); !strings.Contains(got, "max_file_store: 9663676416\n") || !strings.Contains(got, "max_memory_store: 134217728\n") {
		t.Errorf("nats configuration:\n%s", got)
	}
	_, err := infraRender(t, "redis", valuesOf(t, "resources: {limits: {memory: lots}}"))
	if err == nil || !strings.Contains(err.Error(), "lots") {
		t.Errorf("an unreadable memory limit: error %v", err)
	}
	// A configuration change restarts the pod.
	a := infraStatefulSet(t, infraMustRender(t, "rabbitmq", nil)).Spec.Template.Annotations["checksum/config"]
	b := infraStatefulSet(t, infraMustRender(t, "rabbitmq", valuesOf(t, "resources: {limits: {memory: 1Gi}}"))).Spec.Template.Annotations["checksum/config"]
	if a == "" || a == b {
		t.Errorf("rabbitmq: checksum/config %q then %q", a, b)
	}
}

// TestInfraIngress: the Traefik controller's arguments, RBAC, Service and
// IngressClass.
func TestInfraIngress(t *testing.T) {
	type rule struct{ group, resource, verb string }
	rules := func(policy []rbacv1.PolicyRule) map[rule]bool {
		m := map[rule]bool{}
		for _, r := range policy {
			if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
				t.Errorf("unexpected rule %+v", r)
			}
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						m[rule{g, res, v}] = true
					}
				}
			}
		}
		return m
	}
	read := func(g string, resources ...string) []rule {
		var out []rule
		for _, r := range resources {
			for _, v := range []string{"get", "list", "watch"} {
				out = append(out, rule{g, r, v})
			}
		}
		return out
	}
	// Cluster-wide: only what is cluster-scoped. The Ingress provider's
	// reads (Secrets among them) are limited to the platform namespace.
	base := map[rule]bool{}
	for _, r := range append(read("networking.k8s.io", "ingressclasses"), rule{"", "nodes", "list"}, rule{"", "nodes", "watch"}) {
		base[r] = true
	}
	namespaced := map[rule]bool{}
	for _, r := range append(append(read("networking.k8s.io", "ingresses"), read("", "services", "secrets")...),
		rule{"networking.k8s.io", "ingresses/status", "update"},
		rule{"discovery.k8s.io", "endpointslices", "list"}, rule{"discovery.k8s.io", "endpointslices", "watch"}) {
		namespaced[r] = true
	}

	for _, gateway := range []bool{false, true} {
		r := infraMustRender(t, "ingress", valuesOf(t, fmt.Sprintf("gatewayAPI: {enabled: %v}\nclassName: platform", gateway)))
		if len(r.deployments) != 1 || len(r.clusterRoles) != 1 || len(r.bindings) != 1 || len(r.roles) != 1 || len(r.roleBindings) != 1 || len(r.serviceAccounts) != 1 || len(r.ingressClasses) != 1 || len(r.services) != 1 || len(r.configMaps) != 1 {
			t.Fatalf("gateway %v: unexpected objects: %v", gateway, r.docs)
		}
		for _, d := range r.docs {
			if d.name != "ingress-controller" && d.kind != "IngressClass" {
				t.Errorf("%s named %q, want ingress-controller", d.kind, d.name)
			}
		}
		if got := rules(r.roles[0].Rules); len(got) != len(namespaced) {
			t.Errorf("gateway %v: Role grants %v, want exactly %v", gateway, got, namespaced)
		} else {
			for k := range namespaced {
				if !got[k] {
					t.Errorf("gateway %v: Role lacks %+v", gateway, k)
				}
			}
		}
		if rb := r.roleBindings[0]; rb.Namespace != infraNamespace || rb.RoleRef.Kind != "Role" || rb.RoleRef.Name != "ingress-controller" || len(rb.Subjects) != 1 || rb.Subjects[0].Name != "ingress-controller" {
			t.Errorf("RoleBinding: %+v", rb)
		}
		// A service with no ready replica keeps its route (503), so that
		// its paths never fall to another service's shorter prefix.
		if !slices.Contains(r.deployments[0].Spec.Template.Spec.Containers[0].Args, "--providers.kubernetesingress.allowEmptyServices=true") {
			t.Errorf("the Ingress provider drops the routes of a service without ready replicas: %v", r.deployments[0].Spec.Template.Spec.Containers[0].Args)
		}
		// A stopping controller keeps accepting while the nodes still send
		// it connections (a drain refused one on kind), within its grace.
		ctl := r.deployments[0].Spec.Template.Spec
		for _, ep := range []string{"web", "websecure"} {
			if arg := "--entryPoints." + ep + ".transport.lifeCycle.requestAcceptGraceTimeout=10s"; !slices.Contains(ctl.Containers[0].Args, arg) {
				t.Errorf("the controller stops accepting on %s at once when it stops: %s missing", ep, arg)
			}
		}
		// Every route retries a connection a pod refused (a pod just
		// Ready whose address the network policy does not allow yet): the
		// middleware is defined in the ConfigMap the file provider reads,
		// and both entrypoints use it.
		checkRetryRefused(t, r, ctl)
		// A new controller waits before it is Ready: until the network
		// policy lets its own address through to the services' pods, its
		// requests to them are refused (a 502 through a drain on kind).
		if rp := ctl.Containers[0].ReadinessProbe; rp == nil || rp.InitialDelaySeconds < 3 {
			t.Errorf("controller readiness %+v: want an initial delay of 3 s or more", rp)
		}
		if g := ctl.TerminationGracePeriodSeconds; g == nil || *g < 10+10+5 {
			t.Errorf("terminationGracePeriodSeconds %v: shorter than 10 s of accepting, 10 s to finish and a margin", g)
		}
		if !slices.Contains(r.deployments[0].Spec.Template.Spec.Containers[0].Args, "--providers.kubernetesingress.namespaces="+infraNamespace) {
			t.Errorf("the Ingress provider is not limited to the platform namespace: %v", r.deployments[0].Spec.Template.Spec.Containers[0].Args)
		}
		got := rules(r.clusterRoles[0].Rules)
		var gatewayRules int
		for k := range got {
			if base[k] {
				continue
			}
			if gateway && (k.group == "gateway.networking.k8s.io" || k.group == "discovery.k8s.io" || k.resource == "namespaces" || k.resource == "configmaps" || k.resource == "services" || k.resource == "secrets") {
				gatewayRules++
				continue
			}
			t.Errorf("gateway %v: ClusterRole grants more than the providers need: %+v", gateway, k)
		}
		for k := range base {
			if !got[k] {
				t.Errorf("gateway %v: ClusterRole lacks %+v", gateway, k)
			}
		}
		if gateway {
			for _, k := range append(read("gateway.networking.k8s.io", "gatewayclasses", "gateways", "httproutes", "referencegrants"),
				rule{"gateway.networking.k8s.io", "httproutes/status", "update"}, rule{"gateway.networking.k8s.io", "gateways/status", "update"},
				rule{"", "namespaces", "list"}, rule{"", "namespaces", "watch"}) {
				if !got[k] {
					t.Errorf("Gateway API enabled: ClusterRole lacks %+v", k)
				}
			}
		}
		for k := range got {
			if k.verb != "get" && k.verb != "list" && k.verb != "watch" && !(k.verb == "update" && strings.HasSuffix(k.resource, "/status")) {
				t.Errorf("write access beyond a status: %+v", k)
			}
		}

		b := r.bindings[0]
		if b.RoleRef.Name != "ingress-controller" || len(b.Subjects) != 1 || b.Subjects[0].Kind != "ServiceAccount" || b.Subjects[0].Name != "ingress-controller" || b.Subjects[0].Namespace != infraNamespace {
			t.Errorf("ClusterRoleBinding: %+v", b)
		}
		if ic := r.ingressClasses[0]; ic.Name != "platform" || ic.Spec.Controller != "traefik.io/ingress-controller" {
			t.Errorf("IngressClass %s, controller %s", ic.Name, ic.Spec.Controller)
		}

		d := r.deployments[0]
		pod := d.Spec.Template.Spec
		if pod.ServiceAccountName != "ingress-controller" || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
			t.Errorf("the controller's pod must run as ingress-controller with a token")
		}
		if d.Spec.Template.Labels["onprem.dev/kube-api"] != "true" || d.Labels["onprem.dev/kube-api"] != "true" {
			t.Errorf("the controller talks to the Kubernetes API: onprem.dev/kube-api missing")
		}
		c := pod.Containers[0]
		if *c.SecurityContext.RunAsUser != 65532 {
			t.Errorf("runAsUser %d, want 65532", *c.SecurityContext.RunAsUser)
		}
		for _, a := range []string{
			"--providers.kubernetesingress=true",
			"--providers.kubernetesingress.ingressclass=platform",
			"--entryPoints.web.address=:8000/tcp",
			"--entryPoints.websecure.address=:8443/tcp",
			"--entryPoints.websecure.http.tls=true",
			"--ping=true",
			"--ping.entryPoint=traefik",
			"--entryPoints.traefik.address=:8080/tcp",
			"--global.checkNewVersion=false",
			"--global.sendAnonymousUsage=false",
			"--providers.kubernetesingress.ingressendpoint.publishedservice=" + infraNamespace + "/ingress-controller",
		} {
			if !slices.Contains(c.Args, a) {
				t.Errorf("args lack %s", a)
			}
		}
		if slices.Contains(c.Args, "--providers.kubernetesgateway=true") != gateway {
			t.Errorf("gateway %v: args %q", gateway, c.Args)
		}
		ports := map[string]int32{}
		for _, p := range c.Ports {
			ports[p.Name] = p.ContainerPort
		}
		if !reflect.DeepEqual(ports, map[string]int32{"web": 8000, "websecure": 8443, "traefik": 8080}) {
			t.Errorf("container ports %v", ports)
		}
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
			if p.HTTPGet == nil || p.HTTPGet.Path != "/ping" || p.HTTPGet.Port.StrVal != "traefik" {
				t.Errorf("probe %+v, want GET /ping on the traefik port", p)
			}
		}
	}

	svc := func(values string) *corev1.Service {
		r := infraMustRender(t, "ingress", valuesOf(t, values))
		return r.services[0]
	}
	type port struct{ port, target, node int32 }
	ports := func(s *corev1.Service) map[string]port {
		m := map[string]port{}
		for _, p := range s.Spec.Ports {
			m[p.Name] = port{p.Port, int32(map[string]int{"web": 8000, "websecure": 8443}[p.TargetPort.StrVal]), p.NodePort}
		}
		return m
	}
	s := svc("")
	if s.Spec.Type != corev1.ServiceTypeLoadBalancer || !reflect.DeepEqual(ports(s), map[string]port{"web": {80, 8000, 0}, "websecure": {443, 8443, 0}}) {
		t.Errorf("default Service: %s %v", s.Spec.Type, ports(s))
	}
	s = svc("serviceType: NodePort\nnodePorts: {http: 30080, https: 30443}")
	if s.Spec.Type != corev1.ServiceTypeNodePort || !reflect.DeepEqual(ports(s), map[string]port{"web": {80, 8000, 30080}, "websecure": {443, 8443, 30443}}) {
		t.Errorf("NodePort Service: %s %v", s.Spec.Type, ports(s))
	}
	s = svc("serviceType: NodePort\nnodePorts: {http: 30080}")
	if !reflect.DeepEqual(ports(s), map[string]port{"web": {80, 8000, 30080}, "websecure": {443, 8443, 0}}) {
		t.Errorf("NodePort Service, one node port: %v", ports(s))
	}
	s = svc("serviceType: ClusterIP\nnodePorts: {http: 30080, https: 30443}")
	if s.Spec.Type != corev1.ServiceTypeClusterIP || ports(s)["web"].node != 0 {
		t.Errorf("ClusterIP Service with node ports: %s %v", s.Spec.Type, ports(s))
	}
	if _, err := infraRender(t, "ingress", valuesOf(t, "serviceType: ExternalName")); err == nil || !strings.Contains(err.Error(), "serviceType") {
		t.Errorf("an invalid serviceType: error %v", err)
	}
}

// TestDBProvisionContainers: one container per database in use, the scripts
// and credentials mounted, the flow labels of what is used.
func TestDBProvisionContainers(t *testing.T) {
	cases := []struct {
		services   string
		containers []string
		mongodb    []string
		postgresql []string
	}{
		{"[{name: a, mongodb: true}, {name: b, postgresql: true}, {name: c, mongodb: true, postgresql: true}]", []string{"mongodb", "postgresql"}, []string{"a", "c"}, []string{"b", "c"}},
		{"[{name: a, mongodb: true, postgresql: false}, {name: ui}]", []string{"mongodb"}, []string{"a"}, nil},
		{"[{name: b, postgresql: true}]", []string{"postgresql"}, nil, []string{"b"}},
	}
	for _, tc := range cases {
		t.Run(tc.services, func(t *testing.T) {
			r := infraMustRender(t, "db-provision", valuesOf(t, "services: "+tc.services))
			if len(r.jobs) != 1 || len(r.configMaps) != 1 {
				t.Fatalf("%d Jobs and %d ConfigMaps, want 1 and 1", len(r.jobs), len(r.configMaps))
			}
			job, cm := r.jobs[0], r.configMaps[0]
			pod := job.Spec.Template.Spec
			var names []string
			for _, c := range pod.Containers {
				names = append(names, c.Name)
			}
			if !reflect.DeepEqual(names, tc.containers) {
				t.Errorf("containers %v, want %v", names, tc.containers)
			}
			if job.Spec.BackoffLimit == nil || *job.Spec.BackoffLimit != 6 {
				t.Errorf("backoffLimit %v, want 6", job.Spec.BackoffLimit)
			}
			if job.Spec.TTLSecondsAfterFinished != nil {
				t.Errorf("ttlSecondsAfterFinished is set: the installer reads the Job's result")
			}
			if pod.RestartPolicy != corev1.RestartPolicyNever {
				t.Errorf("restartPolicy %s", pod.RestartPolicy)
			}
			for db, list := range map[string][]string{"mongodb": tc.mongodb, "postgresql": tc.postgresql} {
				label := "onprem.dev/client-" + db
				for _, labels := range []map[string]string{job.Labels, job.Spec.Template.Labels} {
					if (labels[label] == "true") != (list != nil) {
						t.Errorf("%s = %q with services %v", label, labels[label], list)
					}
				}
				wantList := ""
				if list != nil {
					wantList = strings.Join(list, "\n") + "\n"
				}
				if cm.Data[db+"-services"] != wantList {
					t.Errorf("%s-services = %q, want %q", db, cm.Data[db+"-services"], wantList)
				}
				infraCheckCredentialsVolume(t, pod, db, list)
			}
			for _, c := range pod.Containers {
				// The scripts come from the ConfigMap, never inline.
				for _, a := range append(append([]string{}, c.Command...), c.Args...) {
					if strings.Contains(a, "\n") || len(a) > 80 {
						t.Errorf("container %s: an inline script in its command: %q", c.Name, a)
					}
				}
				var scripts bool
				for _, m := range c.VolumeMounts {
					scripts = scripts || (m.Name == "scripts" && m.MountPath == "/etc/onprem/db-provision" && m.ReadOnly)
				}
				if !scripts {
					t.Errorf("container %s: scripts not mounted read-only at /etc/onprem/db-provision", c.Name)
				}
				if *c.SecurityContext.RunAsUser != 999 {
					t.Errorf("container %s: runAsUser %d, want 999", c.Name, *c.SecurityContext.RunAsUser)
				}
			}
			// The ConfigMap carries the scripts as they are in files/.
			for key, file := range map[string]string{
				"mongodb-provision.js":     "files/mongodb-provision.js",
				"mongosh.conf":             "files/mongosh.conf",
				"postgresql-provision.sh":  "files/postgresql-provision.sh",
				"postgresql-provision.sql": "files/postgresql-provision.sql",
			} {
				db := strings.Split(key, "-")[0]
				if key == "mongosh.conf" {
					db = "mongodb"
				}
				want, err := fs.ReadFile(FS, path.Join("db-provision", file))
				if err != nil {
					t.Fatal(err)
				}
				got, ok := cm.Data[key]
				if ok != (db == "mongodb" && tc.mongodb != nil || db == "postgresql" && tc.postgresql != nil) {
					t.Errorf("ConfigMap key %s present: %v", key, ok)
				}
				if ok && got != string(want) {
					t.Errorf("ConfigMap key %s differs from %s", key, file)
				}
			}
		})
	}
}

func infraCheckCredentialsVolume(t *testing.T, pod corev1.PodSpec, db string, services []string) {
	t.Helper()
	var vol *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == db+"-credentials" {
			vol = &pod.Volumes[i]
		}
	}
	if services == nil {
		if vol != nil {
			t.Errorf("%s credentials volume without services", db)
		}
		return
	}
	if vol == nil || vol.Projected == nil {
		t.Fatalf("no projected %s-credentials volume", db)
	}
	if vol.Projected.DefaultMode == nil || *vol.Projected.DefaultMode != 0o440 {
		t.Errorf("%s credentials: defaultMode %v, want 0440", db, vol.Projected.DefaultMode)
	}
	var got []string
	owner := map[string]bool{}
	for _, s := range vol.Projected.Sources {
		if s.Secret == nil {
			t.Fatalf("%s credentials: a source that is no Secret", db)
		}
		svc := strings.TrimSuffix(strings.TrimPrefix(s.Secret.Name, "onprem-"), "-"+db)
		if s.Secret.Name != "onprem-"+svc+"-"+db {
			t.Errorf("Secret %q is not onprem-<service>-%s", s.Secret.Name, db)
		}
		var items []string
		for _, it := range s.Secret.Items {
			items = append(items, it.Key+"="+it.Path)
		}
		// PostgreSQL's owner role, which a rotation names (optional: the
		// Secret lacks it until then), follows each service's Secret.
		if db == "postgresql" && len(got) > 0 && got[len(got)-1] == svc && !owner[svc] {
			owner[svc] = true
			if !reflect.DeepEqual(items, []string{"owner=" + svc + "/owner"}) || s.Secret.Optional == nil || !*s.Secret.Optional {
				t.Errorf("Secret %s: the owner's source has items %v (optional %v), want only owner, optional", s.Secret.Name, items, s.Secret.Optional)
			}
			continue
		}
		got = append(got, svc)
		want := []string{"username=" + svc + "/username", "password=" + svc + "/password", "database=" + svc + "/database"}
		if !reflect.DeepEqual(items, want) {
			t.Errorf("Secret %s: items %v, want %v", s.Secret.Name, items, want)
		}
		if s.Secret.Optional != nil && *s.Secret.Optional {
			t.Errorf("Secret %s is optional: a missing one must stop the Job", s.Secret.Name)
		}
	}
	if !reflect.DeepEqual(got, services) {
		t.Errorf("%s credentials for %v, want %v", db, got, services)
	}
	if db == "postgresql" && len(owner) != len(services) {
		t.Errorf("postgresql credentials: the owner's source for %v, want one for each of %v", owner, services)
	}
}

// TestDBProvisionJobName: db-provision-<8 hex digits of the spec's sha256>;
// the same values give the same name, a change to the services, an image or
// anything else in the Job's spec gives another.
func TestDBProvisionJobName(t *testing.T) {
	name := func(values string) string {
		r := infraMustRender(t, "db-provision", valuesOf(t, values))
		if len(r.jobs) != 1 {
			t.Fatalf("%d Jobs", len(r.jobs))
		}
		n := r.jobs[0].Name
		if !regexp.MustCompile(`^db-provision-[0-9a-f]{8}$`).MatchString(n) {
			t.Errorf("Job name %q is not db-provision-<8 hex digits>", n)
		}
		return n
	}
	base := "services: [{name: a, mongodb: true}, {name: b, postgresql: true}]\n"
	first := name(base)
	if again := name(base); again != first {
		t.Errorf("same values, names %s and %s", first, again)
	}
	others := map[string]string{
		"a service more":      "services: [{name: a, mongodb: true}, {name: b, postgresql: true}, {name: c, mongodb: true}]\n",
		"a database flag":     "services: [{name: a, mongodb: true, postgresql: true}, {name: b, postgresql: true}]\n",
		"the mongodb image":   base + "images: {mongodb: 'docker.io/library/mongo:7.0.16'}",
		"the postgres image":  base + "images: {postgresql: 'docker.io/library/postgres:16.5'}",
		"the resources":       base + "resources: {limits: {memory: 300Mi}}",
		"an external MongoDB": base + "global: {databases: {mongodb: {external: true}}}",
		"the version":         base + "global: {platform: {version: 2.8.0}}",
	}
	seen := map[string]string{first: "base"}
	for what, values := range others {
		n := name(values)
		if prev, ok := seen[n]; ok {
			t.Errorf("changing %s keeps the name %s (as %s)", what, n, prev)
		}
		seen[n] = what
	}
	// Values the Job does not use leave it alone.
	if n := name(base + "global: {ingress: {className: other}}"); n != first {
		t.Errorf("an unrelated value renamed the Job: %s, %s", first, n)
	}
}

// TestDBProvisionServicesChecked: no Job without services; malformed
// entries are refused.
func TestDBProvisionServicesChecked(t *testing.T) {
	for _, values := range []string{"services: []", "services: [{name: ui}, {name: api, mongodb: false}]"} {
		c, err := Load("db-provision")
		if err != nil {
			t.Fatal(err)
		}
		ms, err := Template(c, "r", infraNamespace, valuesOf(t, values))
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 0 {
			t.Errorf("%s: rendered %d manifests, want none", values, len(ms))
		}
	}
	for values, want := range map[string]string{
		"services: [{name: Pipelines, mongodb: true}]":                   "not a DNS label",
		"services: [{mongodb: true}]":                                    "not a DNS label",
		"services: [{name: a, mongodb: true}, {name: a, mongodb: true}]": "listed twice",
		"services: [pipelines-api]":                                      "must be a map",
	} {
		if _, err := infraRender(t, "db-provision", valuesOf(t, values)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", values, err, want)
		}
	}
}

// TestDBProvisionPostgresqlScript runs the rendered shell script with stand-ins
// for pg_isready and psql: it waits for the server, hands psql each service's
// exact credentials through the environment only, and fails when psql does.
func TestDBProvisionPostgresqlScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	r := infraMustRender(t, "db-provision", valuesOf(t, "services: [{name: audit-manager, postgresql: true}, {name: analytics-reporter, postgresql: true}]"))
	dir := t.TempDir()
	for k, v := range r.configMaps[0].Data {
		infraWrite(t, filepath.Join(dir, "scripts", k), v)
	}
	script := filepath.Join(dir, "scripts", "postgresql-provision.sh")
	if out, err := exec.Command("sh", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("sh -n: %v\n%s", err, out)
	}
	secrets := map[string][3]string{
		"audit-manager":      {"audit", "pw with 'quotes' and \"more\" $HOME\n", "audit_db"},
		"analytics-reporter": {"analytics", "plain", "analytics_db"},
	}
	for svc, v := range secrets {
		infraWrite(t, filepath.Join(dir, "secrets", svc, "username"), v[0])
		infraWrite(t, filepath.Join(dir, "secrets", svc, "password"), v[1])
		infraWrite(t, filepath.Join(dir, "secrets", svc, "database"), v[2])
	}
	bin := filepath.Join(dir, "bin")
	// pg_isready fails twice, then succeeds.
	infraWrite(t, filepath.Join(bin, "pg_isready"), `#!/bin/sh
n=$(cat "$STATE/ready" 2>/dev/null || echo 0); echo $((n + 1)) > "$STATE/ready"
[ "$n" -ge 2 ]
`)
	// psql records its arguments and the three values, NUL-separated.
	infraWrite(t, filepath.Join(bin, "psql"), `#!/bin/sh
printf '%s\n' "$*" >> "$STATE/psql-args"
printf '%s\0%s\0%s\0' "$ONPREM_USERNAME" "$ONPREM_PASSWORD" "$ONPREM_DATABASE" >> "$STATE/psql-env"
[ -z "${PSQL_FAIL:-}" ]
`)
	for _, f := range []string{"pg_isready", "psql"} {
		if err := os.Chmod(filepath.Join(bin, f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	run := func(extra ...string) (string, string, error) {
		state := t.TempDir()
		cmd := exec.Command("sh", script)
		cmd.Env = append([]string{
			"PATH=" + bin + ":" + os.Getenv("PATH"),
			"STATE=" + state,
			"SECRETS_DIR=" + filepath.Join(dir, "secrets"),
			"PAUSE_SECONDS=0",
			"PGHOST=postgresql", "PGPORT=5432",
		}, extra...)
		out, err := cmd.CombinedOutput()
		return string(out), state, err
	}
	out, state, err := run()
	if err != nil {
		t.Fatalf("script failed: %v\n%s", err, out)
	}
	env, _ := os.ReadFile(filepath.Join(state, "psql-env"))
	want := "audit\x00" + secrets["audit-manager"][1] + "\x00audit_db\x00analytics\x00plain\x00analytics_db\x00"
	if string(env) != want {
		t.Errorf("psql got the values %q, want exactly %q", env, want)
	}
	args, _ := os.ReadFile(filepath.Join(state, "psql-args"))
	for _, line := range strings.Split(strings.TrimSpace(string(args)), "\n") {
		if !strings.Contains(line, "--set=ON_ERROR_STOP=1") || !strings.Contains(line, "--file=") || strings.Contains(line, "pw") || strings.Contains(line, "plain") {
			t.Errorf("psql arguments %q", line)
		}
	}
	if strings.Contains(out, "quotes") || strings.Contains(out, "plain") || !strings.Contains(out, "done: 2 service(s)") {
		t.Errorf("output:\n%s", out)
	}
	if out, _, err := run("PSQL_FAIL=1"); err == nil || !strings.Contains(out, "could not provision audit-manager") {
		t.Errorf("psql failing: err %v\n%s", err, out)
	}
	if out, _, err := run("ATTEMPTS=2"); err == nil || !strings.Contains(out, "not accepting connections after 2 attempts") {
		t.Errorf("server never ready: err %v\n%s", err, out)
	}
	if out, _, err := run("POSTGRESQL_TLS=true"); err != nil {
		t.Errorf("TLS: %v\n%s", err, out)
	}
}

func infraWrite(t *testing.T, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// infraMongoshHarness runs the provisioning script under Node.js with
// stand-ins for mongosh's globals (Mongo, print, sleep, quit) and for the
// mounted files, and prints what the script did as JSON.
const infraMongoshHarness = `
const vm = require('vm');
const realFs = require('fs');
const scenario = JSON.parse(process.env.SCENARIO);
const root = process.env.ROOT;
const calls = [];
const out = [];
let exitCode = 0;
const QUIT = {};
const fakeFs = {
  readFileSync(p, enc) {
    return realFs.readFileSync(root + p, enc);
  },
};
global.require = (m) => (m === 'fs' ? fakeFs : require(m));
global.print = (...a) => out.push(a.join(' '));
global.sleep = (ms) => calls.push(['sleep', ms]);
global.quit = (code) => { exitCode = code; throw QUIT; };
let connects = 0;
global.Mongo = function (uri) {
  connects++;
  calls.push(['connect', uri]);
  if (connects <= (scenario.failConnects || 0)) throw new Error('connect ECONNREFUSED');
  this.getDB = (name) => ({
    auth(u, p) {
      calls.push(['auth', name, u, p]);
      if (scenario.authError) { const e = new Error('Authentication failed.'); e.code = 18; throw e; }
      return { ok: 1 };
    },
    runCommand(cmd) { calls.push(['runCommand', name, cmd]); return { ok: 1 }; },
    getUser(u) {
      calls.push(['getUser', name, u]);
      return (scenario.existing || []).includes(name + '/' + u) ? { user: u } : null;
    },
    createUser(doc) { calls.push(['createUser', name, doc]); return { ok: 1 }; },
    updateUser(u, doc) { calls.push(['updateUser', name, u, doc]); return { ok: 1 }; },
  });
};
try {
  vm.runInThisContext(realFs.readFileSync(process.env.SCRIPT, 'utf8'), { filename: 'mongodb-provision.js' });
} catch (e) {
  if (e !== QUIT) { out.push('uncaught: ' + e.stack); exitCode = 99; }
}
process.stdout.write(JSON.stringify({ calls, out, exitCode }));
`

// TestDBProvisionMongoScript runs the rendered mongosh script under Node.js
// (mongosh is not available here) against a stand-in server: it creates the
// missing users, updates the existing ones, retries the connection, stops
// at once on bad admin credentials, refuses the server's own databases, and
// never prints a password.
func TestDBProvisionMongoScript(t *testing.T) {
	// Debian's Node.js, installed when missing (never a skip).
	node := testservers.EnsurePackage(t, "nodejs", "node")
	r := infraMustRender(t, "db-provision", valuesOf(t, "services: [{name: pipelines-api, mongodb: true}, {name: gitops-api, mongodb: true}]"))
	dir := t.TempDir()
	for k, v := range r.configMaps[0].Data {
		infraWrite(t, filepath.Join(dir, "etc/onprem/db-provision", k), v)
	}
	if out, err := exec.Command(node, "--check", filepath.Join(dir, "etc/onprem/db-provision/mongodb-provision.js")).CombinedOutput(); err != nil {
		t.Fatalf("node --check: %v\n%s", err, out)
	}
	infraWrite(t, filepath.Join(dir, "harness.js"), infraMongoshHarness)
	secret := func(svc, user, pass, db string) {
		base := filepath.Join(dir, "var/run/onprem/mongodb", svc)
		infraWrite(t, filepath.Join(base, "username"), user)
		infraWrite(t, filepath.Join(base, "password"), pass)
		infraWrite(t, filepath.Join(base, "database"), db)
	}
	secret("pipelines-api", "pipelines", "PIPELINES-PW", "pipelines")
	secret("gitops-api", "gitops", "GITOPS-PW\n", "gitops")

	type result struct {
		Calls    [][]any  `json:"calls"`
		Out      []string `json:"out"`
		ExitCode int      `json:"exitCode"`
	}
	run := func(scenario string, env ...string) result {
		cmd := exec.Command(node, filepath.Join(dir, "harness.js"))
		cmd.Env = append([]string{
			"PATH=" + os.Getenv("PATH"),
			"ROOT=" + dir,
			"SCRIPT=" + filepath.Join(dir, "etc/onprem/db-provision/mongodb-provision.js"),
			"SCENARIO=" + scenario,
			"MONGODB_HOST=mongodb", "MONGODB_PORT=27017",
			"MONGODB_ADMIN_USERNAME=root", "MONGODB_ADMIN_PASSWORD=ROOT-PW",
		}, env...)
		data, err := cmd.Output()
		if err != nil {
			t.Fatalf("node: %v", err)
		}
		var res result
		if err := json.Unmarshal(data, &res); err != nil {
			t.Fatalf("harness output %q: %v", data, err)
		}
		for _, line := range res.Out {
			for _, pw := range []string{"ROOT-PW", "PIPELINES-PW", "GITOPS-PW"} {
				if strings.Contains(line, pw) {
					t.Errorf("printed a password: %q", line)
				}
			}
		}
		for _, c := range res.Calls {
			if c[0] == "connect" && strings.Contains(fmt.Sprint(c[1]), "PW") {
				t.Errorf("a password in the connection string %v", c[1])
			}
		}
		return res
	}
	calls := func(res result, kind string) []string {
		var out []string
		for _, c := range res.Calls {
			if c[0] == kind {
				var b strings.Builder
				enc := json.NewEncoder(&b)
				enc.SetEscapeHTML(false)
				if err := enc.Encode(c[1:]); err != nil {
					t.Fatal(err)
				}
				out = append(out, strings.TrimSuffix(b.String(), "\n"))
			}
		}
		return out
	}

	res := run(`{"failConnects": 2, "existing": ["gitops/gitops"]}`)
	if res.ExitCode != 0 {
		t.Fatalf("exit %d: %v", res.ExitCode, res.Out)
	}
	if got := len(calls(res, "connect")); got != 3 {
		t.Errorf("%d connection attempts, want 3", got)
	}
	if got := len(calls(res, "sleep")); got != 2 {
		t.Errorf("%d pauses, want 2", got)
	}
	if got := calls(res, "connect"); !strings.Contains(got[0], "mongodb://mongodb:27017/admin?") || strings.Contains(got[0], "tls=true") {
		t.Errorf("connection string %s", got[0])
	}
	if got, want := calls(res, "auth"), []string{`["admin","root","ROOT-PW"]`}; !reflect.DeepEqual(got, want) {
		t.Errorf("auth %v, want %v", got, want)
	}
	if got, want := calls(res, "createUser"), []string{`["pipelines",{"pwd":"PIPELINES-PW","roles":[{"db":"pipelines","role":"readWrite"}],"user":"pipelines"}]`}; !reflect.DeepEqual(got, want) {
		t.Errorf("createUser %v, want %v", got, want)
	}
	if got, want := calls(res, "updateUser"), []string{`["gitops","gitops",{"pwd":"GITOPS-PW\n","roles":[{"db":"gitops","role":"readWrite"}]}]`}; !reflect.DeepEqual(got, want) {
		t.Errorf("updateUser %v, want %v (the exact password, trailing newline included)", got, want)
	}

	if res := run(`{}`, "MONGODB_TLS=true", "MONGODB_HOST=fd00::1"); !strings.Contains(calls(res, "connect")[0], "mongodb://[fd00::1]:27017/admin?") || !strings.Contains(calls(res, "connect")[0], "&tls=true") {
		t.Errorf("TLS and IPv6: %v", calls(res, "connect"))
	}
	if res := run(`{"authError": true}`); res.ExitCode != 1 || len(calls(res, "connect")) != 1 || len(calls(res, "createUser")) != 0 {
		t.Errorf("bad admin credentials: exit %d after %d attempts", res.ExitCode, len(calls(res, "connect")))
	}
	if res := run(`{"failConnects": 1000}`); res.ExitCode != 1 || len(calls(res, "connect")) != 60 {
		t.Errorf("server never up: exit %d after %d attempts", res.ExitCode, len(calls(res, "connect")))
	}
	secret("gitops-api", "gitops", "GITOPS-PW", "admin")
	if res := run(`{}`); res.ExitCode != 1 || len(calls(res, "updateUser")) != 0 || !strings.Contains(strings.Join(res.Out, "\n"), "belongs to the server") {
		t.Errorf("database admin: exit %d, %v", res.ExitCode, res.Out)
	}
	if res := run(`{}`, "MONGODB_ADMIN_PASSWORD="); res.ExitCode != 1 {
		t.Errorf("no admin password: exit %d", res.ExitCode)
	}
}

// TestInfraChartMetadata: apiVersion v2, version 1.0.0, appVersion the
// upstream version of the default image.
func TestInfraChartMetadata(t *testing.T) {
	for _, ch := range infraCharts {
		c, err := Load(ch.name)
		if err != nil {
			t.Fatal(err)
		}
		if c.Metadata.APIVersion != "v2" || c.Metadata.Version != "1.0.0" || c.Metadata.Name != ch.name {
			t.Errorf("%s: apiVersion %s, version %s, name %s", ch.name, c.Metadata.APIVersion, c.Metadata.Version, c.Metadata.Name)
		}
		image := infraString(c.Values, "images", ch.imageKeys[0])
		tag := image[strings.LastIndex(image, ":")+1:]
		if !strings.HasPrefix(tag, c.Metadata.AppVersion) {
			t.Errorf("%s: appVersion %s, default image %s", ch.name, c.Metadata.AppVersion, image)
		}
		keys := make([]string, 0)
		for k := range c.Values {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if !slices.Contains(keys, "global") || !slices.Contains(keys, "images") || !slices.Contains(keys, "resources") {
			t.Errorf("%s: values.yaml keys %v", ch.name, keys)
		}
	}
}

// TestRabbitmqCookieScript runs the rabbitmq container's start script with
// a stand-in for the image's entrypoint: the cookie lands in
// $HOME/.erlang.cookie with mode 0400 and the Secret's exact content, also
// over an old cookie that the kubelet made group-readable.
func TestRabbitmqCookieScript(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	c := infraContainer(t, infraMustRender(t, "rabbitmq", nil), "rabbitmq")
	if len(c.Command) != 3 || c.Command[0] != "sh" || c.Command[1] != "-c" {
		t.Fatalf("command %q", c.Command)
	}
	dir := t.TempDir()
	home, bin, secret := filepath.Join(dir, "home"), filepath.Join(dir, "bin"), filepath.Join(dir, "secret", "erlang-cookie")
	infraWrite(t, secret, "COOKIE-VALUE")
	infraWrite(t, filepath.Join(home, ".erlang.cookie"), "old")
	if err := os.Chmod(filepath.Join(home, ".erlang.cookie"), 0o660); err != nil {
		t.Fatal(err)
	}
	infraWrite(t, filepath.Join(bin, "docker-entrypoint.sh"), "#!/bin/sh\necho \"started $*\"\n")
	if err := os.Chmod(filepath.Join(bin, "docker-entrypoint.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := strings.ReplaceAll(c.Command[2], "/etc/rabbitmq-cookie/erlang-cookie", secret)
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"HOME=" + home, "PATH=" + bin + ":" + os.Getenv("PATH")}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "started rabbitmq-server" {
		t.Fatalf("script: %v\n%s", err, out)
	}
	fi, err := os.Stat(filepath.Join(home, ".erlang.cookie"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o400 {
		t.Errorf("cookie mode %v, want 0400", fi.Mode().Perm())
	}
	if data, _ := os.ReadFile(filepath.Join(home, ".erlang.cookie")); string(data) != "COOKIE-VALUE" {
		t.Errorf("cookie %q", data)
	}
}

// Redis's readiness probe reads the password from the file mounted from
// its Secret (which the kubelet keeps current), not from the environment,
// which a password rotation leaves behind (installer/rotate).
func TestRedisProbeReadsTheMountedPassword(t *testing.T) {
	for values, secret := range map[string]string{"": "onprem-redis", "global: {databases: {redis: {secretName: other-redis}}}": "other-redis"} {
		r := infraMustRender(t, "redis", valuesOf(t, values))
		sts := infraStatefulSet(t, r)
		c := infraContainer(t, r, "redis")
		probe := strings.Join(c.ReadinessProbe.Exec.Command, " ")
		if !strings.Contains(probe, `REDISCLI_AUTH="$(cat /etc/redis-auth/password)"`) {
			t.Errorf("%s: the readiness probe does not read the mounted password: %s", secret, probe)
		}
		mounted := false
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/etc/redis-auth" && m.ReadOnly {
				for _, v := range sts.Spec.Template.Spec.Volumes {
					if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secret && len(v.Secret.Items) == 1 &&
						v.Secret.Items[0].Key == "password" && v.Secret.Items[0].Path == "password" {
						mounted = true
					}
				}
			}
		}
		if !mounted {
			t.Errorf("%s: /etc/redis-auth/password is not the Secret's password, mounted read-only", secret)
		}
	}
}

// PostgreSQL's pod mounts its admin Secret whole (password, and
// next-password during a rotation), which onprem's scripts there read
// instead of the environment (installer/dbdump.PostgreSQLAuth).
func TestPostgreSQLMountsItsAdminSecret(t *testing.T) {
	for values, secret := range map[string]string{"": "onprem-postgresql-admin", "global: {databases: {postgresql: {secretName: other-pg}}}": "other-pg"} {
		r := infraMustRender(t, "postgresql", valuesOf(t, values))
		sts := infraStatefulSet(t, r)
		mounted := false
		for _, m := range infraContainer(t, r, "postgresql").VolumeMounts {
			if m.MountPath != "/etc/postgresql-admin" || !m.ReadOnly {
				continue
			}
			for _, v := range sts.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secret && len(v.Secret.Items) == 0 {
					mounted = true
				}
			}
		}
		if !mounted {
			t.Errorf("%s is not mounted whole, read-only, at /etc/postgresql-admin", secret)
		}
	}
}

// The scripts onprem runs in PostgreSQL's pod (backups, restores, the
// moves between availabilities, rotations: installer/dbdump and
// installer/rotate) log in as $POSTGRES_USER under $PGDATA's server: both
// forms set them, the user from the admin Secret. The replicated form's
// container once lacked the user, and every restore into it failed
// ("POSTGRES_USER: parameter not set").
func TestPostgreSQLScriptsEnvironment(t *testing.T) {
	for _, values := range []string{"", "global: {availability: high}\nimages: {postgresqlHA: registry.example.com/postgresql-ha:1}\nha: {replicationSecret: onprem-postgresql-replication}"} {
		c := infraContainer(t, infraMustRender(t, "postgresql", valuesOf(t, values)), "postgresql")
		if got := infraEnvFromSecret(c)["POSTGRES_USER"]; got != "onprem-postgresql-admin/username" {
			t.Errorf("values %q: POSTGRES_USER from %q, want onprem-postgresql-admin/username", values, got)
		}
		if got, _ := infraEnvValue(c, "PGDATA"); got != "/var/lib/postgresql/data/pgdata" {
			t.Errorf("values %q: PGDATA %q", values, got)
		}
	}
}

// infraCheckMembers: a replicated database's members (high availability)
// start together, so that a whole-cluster restart never waits on a later
// member, and run one per node (required), so that losing a node loses one.
func infraCheckMembers(t *testing.T, sts *appsv1.StatefulSet) {
	t.Helper()
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %s: after a whole-cluster stop the members must start together", sts.Spec.PodManagementPolicy)
	}
	aa := sts.Spec.Template.Spec.Affinity
	if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		aa.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("affinity %+v: want one member per node (required)", aa)
	}
}

// checkRetryRefused checks that the ingress controller's entrypoints use
// the retry-refused middleware, defined (at most 3 attempts, soon
// retried) in its ConfigMap, mounted where its file provider reads it.
func checkRetryRefused(t *testing.T, r *infraRendering, ctl corev1.PodSpec) {
	t.Helper()
	args := ctl.Containers[0].Args
	var file string
	for _, a := range args {
		if f, ok := strings.CutPrefix(a, "--providers.file.filename="); ok {
			file = f
		}
	}
	for _, ep := range []string{"web", "websecure"} {
		if arg := "--entryPoints." + ep + ".http.middlewares=retry-refused@file"; !slices.Contains(args, arg) {
			t.Errorf("entrypoint %s does not retry refused connections: %s missing from %v", ep, arg, args)
		}
	}
	cm := r.configMaps[0]
	var mounted bool
	for _, m := range ctl.Containers[0].VolumeMounts {
		for _, v := range ctl.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name && path.Dir(file) == m.MountPath {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Fatalf("the file provider reads %q, which is not ConfigMap %s mounted", file, cm.Name)
	}
	var dyn struct {
		HTTP struct {
			Middlewares map[string]struct {
				Retry *struct {
					Attempts        int    `json:"attempts"`
					InitialInterval string `json:"initialInterval"`
				} `json:"retry"`
			} `json:"middlewares"`
		} `json:"http"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data[path.Base(file)]), &dyn); err != nil {
		t.Fatalf("ConfigMap %s, %s: %v", cm.Name, path.Base(file), err)
	}
	retry := dyn.HTTP.Middlewares["retry-refused"].Retry
	if retry == nil || retry.Attempts < 2 || retry.Attempts > 4 || retry.InitialInterval == "" {
		t.Errorf("middleware retry-refused: %+v, want a retry of 2 to 4 attempts with an initial interval", retry)
	}
}
