package charts

import (
	"io/fs"
	"path"
	"reflect"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"
)

// serviceObjects is one render of the service chart, decoded strictly into
// the typed API objects. A kind the chart is not expected to produce fails
// the decode.
type serviceObjects struct {
	sa      *corev1.ServiceAccount
	deploy  *appsv1.Deployment
	svc     *corev1.Service
	pdb     *policyv1.PodDisruptionBudget
	ingress *networkingv1.Ingress
	route   *gatewayv1.HTTPRoute
	raw     string
}

func renderServiceRaw(t *testing.T, values map[string]any) (string, error) {
	t.Helper()
	c, err := Load("service")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := Template(c, "release-name", "platform", values)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, m := range ms {
		b.WriteString("# " + m.Template + "\n" + m.Content + "\n---\n")
	}
	return b.String(), nil
}

func renderService(t *testing.T, values map[string]any) serviceObjects {
	t.Helper()
	raw, err := renderServiceRaw(t, values)
	if err != nil {
		t.Fatal(err)
	}
	out := serviceObjects{raw: raw}
	for _, doc := range strings.Split(raw, "\n---\n") {
		if strings.TrimSpace(doc) == "" || isOnlyComments(doc) {
			continue
		}
		var meta struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		var target any
		switch meta.Kind {
		case "ServiceAccount":
			target = setOnce(t, &out.sa)
		case "Deployment":
			target = setOnce(t, &out.deploy)
		case "Service":
			target = setOnce(t, &out.svc)
		case "PodDisruptionBudget":
			target = setOnce(t, &out.pdb)
		case "Ingress":
			target = setOnce(t, &out.ingress)
		case "HTTPRoute":
			target = setOnce(t, &out.route)
		default:
			t.Fatalf("unexpected kind %q:\n%s", meta.Kind, doc)
		}
		if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
			t.Fatalf("%s does not decode strictly: %v\n%s", meta.Kind, err, doc)
		}
	}
	if out.sa == nil || out.deploy == nil || out.svc == nil {
		t.Fatalf("ServiceAccount, Deployment and Service are always rendered:\n%s", raw)
	}
	return out
}

func isOnlyComments(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

// setOnce allocates *p and returns it, failing if the kind was seen before.
func setOnce[T any](t *testing.T, p **T) *T {
	t.Helper()
	if *p != nil {
		t.Fatalf("two objects of type %T", *p)
	}
	*p = new(T)
	return *p
}

// envSource is what one variable should hold: a literal, or a Secret key.
type envSource struct {
	value, secret, key string
	optional           bool
}

func lit(v string) envSource         { return envSource{value: v} }
func sec(name, key string) envSource { return envSource{secret: name, key: key} }

// optSec is a Secret's key that may be absent (the key rings).
func optSec(name, key string) envSource { return envSource{secret: name, key: key, optional: true} }

// checkEnv asserts the container's environment is exactly want, in order.
func checkEnv(t *testing.T, c corev1.Container, want []string, sources map[string]envSource) {
	t.Helper()
	var got []string
	for _, e := range c.Env {
		got = append(got, e.Name)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("env names:\n got  %v\n want %v", got, want)
	}
	for _, e := range c.Env {
		s, ok := sources[e.Name]
		if !ok {
			t.Errorf("%s: no expectation in the test", e.Name)
			continue
		}
		if s.secret == "" {
			if e.ValueFrom != nil || e.Value != s.value {
				t.Errorf("%s: want literal %q, got value %q valueFrom %+v", e.Name, s.value, e.Value, e.ValueFrom)
			}
			continue
		}
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			t.Errorf("%s: want secretKeyRef %s/%s, got value %q valueFrom %+v", e.Name, s.secret, s.key, e.Value, e.ValueFrom)
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		if ref.Name != s.secret || ref.Key != s.key || (ref.Optional != nil && *ref.Optional) != s.optional {
			t.Errorf("%s: secretKeyRef %s/%s (optional %v), want %s/%s", e.Name, ref.Name, ref.Key, ref.Optional, s.secret, s.key)
		}
	}
}

func onlyContainer(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%d containers, want 1", n)
	}
	return d.Spec.Template.Spec.Containers[0]
}

func TestServiceEnvPipelinesAPI(t *testing.T) {
	o := renderService(t, valuesOf(t, `
name: pipelines-api
role: api
routes: [/api]
uses: {mongodb: true, redis: true, rabbitmq: true, keys: true}
global: {platform: {version: 2.7.1}}
`))
	checkEnv(t, onlyContainer(t, o.deploy), []string{
		"ONPREM_SERVICE", "ONPREM_VERSION", "PORT",
		"MONGODB_HOST", "MONGODB_PORT", "MONGODB_DATABASE", "MONGODB_USERNAME", "MONGODB_PASSWORD",
		"REDIS_HOST", "REDIS_PORT", "REDIS_PASSWORD",
		"RABBITMQ_HOST", "RABBITMQ_PORT", "RABBITMQ_USERNAME", "RABBITMQ_PASSWORD",
		"SIGNING_KEY", "ENCRYPTION_KEY", "SIGNING_KEYS", "ENCRYPTION_KEYS",
	}, map[string]envSource{
		"ONPREM_SERVICE":    lit("pipelines-api"),
		"ONPREM_VERSION":    lit("2.7.1"),
		"PORT":              lit("8080"),
		"MONGODB_HOST":      lit("mongodb"),
		"MONGODB_PORT":      lit("27017"),
		"MONGODB_DATABASE":  sec("onprem-pipelines-api-mongodb", "database"),
		"MONGODB_USERNAME":  sec("onprem-pipelines-api-mongodb", "username"),
		"MONGODB_PASSWORD":  sec("onprem-pipelines-api-mongodb", "password"),
		"REDIS_HOST":        lit("redis"),
		"REDIS_PORT":        lit("6379"),
		"REDIS_PASSWORD":    sec("onprem-redis", "password"),
		"RABBITMQ_HOST":     lit("rabbitmq"),
		"RABBITMQ_PORT":     lit("5672"),
		"RABBITMQ_USERNAME": sec("onprem-rabbitmq", "username"),
		"RABBITMQ_PASSWORD": sec("onprem-rabbitmq", "password"),
		"SIGNING_KEY":       sec("onprem-platform-keys", "signing-key"),
		"ENCRYPTION_KEY":    sec("onprem-platform-keys", "encryption-key"),
		"SIGNING_KEYS":      optSec("onprem-platform-keys", "signing-keys"),
		"ENCRYPTION_KEYS":   optSec("onprem-platform-keys", "encryption-keys"),
	})
}

func TestServiceEnvPostgresqlAndCustomEndpoints(t *testing.T) {
	o := renderService(t, valuesOf(t, `
name: audit-manager
role: worker
routes: []
port: 9000
uses: {postgresql: true, rabbitmq: true}
global:
  databases:
    postgresql: {host: pg.infra.svc, port: 15432}
    rabbitmq: {host: mq, port: 5673, secretName: mq-credentials}
`))
	checkEnv(t, onlyContainer(t, o.deploy), []string{
		"ONPREM_SERVICE", "ONPREM_VERSION", "PORT",
		"POSTGRESQL_HOST", "POSTGRESQL_PORT", "POSTGRESQL_DATABASE", "POSTGRESQL_USERNAME", "POSTGRESQL_PASSWORD",
		"RABBITMQ_HOST", "RABBITMQ_PORT", "RABBITMQ_USERNAME", "RABBITMQ_PASSWORD",
	}, map[string]envSource{
		"ONPREM_SERVICE":      lit("audit-manager"),
		"ONPREM_VERSION":      lit("2.7.0"),
		"PORT":                lit("9000"),
		"POSTGRESQL_HOST":     lit("pg.infra.svc"),
		"POSTGRESQL_PORT":     lit("15432"),
		"POSTGRESQL_DATABASE": sec("onprem-audit-manager-postgresql", "database"),
		"POSTGRESQL_USERNAME": sec("onprem-audit-manager-postgresql", "username"),
		"POSTGRESQL_PASSWORD": sec("onprem-audit-manager-postgresql", "password"),
		"RABBITMQ_HOST":       lit("mq"),
		"RABBITMQ_PORT":       lit("5673"),
		"RABBITMQ_USERNAME":   sec("mq-credentials", "username"),
		"RABBITMQ_PASSWORD":   sec("mq-credentials", "password"),
	})
	c := onlyContainer(t, o.deploy)
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 9000 {
		t.Errorf("ports = %+v, want one named http on 9000", c.Ports)
	}
}

func TestServiceEnvExternalDatabases(t *testing.T) {
	o := renderService(t, valuesOf(t, `
name: pipeline-manager
role: worker
routes: []
uses: {mongodb: true, postgresql: true, redis: true, rabbitmq: true}
global:
  databases:
    mongodb: {external: true, host: ignored-mongo, port: 1, secretName: corp-mongodb}
    postgresql: {external: true, host: ignored-pg, port: 2, secretName: corp-postgresql}
    redis: {external: true, host: ignored-redis, port: 3, secretName: corp-redis}
    rabbitmq: {external: true, host: ignored-mq, port: 4, secretName: corp-rabbitmq}
`))
	checkEnv(t, onlyContainer(t, o.deploy), []string{
		"ONPREM_SERVICE", "ONPREM_VERSION", "PORT",
		"MONGODB_HOST", "MONGODB_PORT", "MONGODB_REPLICA_SET", "MONGODB_DATABASE", "MONGODB_USERNAME", "MONGODB_PASSWORD",
		"POSTGRESQL_HOST", "POSTGRESQL_PORT", "POSTGRESQL_DATABASE", "POSTGRESQL_USERNAME", "POSTGRESQL_PASSWORD",
		"REDIS_HOST", "REDIS_PORT", "REDIS_PASSWORD",
		"RABBITMQ_HOST", "RABBITMQ_PORT", "RABBITMQ_USERNAME", "RABBITMQ_PASSWORD",
	}, map[string]envSource{
		"ONPREM_SERVICE": lit("pipeline-manager"),
		"ONPREM_VERSION": lit("2.7.0"),
		"PORT":           lit("8080"),
		// Host and port from the operator's Secret, never from values.
		"MONGODB_HOST": sec("corp-mongodb", "host"),
		"MONGODB_PORT": sec("corp-mongodb", "port"),
		// An external replica set's name, when the Secret has one.
		"MONGODB_REPLICA_SET": optSec("corp-mongodb", "replicaSet"),
		"POSTGRESQL_HOST":     sec("corp-postgresql", "host"),
		"POSTGRESQL_PORT":     sec("corp-postgresql", "port"),
		"REDIS_HOST":          sec("corp-redis", "host"),
		"REDIS_PORT":          sec("corp-redis", "port"),
		"RABBITMQ_HOST":       sec("corp-rabbitmq", "host"),
		"RABBITMQ_PORT":       sec("corp-rabbitmq", "port"),
		// The service's own database and user still come from the Secret
		// that db-provision created them from.
		"MONGODB_DATABASE":    sec("onprem-pipeline-manager-mongodb", "database"),
		"MONGODB_USERNAME":    sec("onprem-pipeline-manager-mongodb", "username"),
		"MONGODB_PASSWORD":    sec("onprem-pipeline-manager-mongodb", "password"),
		"POSTGRESQL_DATABASE": sec("onprem-pipeline-manager-postgresql", "database"),
		"POSTGRESQL_USERNAME": sec("onprem-pipeline-manager-postgresql", "username"),
		"POSTGRESQL_PASSWORD": sec("onprem-pipeline-manager-postgresql", "password"),
		// The operator's Secret replaces onprem-redis / onprem-rabbitmq.
		"REDIS_PASSWORD":    sec("corp-redis", "password"),
		"RABBITMQ_USERNAME": sec("corp-rabbitmq", "username"),
		"RABBITMQ_PASSWORD": sec("corp-rabbitmq", "password"),
	})
	if strings.Contains(o.raw, "ignored-") {
		t.Errorf("an external database's host from values leaked into the render:\n%s", o.raw)
	}
}

func TestServiceEnvExtraSortedAfterContract(t *testing.T) {
	o := renderService(t, valuesOf(t, `
name: argo-hub
routes: []
env: {ZED: last, ALPHA: "1", MIDDLE: 8080, FLAG: true}
`))
	checkEnv(t, onlyContainer(t, o.deploy), []string{
		"ONPREM_SERVICE", "ONPREM_VERSION", "PORT", "ALPHA", "FLAG", "MIDDLE", "ZED",
	}, map[string]envSource{
		"ONPREM_SERVICE": lit("argo-hub"),
		"ONPREM_VERSION": lit("2.7.0"),
		"PORT":           lit("8080"),
		"ALPHA":          lit("1"),
		"FLAG":           lit("true"),
		"MIDDLE":         lit("8080"),
		"ZED":            lit("last"),
	})
}

func TestServiceRejectsBadValues(t *testing.T) {
	for name, doc := range map[string]string{
		"env overrides a contract variable": `{uses: {mongodb: true}, env: {MONGODB_HOST: elsewhere}}`,
		"env overrides PORT":                `{env: {PORT: "1"}}`,
		"unknown role":                      `{role: backend}`,
		"name not a DNS label":              `{name: Pipelines_API}`,
		"route without slash":               `{routes: [api]}`,
		"gateway API without gateway":       `{routes: [/api], global: {gatewayAPI: {enabled: true, gatewayName: ""}}}`,
		"worker with routes":                `{role: worker, routes: [/api]}`,
		"external database without secret":  `{uses: {redis: true}, global: {databases: {redis: {external: true, secretName: ""}}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := renderServiceRaw(t, valuesOf(t, doc)); err == nil {
				t.Errorf("%s: rendered, want an error", doc)
			}
		})
	}
}

func TestServiceFlowLabels(t *testing.T) {
	for name, tc := range map[string]struct {
		values string
		want   map[string]string
	}{
		"ui": {
			values: `{name: pipelines-ui, role: ui, routes: [/]}`,
			want:   map[string]string{"onprem.dev/ingress": "true"},
		},
		"worker with everything": {
			values: `{name: runtime-manager, role: worker, routes: [], uses: {mongodb: true, postgresql: true, redis: true, rabbitmq: true, kubeAPI: true, keys: true}}`,
			want: map[string]string{
				"onprem.dev/client-mongodb":    "true",
				"onprem.dev/client-postgresql": "true",
				"onprem.dev/client-redis":      "true",
				"onprem.dev/client-rabbitmq":   "true",
				"onprem.dev/kube-api":          "true",
			},
		},
		"api with some": {
			values: `{name: broadcaster, routes: [/ws], uses: {redis: true, keys: true}}`,
			want:   map[string]string{"onprem.dev/client-redis": "true", "onprem.dev/ingress": "true"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			o := renderService(t, valuesOf(t, tc.values))
			for where, labels := range map[string]map[string]string{
				"Deployment":   o.deploy.Labels,
				"pod template": o.deploy.Spec.Template.Labels,
			} {
				got := map[string]string{}
				for k, v := range labels {
					if strings.HasPrefix(k, "onprem.dev/") {
						got[k] = v
					}
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%s flow labels = %v, want %v", where, got, tc.want)
				}
			}
			kube := tc.want["onprem.dev/kube-api"] == "true"
			if o.sa.AutomountServiceAccountToken == nil || *o.sa.AutomountServiceAccountToken != kube {
				t.Errorf("ServiceAccount automountServiceAccountToken = %v, want %v", o.sa.AutomountServiceAccountToken, kube)
			}
			pod := o.deploy.Spec.Template.Spec
			if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken != kube {
				t.Errorf("pod automountServiceAccountToken = %v, want %v", pod.AutomountServiceAccountToken, kube)
			}
			if pod.ServiceAccountName != o.sa.Name {
				t.Errorf("pod runs as %q, chart creates %q", pod.ServiceAccountName, o.sa.Name)
			}
		})
	}
}

func TestServiceLabelsAndSelectors(t *testing.T) {
	o := renderService(t, valuesOf(t, `{name: gitops-api, role: api, routes: [/gitops/api], replicas: 2, global: {platform: {version: 2.8.0}}}`))
	want := map[string]string{
		"app.kubernetes.io/name":       "gitops-api",
		"app.kubernetes.io/instance":   "release-name",
		"app.kubernetes.io/component":  "api",
		"app.kubernetes.io/part-of":    "onprem",
		"app.kubernetes.io/version":    "2.8.0",
		"app.kubernetes.io/managed-by": "Helm",
	}
	selector := map[string]string{"app.kubernetes.io/name": "gitops-api", "app.kubernetes.io/instance": "release-name"}
	objects := map[string]map[string]string{
		"ServiceAccount":      o.sa.Labels,
		"Deployment":          o.deploy.Labels,
		"pod template":        o.deploy.Spec.Template.Labels,
		"Service":             o.svc.Labels,
		"Ingress":             o.ingress.Labels,
		"PodDisruptionBudget": o.pdb.Labels,
	}
	for where, labels := range objects {
		for k, v := range want {
			if labels[k] != v {
				t.Errorf("%s: label %s = %q, want %q", where, k, labels[k], v)
			}
		}
	}
	for where, sel := range map[string]map[string]string{
		"Deployment":          o.deploy.Spec.Selector.MatchLabels,
		"Service":             o.svc.Spec.Selector,
		"PodDisruptionBudget": o.pdb.Spec.Selector.MatchLabels,
	} {
		if !reflect.DeepEqual(sel, selector) {
			t.Errorf("%s selector = %v, want %v", where, sel, selector)
		}
	}
	for _, obj := range []string{o.sa.Name, o.deploy.Name, o.svc.Name, o.ingress.Name, o.pdb.Name} {
		if obj != "gitops-api" {
			t.Errorf("object named %q, want the component name", obj)
		}
	}
	for _, ns := range []string{o.sa.Namespace, o.deploy.Namespace, o.svc.Namespace, o.ingress.Namespace, o.pdb.Namespace} {
		if ns != "platform" {
			t.Errorf("object in namespace %q, want the release namespace", ns)
		}
	}
}

func TestServiceWorkloadShape(t *testing.T) {
	o := renderService(t, valuesOf(t, `
name: pipelines-api
images: {service: "registry.internal/onprem/pipelines-api:2.7.0@sha256:abc"}
replicas: 2
resources: {requests: {cpu: 250m, memory: 300Mi}, limits: {memory: 600Mi}}
global: {imagePullSecrets: [pull-a, pull-b]}
`))
	d := o.deploy
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
	}
	ru := d.Spec.Strategy.RollingUpdate
	if d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType || ru == nil ||
		*ru.MaxUnavailable != intstr.FromInt32(0) || *ru.MaxSurge != intstr.FromInt32(1) {
		t.Errorf("strategy = %+v, want RollingUpdate maxUnavailable 0 maxSurge 1", d.Spec.Strategy)
	}
	if len(d.Spec.Template.Annotations) != 0 {
		t.Errorf("pod template annotations %v: a checksum or timestamp restarts pods on every re-run", d.Spec.Template.Annotations)
	}
	pod := d.Spec.Template.Spec
	if got := pod.ImagePullSecrets; len(got) != 2 || got[0].Name != "pull-a" || got[1].Name != "pull-b" {
		t.Errorf("imagePullSecrets = %v", got)
	}
	c := onlyContainer(t, d)
	if c.Image != "registry.internal/onprem/pipelines-api:2.7.0@sha256:abc" || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("image %q pull policy %q", c.Image, c.ImagePullPolicy)
	}
	if c.Resources.Requests.Cpu().String() != "250m" || c.Resources.Requests.Memory().String() != "300Mi" ||
		c.Resources.Limits.Memory().String() != "600Mi" {
		t.Errorf("resources = %+v", c.Resources)
	}
	// A pod starts once its databases answer (readyz in the startup
	// probe); then readiness asks only the process, so that a database's
	// failover does not take every replica out of the Service at once.
	for _, pr := range []struct {
		name, path string
		p          *corev1.Probe
	}{{"liveness", "/healthz", c.LivenessProbe}, {"readiness", "/healthz", c.ReadinessProbe}, {"startup", "/readyz", c.StartupProbe}} {
		if p := pr.p; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != pr.path || p.HTTPGet.Port != intstr.FromString("http") {
			t.Errorf("%s probe = %+v, want GET %s on port http", pr.name, p, pr.path)
		}
	}
	if p := c.StartupProbe; p != nil && time.Duration(p.PeriodSeconds*p.FailureThreshold)*time.Second < 3*time.Minute {
		t.Errorf("startup probe gives a pod %d x %d s to find its databases, want at least 3 minutes before a restart", p.FailureThreshold, p.PeriodSeconds)
	}
	if o.svc.Spec.Type != corev1.ServiceTypeClusterIP || len(o.svc.Spec.Ports) != 1 ||
		o.svc.Spec.Ports[0].Port != 80 || o.svc.Spec.Ports[0].TargetPort != intstr.FromString("http") {
		t.Errorf("Service spec = %+v, want ClusterIP 80 -> http", o.svc.Spec)
	}
}

// restricted checks the Pod Security "restricted" profile and the chart's
// own choices on one container.
func restricted(t *testing.T, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil {
		t.Fatalf("container %s: no securityContext", c.Name)
	}
	check := func(ok bool, what string) {
		if !ok {
			t.Errorf("container %s: %s (securityContext %+v)", c.Name, what, sc)
		}
	}
	check(sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "runAsNonRoot must be true")
	check(sc.RunAsUser != nil && *sc.RunAsUser == 10001, "runAsUser must be 10001")
	check(sc.RunAsGroup != nil && *sc.RunAsGroup == 10001, "runAsGroup must be 10001")
	check(sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation, "allowPrivilegeEscalation must be false")
	check(sc.Privileged == nil || !*sc.Privileged, "must not be privileged")
	check(sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem, "readOnlyRootFilesystem must be true")
	check(sc.Capabilities != nil && reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) && len(sc.Capabilities.Add) == 0,
		"capabilities must drop ALL and add none")
	check(sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault, "seccompProfile must be RuntimeDefault")
	var tmp bool
	for _, m := range c.VolumeMounts {
		tmp = tmp || (m.MountPath == "/tmp" && !m.ReadOnly)
	}
	check(tmp, "/tmp must be a writable mount")
}

func TestServiceSecurityContext(t *testing.T) {
	for _, vals := range serviceCases(t) {
		o := renderService(t, vals.values)
		pod := o.deploy.Spec.Template.Spec
		for _, c := range append(append([]corev1.Container{}, pod.InitContainers...), pod.Containers...) {
			restricted(t, c)
		}
		psc := pod.SecurityContext
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault ||
			psc.FSGroup == nil || *psc.FSGroup != 10001 || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("%s: pod securityContext = %+v", vals.name, psc)
		}
		if pod.HostNetwork || pod.HostPID || pod.HostIPC {
			t.Errorf("%s: pod shares a host namespace", vals.name)
		}
		if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
			t.Errorf("%s: enableServiceLinks must be false", vals.name)
		}
		var tmp bool
		for _, v := range pod.Volumes {
			tmp = tmp || (v.Name == "tmp" && v.EmptyDir != nil)
		}
		if !tmp {
			t.Errorf("%s: /tmp must be an emptyDir", vals.name)
		}
	}
}

func TestServicePodDisruptionBudgetAndSpread(t *testing.T) {
	for _, availability := range []string{"single", "high"} {
		t.Run(availability, func(t *testing.T) { testServiceSpread(t, availability) })
	}
}

// testServiceSpread: with high availability the spread over nodes is a
// rule (two replicas on one node are refused, so that a lost node leaves
// the service serving), otherwise a preference; the spread over zones is
// a preference either way; tainted and cordoned nodes never count.
func testServiceSpread(t *testing.T, availability string) {
	byNode := corev1.ScheduleAnyway
	if availability == "high" {
		byNode = corev1.DoNotSchedule
	}
	for _, replicas := range []int{0, 1, 2, 3} {
		o := renderService(t, map[string]any{"replicas": replicas, "global": map[string]any{"availability": availability}})
		spread := o.deploy.Spec.Template.Spec.TopologySpreadConstraints
		if replicas <= 1 {
			if o.pdb != nil {
				t.Errorf("replicas %d: a PodDisruptionBudget would block every drain", replicas)
			}
			if len(spread) != 0 {
				t.Errorf("replicas %d: topology spread %v", replicas, spread)
			}
			continue
		}
		if o.pdb == nil {
			t.Fatalf("replicas %d: no PodDisruptionBudget", replicas)
		}
		if mu := o.pdb.Spec.MaxUnavailable; mu == nil || *mu != intstr.FromInt32(1) || o.pdb.Spec.MinAvailable != nil {
			t.Errorf("replicas %d: PDB maxUnavailable %v minAvailable %v, want maxUnavailable 1", replicas, mu, o.pdb.Spec.MinAvailable)
		}
		if !reflect.DeepEqual(o.pdb.Spec.Selector.MatchLabels, o.deploy.Spec.Selector.MatchLabels) {
			t.Errorf("replicas %d: PDB selects %v, Deployment %v", replicas, o.pdb.Spec.Selector.MatchLabels, o.deploy.Spec.Selector.MatchLabels)
		}
		if len(spread) != 2 {
			t.Errorf("replicas %d: topology spread = %+v, want one by hostname and one by zone over the pods", replicas, spread)
			continue
		}
		for i, key := range []string{corev1.LabelHostname, corev1.LabelTopologyZone} {
			want := corev1.ScheduleAnyway
			if key == corev1.LabelHostname {
				want = byNode
			}
			if p := spread[i].NodeTaintsPolicy; p == nil || *p != corev1.NodeInclusionPolicyHonor {
				t.Errorf("replicas %d: topology spread %d counts tainted and cordoned nodes (nodeTaintsPolicy %v)", replicas, i, p)
			}
			if !reflect.DeepEqual(spread[i].MatchLabelKeys, []string{"pod-template-hash"}) {
				t.Errorf("replicas %d: topology spread %d balances a rollout's new pods against the old (matchLabelKeys %v)", replicas, i, spread[i].MatchLabelKeys)
			}
			if spread[i].TopologyKey != key || spread[i].MaxSkew != 1 || spread[i].WhenUnsatisfiable != want ||
				spread[i].LabelSelector == nil || !reflect.DeepEqual(spread[i].LabelSelector.MatchLabels, o.deploy.Spec.Selector.MatchLabels) {
				t.Errorf("replicas %d: topology spread %d = %+v, want one by %s over the pods", replicas, i, spread[i], key)
			}
		}
	}
}

func TestServiceIngress(t *testing.T) {
	o := renderService(t, valuesOf(t, `
name: api-events
routes: [/api/events, /api/hooks]
global:
  platform: {domain: ci.corp.test}
  ingress: {enabled: true, className: corp-nginx, tlsSecret: corp-tls}
`))
	ing := o.ingress
	if ing == nil {
		t.Fatal("no Ingress for a service with routes")
	}
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "corp-nginx" {
		t.Errorf("ingressClassName = %v", ing.Spec.IngressClassName)
	}
	if len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "corp-tls" || !reflect.DeepEqual(ing.Spec.TLS[0].Hosts, []string{"ci.corp.test"}) {
		t.Errorf("tls = %+v", ing.Spec.TLS)
	}
	if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != "ci.corp.test" || ing.Spec.Rules[0].HTTP == nil {
		t.Fatalf("rules = %+v", ing.Spec.Rules)
	}
	var paths []string
	for _, p := range ing.Spec.Rules[0].HTTP.Paths {
		paths = append(paths, p.Path)
		if p.PathType == nil || *p.PathType != networkingv1.PathTypePrefix {
			t.Errorf("path %s: pathType %v, want Prefix", p.Path, p.PathType)
		}
		if s := p.Backend.Service; s == nil || s.Name != "api-events" || s.Port.Number != 80 {
			t.Errorf("path %s: backend %+v, want the Service on port 80", p.Path, p.Backend)
		}
	}
	if !reflect.DeepEqual(paths, []string{"/api/events", "/api/hooks"}) {
		t.Errorf("paths = %v", paths)
	}
	if o.route != nil {
		t.Error("HTTPRoute rendered with gatewayAPI disabled")
	}
	if o.deploy.Spec.Template.Labels["onprem.dev/ingress"] != "true" {
		t.Error("a routed service's pods must carry onprem.dev/ingress")
	}
}

func TestServiceNoRoutesNoIngress(t *testing.T) {
	o := renderService(t, valuesOf(t, `
name: context-manager
role: worker
routes: []
global: {gatewayAPI: {enabled: true, gatewayName: gw}}
`))
	if o.ingress != nil || o.route != nil {
		t.Errorf("a service without routes got an Ingress (%v) or an HTTPRoute (%v)", o.ingress != nil, o.route != nil)
	}
	if _, ok := o.deploy.Spec.Template.Labels["onprem.dev/ingress"]; ok {
		t.Error("a service without routes must not be reachable from the ingress controller")
	}
}

func TestServiceIngressDisabled(t *testing.T) {
	o := renderService(t, valuesOf(t, `{name: gitops-ui, role: ui, routes: [/gitops], global: {ingress: {enabled: false}}}`))
	if o.ingress != nil {
		t.Error("Ingress rendered with global.ingress.enabled false")
	}
	if o.deploy.Spec.Template.Labels["onprem.dev/ingress"] != "true" {
		t.Error("routes without our Ingress are still served by an ingress: the label must stay")
	}
}

func TestServiceHTTPRoute(t *testing.T) {
	for name, tc := range map[string]struct {
		gateway       string
		wantNamespace string
		wantSection   string
	}{
		"other namespace and listener":  {`{enabled: true, gatewayName: platform, gatewayNamespace: gateways, sectionName: https}`, "gateways", "https"},
		"defaults to release namespace": {`{enabled: true, gatewayName: platform}`, "platform", ""},
	} {
		t.Run(name, func(t *testing.T) {
			o := renderService(t, valuesOf(t, `
name: gitops-api
routes: [/gitops/api, /gitops/webhooks]
global: {platform: {domain: ci.corp.test}, gatewayAPI: `+tc.gateway+`}
`))
			r := o.route
			if r == nil {
				t.Fatal("no HTTPRoute")
			}
			if o.ingress == nil {
				t.Error("Gateway API is in addition to the Ingress, not instead of it")
			}
			if len(r.Spec.ParentRefs) != 1 {
				t.Fatalf("parentRefs = %+v", r.Spec.ParentRefs)
			}
			p := r.Spec.ParentRefs[0]
			if p.Name != "platform" || p.Namespace == nil || string(*p.Namespace) != tc.wantNamespace ||
				p.Kind == nil || *p.Kind != "Gateway" || p.Group == nil || *p.Group != gatewayv1.GroupName {
				t.Errorf("parentRef = %+v", p)
			}
			if got := ""; p.SectionName != nil {
				got = string(*p.SectionName)
				if got != tc.wantSection {
					t.Errorf("sectionName = %q, want %q", got, tc.wantSection)
				}
			} else if tc.wantSection != "" {
				t.Errorf("sectionName missing, want %q", tc.wantSection)
			}
			if !reflect.DeepEqual(r.Spec.Hostnames, []gatewayv1.Hostname{"ci.corp.test"}) {
				t.Errorf("hostnames = %v", r.Spec.Hostnames)
			}
			var prefixes []string
			for _, rule := range r.Spec.Rules {
				for _, b := range rule.BackendRefs {
					if b.Name != "gitops-api" || b.Port == nil || *b.Port != 80 {
						t.Errorf("backendRef = %+v, want the Service on port 80", b)
					}
				}
				if len(rule.BackendRefs) != 1 {
					t.Errorf("rule has %d backends, want 1", len(rule.BackendRefs))
				}
				for _, m := range rule.Matches {
					if m.Path == nil || m.Path.Type == nil || *m.Path.Type != gatewayv1.PathMatchPathPrefix || m.Path.Value == nil {
						t.Errorf("match = %+v, want PathPrefix", m)
						continue
					}
					prefixes = append(prefixes, *m.Path.Value)
				}
			}
			if !reflect.DeepEqual(prefixes, []string{"/gitops/api", "/gitops/webhooks"}) {
				t.Errorf("path prefixes = %v", prefixes)
			}
		})
	}
}

type serviceCase struct {
	name   string
	values map[string]any
}

// serviceCases are the chart's defaults and every ci/*.yaml values file.
func serviceCases(t *testing.T) []serviceCase {
	t.Helper()
	cases := []serviceCase{{name: "defaults"}}
	files, err := fs.Glob(FS, "service/ci/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no ci values files: %v", err)
	}
	for _, f := range files {
		data, err := fs.ReadFile(FS, f)
		if err != nil {
			t.Fatal(err)
		}
		cases = append(cases, serviceCase{name: path.Base(f), values: valuesOf(t, string(data))})
	}
	return cases
}

func TestServiceCIValuesDecodeStrictly(t *testing.T) {
	for _, c := range serviceCases(t) {
		t.Run(c.name, func(t *testing.T) { renderService(t, c.values) })
	}
}

func TestServiceDeterministic(t *testing.T) {
	for _, c := range serviceCases(t) {
		first, err := renderServiceRaw(t, c.values)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			again, err := renderServiceRaw(t, c.values)
			if err != nil {
				t.Fatal(err)
			}
			if again != first {
				t.Fatalf("%s: render %d differs from the first:\n%s\n----\n%s", c.name, i+2, first, again)
			}
		}
	}
}
