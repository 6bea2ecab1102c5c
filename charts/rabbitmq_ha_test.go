package charts

import (
	"encoding/json"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// TestRabbitMQHighAvailability: with global.availability high the rabbitmq
// chart runs a cluster of three nodes, one per Kubernetes node, formed
// through the Kubernetes API, whose default virtual host makes quorum
// queues; without it, one standalone server as before.
func TestRabbitMQHighAvailability(t *testing.T) {
	r := infraMustRender(t, "rabbitmq", valuesOf(t, "global: {availability: high}"))
	sts := infraStatefulSet(t, r)
	if *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %d, want 3", *sts.Spec.Replicas)
	}
	infraCheckMembers(t, sts)
	pod := sts.Spec.Template.Spec
	if pod.ServiceAccountName != "rabbitmq" || pod.AutomountServiceAccountToken == nil || !*pod.AutomountServiceAccountToken {
		t.Errorf("service account %q (automount %v): peer discovery reads the API with the chart's account", pod.ServiceAccountName, pod.AutomountServiceAccountToken)
	}
	if sts.Spec.Template.Labels["onprem.dev/kube-api"] != "true" {
		t.Errorf("pods not labelled onprem.dev/kube-api: the platform's NetworkPolicies would cut peer discovery off the API")
	}
	// The Role grants what peer discovery reads, and nothing more.
	if len(r.roles) != 1 || len(r.roles[0].Rules) != 1 {
		t.Fatalf("roles %+v", r.roles)
	}
	rule := r.roles[0].Rules[0]
	if strings.Join(rule.Resources, ",") != "endpoints" || strings.Join(rule.Verbs, ",") != "get" || strings.Join(rule.ResourceNames, ",") != "rabbitmq-headless" {
		t.Errorf("Role rule %+v: want get on endpoints rabbitmq-headless only", rule)
	}
	if len(r.roleBindings) != 1 || r.roleBindings[0].Subjects[0].Name != "rabbitmq" || r.roleBindings[0].RoleRef.Name != r.roles[0].Name {
		t.Errorf("RoleBindings %+v", r.roleBindings)
	}
	if len(r.pdbs) != 1 || r.pdbs[0].Spec.MaxUnavailable == nil || r.pdbs[0].Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudgets %+v: want one, maxUnavailable 1", r.pdbs)
	}
	if len(r.networkPolicies) != 1 {
		t.Fatalf("NetworkPolicies %d, want the peers' one", len(r.networkPolicies))
	}
	np := r.networkPolicies[0]
	var ports []string
	for _, p := range np.Spec.Ingress[0].Ports {
		ports = append(ports, p.Port.String())
	}
	if strings.Join(ports, ",") != "4369,25672" || np.Spec.PodSelector.MatchLabels["onprem.dev/rabbitmq-cluster"] != "rabbitmq" ||
		sts.Spec.Template.Labels["onprem.dev/rabbitmq-cluster"] != "rabbitmq" {
		t.Errorf("NetworkPolicy %s: ports %v, selector %v; want epmd and distribution between the cluster's pods", np.Name, ports, np.Spec.PodSelector.MatchLabels)
	}

	c := infraContainer(t, r, "rabbitmq")
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if got := env["RABBITMQ_NODENAME"].Value; got != "rabbit@$(POD_NAME).rabbitmq-headless."+infraNamespace {
		t.Errorf("RABBITMQ_NODENAME %q: peer discovery names a node rabbit@<pod>.rabbitmq-headless.<namespace>", got)
	}
	if env["POD_NAME"].ValueFrom == nil || env["RABBITMQ_USE_LONGNAME"].Value != "true" {
		t.Errorf("POD_NAME %+v, RABBITMQ_USE_LONGNAME %q", env["POD_NAME"], env["RABBITMQ_USE_LONGNAME"].Value)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || !strings.Contains(strings.Join(c.Lifecycle.PreStop.Exec.Command, " "), "await_online_quorum_plus_one") {
		t.Errorf("preStop %+v: a node stops only once its quorum queues keep a majority without it", c.Lifecycle)
	}

	if len(r.configMaps) != 1 {
		t.Fatalf("ConfigMaps %d", len(r.configMaps))
	}
	data := r.configMaps[0].Data
	for _, want := range []string{
		"cluster_formation.peer_discovery_backend = rabbit_peer_discovery_k8s",
		"cluster_formation.k8s.address_type = hostname",
		"cluster_formation.k8s.service_name = rabbitmq-headless",
		"cluster_formation.k8s.hostname_suffix = .rabbitmq-headless." + infraNamespace,
		"cluster_partition_handling = pause_minority",
		"definitions.local.path = /etc/rabbitmq-onprem/definitions.json",
	} {
		if !strings.Contains(data["90-onprem.conf"], want) {
			t.Errorf("90-onprem.conf lacks %q:\n%s", want, data["90-onprem.conf"])
		}
	}
	if !strings.Contains(data["enabled_plugins"], "rabbitmq_peer_discovery_k8s") {
		t.Errorf("enabled_plugins %q", data["enabled_plugins"])
	}
	var defs struct {
		Vhosts []struct {
			Name     string         `json:"name"`
			Metadata map[string]any `json:"metadata"`
		} `json:"vhosts"`
	}
	if err := json.Unmarshal([]byte(data["definitions.json"]), &defs); err != nil {
		t.Fatalf("definitions.json: %v\n%s", err, data["definitions.json"])
	}
	if len(defs.Vhosts) != 1 || defs.Vhosts[0].Name != "/" || defs.Vhosts[0].Metadata["default_queue_type"] != "quorum" {
		t.Errorf("definitions %+v: want the virtual host / with quorum queues by default", defs)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		mounted = mounted || m.MountPath == "/etc/rabbitmq-onprem"
	}
	if !mounted || env["RABBITMQ_ENABLED_PLUGINS_FILE"].Value != "/etc/rabbitmq-onprem/enabled_plugins" {
		t.Errorf("the plugins and definitions are not where the configuration reads them")
	}

	// Fewer than three nodes cannot lose one and keep a majority; 0 stops.
	if _, err := infraRender(t, "rabbitmq", valuesOf(t, "global: {availability: high}\nha: {replicas: 2}")); err == nil || !strings.Contains(err.Error(), "ha.replicas is 2") {
		t.Errorf("ha.replicas 2: %v, want a refusal naming ha.replicas", err)
	}
	if got := *infraStatefulSet(t, infraMustRender(t, "rabbitmq", valuesOf(t, "global: {availability: high}\nha: {replicas: 0}"))).Spec.Replicas; got != 0 {
		t.Errorf("ha.replicas 0: %d replicas", got)
	}

	// Single: one server, none of the cluster's parts.
	s := infraMustRender(t, "rabbitmq", nil)
	one := infraStatefulSet(t, s)
	if *one.Spec.Replicas != 1 || one.Spec.PodManagementPolicy != appsv1.OrderedReadyPodManagement || len(s.roles)+len(s.pdbs)+len(s.networkPolicies) != 0 ||
		strings.Contains(s.configMaps[0].Data["90-onprem.conf"], "cluster_formation") {
		t.Errorf("single: %d replicas, %s, %d roles, %d budgets, %d policies", *one.Spec.Replicas, one.Spec.PodManagementPolicy, len(s.roles), len(s.pdbs), len(s.networkPolicies))
	}
}
