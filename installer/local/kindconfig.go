package local

import (
	"fmt"
	"os"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"
)

// The ingress controller's node ports: the kind node maps the host ports
// to these, and the installation pins its NodePort Service to them.
const (
	HTTPNodePort  = 30080
	HTTPSNodePort = 30443
)

// kindAPIVersion is the kind configuration API that Up writes and reads.
const kindAPIVersion = "kind.x-k8s.io/v1alpha4"

// cgroupV1Patches make Kubernetes 1.35+ start on a cgroup v1 host: the
// kubelet refuses cgroup v1 unless told, and kubeadm's SystemVerification
// preflight fails on it.
var cgroupV1Patches = []string{
	"kind: KubeletConfiguration\nfailCgroupV1: false\n",
	"kind: InitConfiguration\nnodeRegistration:\n  ignorePreflightErrors:\n  - SystemVerification\n",
	"kind: JoinConfiguration\nnodeRegistration:\n  ignorePreflightErrors:\n  - SystemVerification\n",
}

// readKindConfig reads a kind v1alpha4 Cluster configuration strictly.
func readKindConfig(path string) (*v1alpha4.Cluster, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, inputErr(fmt.Errorf("--kind-config %s: %w", path, err))
	}
	var c v1alpha4.Cluster
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return nil, inputErr(fmt.Errorf("--kind-config %s: not a kind configuration: %w", path, err))
	}
	if c.Kind != "Cluster" || c.APIVersion != kindAPIVersion {
		return nil, inputErr(fmt.Errorf("--kind-config %s: kind %q apiVersion %q: want kind: Cluster and apiVersion: %s (see https://kind.sigs.k8s.io/docs/user/configuration/)",
			path, c.Kind, c.APIVersion, kindAPIVersion))
	}
	return &c, nil
}

// kindConfig returns the cluster configuration Up creates: base (the
// --kind-config file; nil: one control-plane node) with the ingress's node
// ports mapped to the host ports on the first control-plane node, and, on
// a cgroup v1 host, the kubeadm patches that let Kubernetes start there.
// base is not changed.
func kindConfig(base *v1alpha4.Cluster, name string, p Ports, cgroupV1 bool) (*v1alpha4.Cluster, error) {
	c := &v1alpha4.Cluster{}
	if base != nil {
		// A deep copy through YAML: the caller's value stays as it was.
		data, err := yaml.Marshal(base)
		if err != nil {
			return nil, err
		}
		if err := yaml.Unmarshal(data, c); err != nil {
			return nil, err
		}
	}
	c.Kind, c.APIVersion, c.Name = "Cluster", kindAPIVersion, name
	if len(c.Nodes) == 0 {
		c.Nodes = []v1alpha4.Node{{Role: v1alpha4.ControlPlaneRole}}
	}
	cp := -1
	for i, n := range c.Nodes {
		if n.Role == v1alpha4.ControlPlaneRole || n.Role == "" {
			cp = i
			break
		}
	}
	if cp < 0 {
		return nil, inputErr(fmt.Errorf("--kind-config: no node has role control-plane: add one (the ingress's ports are mapped on it)"))
	}
	node := &c.Nodes[cp]
	for _, m := range node.ExtraPortMappings {
		if m.ContainerPort == HTTPNodePort || m.ContainerPort == HTTPSNodePort {
			return nil, inputErr(fmt.Errorf("--kind-config: the control-plane node already maps containerPort %d: remove that mapping; "+
				"onprem maps node ports %d and %d to --http-port and --https-port itself", m.ContainerPort, HTTPNodePort, HTTPSNodePort))
		}
	}
	node.ExtraPortMappings = append(node.ExtraPortMappings,
		v1alpha4.PortMapping{ContainerPort: HTTPNodePort, HostPort: int32(p.HTTP), ListenAddress: p.ListenAddress, Protocol: v1alpha4.PortMappingProtocolTCP},
		v1alpha4.PortMapping{ContainerPort: HTTPSNodePort, HostPort: int32(p.HTTPS), ListenAddress: p.ListenAddress, Protocol: v1alpha4.PortMappingProtocolTCP},
	)
	if cgroupV1 {
		c.KubeadmConfigPatches = append(c.KubeadmConfigPatches, cgroupV1Patches...)
	}
	return c, nil
}
