//go:build linux

package kindcluster

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// The clusters' network is kube-router (github.com/cloudnativelabs/kube-router),
// built here from the module proxy: the CNI (a bridge on each node, the
// node's pod CIDR from kube-controller-manager, routes to the other nodes'
// pod CIDRs learnt over BGP between the nodes) and the NetworkPolicy
// controller (iptables rules and ipsets), so that the platform's policies
// are enforced as on a customer's Calico or Cilium. kube-proxy still does
// Services.
//
// Its manifest is the node image's /kind/manifests/default-cni.yaml, which
// kind applies in place of kindnetd, so every cluster made from the node
// image has it (the harness's, and `onprem local up --node-image`'s). The
// node image carries no CNI configuration: until kube-router runs, no pod
// gets an address and no node is Ready, so a cluster whose kube-router does
// not start fails (with kube-router's log: waitReady) rather than running
// unenforced.

const (
	// KubeRouterImage is kube-router's image, preloaded in the node image.
	KubeRouterImage = "onprem.dev/kube-router:" + KubeRouterVersion

	kubeRouterName = "kube-router"
	kubeRouterNS   = "kube-system"
	// kubeRouterCNIConf is the CNI configuration the init container writes,
	// with the node's pod CIDR in it.
	kubeRouterCNIConf = "/etc/cni/net.d/10-kube-router.conflist"
	kubeRouterHealth  = 20244
	// kubeRouterMaxRestarts is how many restarts of a kube-router
	// container make the cluster's start fail at once instead of waiting
	// out its timeout.
	kubeRouterMaxRestarts = 4
)

// kubeRouterCNI is the configuration of the bridge plugin, to which the
// init container adds the node's pod CIDR (installCNIConf): host-local
// addresses from that CIDR, the bridge as
// the pods' gateway, hairpin so that a pod reaches itself through its own
// Service, and portmap for hostPort.
const kubeRouterCNI = `{
  "cniVersion": "0.4.0",
  "name": "onprem-kube-router",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "kube-bridge",
      "isDefaultGateway": true,
      "hairpinMode": true,
      "ipam": {"type": "host-local"}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}
  ]
}
`

// kubeRouterManifest is kube-router's ServiceAccount, RBAC, configuration
// and DaemonSet, as the YAML stream kind applies.
func kubeRouterManifest() (string, error) {
	labels := map[string]string{"k8s-app": kubeRouterName}
	meta := metav1.ObjectMeta{Name: kubeRouterName, Namespace: kubeRouterNS, Labels: labels}
	objs := []any{
		&corev1.ServiceAccount{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"}, ObjectMeta: meta},
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: kubeRouterName, Labels: labels},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"namespaces", "pods", "services", "nodes", "endpoints"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"get", "list", "watch"}},
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "create", "update"}},
				{APIGroups: []string{""}, Resources: []string{"services/status"}, Verbs: []string{"update"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: kubeRouterName, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: kubeRouterName},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: kubeRouterName, Namespace: kubeRouterNS}},
		},
		&corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: meta,
			Data: map[string]string{"cni.conflist": kubeRouterCNI}},
		kubeRouterDaemonSet(),
	}
	var b strings.Builder
	for _, o := range objs {
		y, err := yaml.Marshal(o)
		if err != nil {
			return "", fmt.Errorf("kindcluster: kube-router's manifest: %w", err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.String(), nil
}

// kubeletServer sets $server to the API server the node's kubelet uses
// (host:port, from its kubeconfig): kube-router runs on the host network and
// must not depend on kube-proxy's rules for the Service IP being there.
const kubeletServer = `server=$(sed -n 's|^ *server: *https://||p' /etc/kubernetes/kubelet.conf | head -n 1)
if [ -z "$server" ]; then echo "kube-router: no API server in the node's /etc/kubernetes/kubelet.conf" >&2; exit 1; fi
`

// kubeRouterStart runs kube-router with that API server.
const kubeRouterStart = kubeletServer + `export KUBERNETES_SERVICE_HOST="${server%:*}" KUBERNETES_SERVICE_PORT="${server##*:}"
exec /usr/local/bin/kube-router "$@"`

// installCNIConf is the init container's script: it writes the CNI
// configuration with the node's pod CIDR already in it (read from the API
// as kube-router would), so that the node turns Ready with a complete
// configuration; written under a temporary name and renamed, so that
// containerd never reads half a file. kube-router finds the CIDR there and
// leaves the file as it is.
const installCNIConf = kubeletServer + `sa=/var/run/secrets/kubernetes.io/serviceaccount
cidr=
for i in $(seq 60); do
  cidr=$(curl -sf --max-time 5 --cacert "$sa/ca.crt" -H "Authorization: Bearer $(cat "$sa/token")" \
    "https://$server/api/v1/nodes/$NODE_NAME" | jq -r '.spec.podCIDR // empty') || true
  [ -n "$cidr" ] && break
  sleep 1
done
if [ -z "$cidr" ]; then echo "kube-router: node $NODE_NAME has no pod CIDR after a minute (kube-controller-manager allocates it)" >&2; exit 1; fi
conf=$1
jq --arg cidr "$cidr" '(.plugins[] | select(.type == "bridge") | .ipam.ranges) = [[{"subnet": $cidr}]]' \
  /etc/kube-router/cni.conflist > "$conf.tmp"
mv "$conf.tmp" "$conf"
echo "kube-router: wrote $conf for pod CIDR $cidr"`

func kubeRouterDaemonSet() *appsv1.DaemonSet {
	labels := map[string]string{"k8s-app": kubeRouterName}
	hostPath := func(name, path string, t corev1.HostPathType) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path, Type: &t}}}
	}
	health := &corev1.Probe{
		ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(kubeRouterHealth)}},
		PeriodSeconds: 2,
	}
	liveness := health.DeepCopy()
	liveness.InitialDelaySeconds, liveness.PeriodSeconds, liveness.FailureThreshold = 30, 5, 6
	privileged := true
	nodeName := corev1.EnvVar{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}
	kubeletConf := corev1.VolumeMount{Name: "kubelet-conf", MountPath: "/etc/kubernetes/kubelet.conf", ReadOnly: true}
	return &appsv1.DaemonSet{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "DaemonSet"},
		ObjectMeta: metav1.ObjectMeta{Name: kubeRouterName, Namespace: kubeRouterNS, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: kubeRouterName,
					PriorityClassName:  "system-node-critical",
					HostNetwork:        true,
					DNSPolicy:          corev1.DNSDefault,
					Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
					InitContainers: []corev1.Container{{
						Name:            "install-cni",
						Image:           KubeRouterImage,
						ImagePullPolicy: corev1.PullNever,
						Command:         []string{"/bin/sh", "-c", installCNIConf, "install-cni", kubeRouterCNIConf},
						Env:             []corev1.EnvVar{nodeName},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "cni-conf", MountPath: "/etc/cni/net.d"},
							{Name: "config", MountPath: "/etc/kube-router"},
							kubeletConf,
						},
					}},
					Containers: []corev1.Container{{
						Name:            kubeRouterName,
						Image:           KubeRouterImage,
						ImagePullPolicy: corev1.PullNever,
						Command:         []string{"/bin/sh", "-c", kubeRouterStart, "kube-router"},
						Args: []string{
							"--run-router=true", "--run-firewall=true", "--run-service-proxy=false",
							"--bgp-graceful-restart=true",
							fmt.Sprintf("--health-port=%d", kubeRouterHealth),
						},
						Env: []corev1.EnvVar{
							nodeName,
							{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
							{Name: "KUBE_ROUTER_CNI_CONF_FILE", Value: kubeRouterCNIConf},
						},
						ReadinessProbe:  health,
						LivenessProbe:   liveness,
						SecurityContext: &corev1.SecurityContext{Privileged: &privileged},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "lib-modules", MountPath: "/lib/modules", ReadOnly: true},
							{Name: "cni-conf", MountPath: "/etc/cni/net.d"},
							{Name: "xtables-lock", MountPath: "/run/xtables.lock"},
							kubeletConf,
						},
					}},
					Volumes: []corev1.Volume{
						hostPath("lib-modules", "/lib/modules", corev1.HostPathDirectoryOrCreate),
						hostPath("cni-conf", "/etc/cni/net.d", corev1.HostPathDirectoryOrCreate),
						hostPath("xtables-lock", "/run/xtables.lock", corev1.HostPathFileOrCreate),
						hostPath("kubelet-conf", "/etc/kubernetes/kubelet.conf", corev1.HostPathFile),
						{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: kubeRouterName},
						}}},
					},
				},
			},
		},
	}
}

// cniReady reports whether kube-router runs and is healthy on every node.
// A kube-router container that keeps restarting is an error: waiting
// longer would not help, and its log says why.
func cniReady(ctx context.Context, cs kubernetes.Interface, nodes int) (bool, string, error) {
	ds, err := cs.AppsV1().DaemonSets(kubeRouterNS).Get(ctx, kubeRouterName, metav1.GetOptions{})
	if err != nil {
		return false, "kube-router: " + err.Error(), nil
	}
	pods, err := cs.CoreV1().Pods(kubeRouterNS).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=" + kubeRouterName})
	if err != nil {
		return false, "kube-router: " + err.Error(), nil
	}
	for _, p := range pods.Items {
		for _, st := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			if st.RestartCount >= kubeRouterMaxRestarts {
				return false, "", fmt.Errorf("kindcluster: kube-router (the CNI) does not start: container %s of pod %s on node %s restarted %d times",
					st.Name, p.Name, p.Spec.NodeName, st.RestartCount)
			}
		}
	}
	s := ds.Status
	if s.ObservedGeneration < ds.Generation || int(s.UpdatedNumberScheduled) != nodes {
		return false, fmt.Sprintf("kube-router (the CNI): %d of %d nodes run its current version", s.UpdatedNumberScheduled, nodes), nil
	}
	if int(s.DesiredNumberScheduled) != nodes || int(s.NumberAvailable) != nodes {
		return false, fmt.Sprintf("kube-router (the CNI): %d of %d nodes have it available", s.NumberAvailable, nodes), nil
	}
	return true, "", nil
}

// cniLogTail returns the errors and last lines kube-router logged on each
// node (every container of its pods, the newest log of each that is not
// empty), read from the node's container logs, which need neither the API
// server nor a working pod network.
func (c *Cluster) cniLogTail(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	const script = `found=
for d in /var/log/pods/kube-system_kube-router-*/*/; do
  [ -d "$d" ] || continue
  # The newest log that has something: a container that has just
  # restarted has an empty one, and the crash is in the one before.
  f=
  for l in $(ls -t "$d"*.log 2>/dev/null); do
    [ -n "$f" ] || f=$l
    if [ -s "$l" ]; then f=$l; break; fi
  done
  [ -n "$f" ] || continue
  found=1; echo "== $f"
  # Errors first (a usage text after an unknown flag would push the
  # error itself out of the tail), then the last lines.
  errs=$(grep -iE 'error|fail|fatal|panic|unknown' "$f" | tail -n 10)
  [ -z "$errs" ] || printf '%s\n-- last lines:\n' "$errs"
  tail -n 25 "$f"
done
[ -n "$found" ] || echo "(no kube-router container has logged on this node)"`
	var b strings.Builder
	for _, node := range c.Nodes {
		out, err := exec.CommandContext(ctx, c.Toolchain.Docker, "exec", node, "sh", "-c", script).CombinedOutput()
		fmt.Fprintf(&b, "--- node %s", node)
		if err != nil {
			fmt.Fprintf(&b, " (%v)", err)
		}
		fmt.Fprintf(&b, "\n%s\n", strings.TrimRight(string(out), "\n"))
	}
	return b.String()
}
