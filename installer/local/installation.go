package local

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/sethvargo/go-envconfig"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
)

// DefaultDomain is the domain of a local installation: a *.localhost name,
// which browsers and curl resolve to the loopback address by themselves
// (RFC 6761), so nothing has to be added to /etc/hosts.
const DefaultDomain = "onprem.localhost"

// ingressEnv are the settings Up forces on every local installation,
// given the way environment variables are (they win over the file): the
// ingress controller is installed, behind a NodePort Service.
var ingressEnv = map[string]string{
	"ONPREM_INGRESS_MODE":         config.IngressModeInstall,
	"ONPREM_INGRESS_SERVICE_TYPE": config.ServiceTypeNodePort,
}

// nodePortSets pins the ingress Service's node ports to the ones the kind
// node maps to the host (--set, which wins over the file's values).
func nodePortSets() []string {
	return []string{
		fmt.Sprintf("ingress.nodePorts.http=%d", HTTPNodePort),
		fmt.Sprintf("ingress.nodePorts.https=%d", HTTPSNodePort),
	}
}

// lookup is the environment of a local install: ingressEnv over base.
func lookup(base envconfig.Lookuper) envconfig.Lookuper {
	if base == nil {
		base = envconfig.OsLookuper()
	}
	return envconfig.MultiLookuper(envconfig.MapLookuper(ingressEnv), base)
}

// generatedHeader starts every onprem.yaml Up writes (Down removes only
// such a file).
const generatedHeader = "# Written by 'onprem local up': the onprem.yaml of the local installation"

// localCPURequest is the CPU a component asks the scheduler for in a
// configuration Up writes: the small profile's requests (1.7 CPU for the
// whole platform) do not fit next to a control plane on a 2-core laptop,
// and a trial on one machine has nothing to share its CPU with. The
// requests are also the kernel's weights when the node is busy, so the
// path every request takes (the ingress controller, MongoDB, PostgreSQL)
// keeps five times a service's share, as in the profile: with equal
// weights, every service restarting at once starved it and requests
// timed out.
func localCPURequest(component string) string {
	switch component {
	case "ingress", "mongodb", "postgresql":
		return "50m"
	}
	return "10m"
}

// generated is the onprem.yaml Up writes when none is given.
type generated struct {
	Name, Version, Domain string
	// Components are the release's components that get the lowered CPU
	// request (the ingress also gets its node ports).
	Components []string
	// Kubeconfig and Path are named in the file's comment.
	Kubeconfig, Path string
}

// yaml renders the file.
func (g generated) yaml() []byte {
	var b strings.Builder
	fmt.Fprintf(&b, generatedHeader+` %[1]q.
# Change it, then apply the change with:
#   onprem install -c %[4]s --kubeconfig %[5]s
# 'onprem config init' writes a starter file that explains every section.
apiVersion: onprem.dev/v1alpha1
kind: Installation
metadata:
  name: %[1]s
spec:
  version: %[2]s
  # A *.localhost name resolves to 127.0.0.1 by itself.
  domain: %[3]s
  profile: small
  ingress:
    mode: install
    # The kind node maps this machine's ports to the node ports below: keep them.
    serviceType: NodePort
  # A trial on one machine: every component asks the scheduler for 10m of
  # CPU (%[6]s for the ingress controller and the databases every request
  # reaches), so that the whole platform fits on a laptop. Remove the
  # resources lines to get the profile's requests.
  components:
    ingress:
      values:
        nodePorts: {http: %[7]d, https: %[8]d}
        resources: {requests: {cpu: %[6]s}}
`, g.Name, strconv.Quote(g.Version), g.Domain, g.Path, g.Kubeconfig, localCPURequest("ingress"), HTTPNodePort, HTTPSNodePort)
	for _, c := range g.Components {
		if c == "ingress" {
			continue
		}
		fmt.Fprintf(&b, "    %s:\n      values: {resources: {requests: {cpu: %s}}}\n", c, localCPURequest(c))
	}
	return []byte(b.String())
}

// localComponents are the components of rel that a default configuration
// installs (the legacy services are off by default).
func localComponents(rel *release.Release) []string {
	var out []string
	for _, c := range rel.Components {
		if c.Group != "legacy" {
			out = append(out, c.Name)
		}
	}
	return out
}

// checkServing warns when the operator's own configuration does not say
// what Up forces on it (ingress installed, NodePort, the mapped node
// ports): a later 'onprem install -c FILE' would undo it.
func checkServing(ctx context.Context, src action.Source) ([]string, error) {
	l, err := src.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	in := l.Installation
	var diffs []string
	if in.Spec.Ingress.Mode != config.IngressModeInstall {
		diffs = append(diffs, "spec.ingress.mode: install")
	}
	if in.Spec.Ingress.ServiceType != config.ServiceTypeNodePort {
		diffs = append(diffs, "spec.ingress.serviceType: NodePort")
	}
	var ports map[string]any
	if c, ok := in.Spec.Components["ingress"]; ok {
		ports, _ = c.Values["nodePorts"].(map[string]any)
	}
	if fmt.Sprint(ports["http"]) != strconv.Itoa(HTTPNodePort) || fmt.Sprint(ports["https"]) != strconv.Itoa(HTTPSNodePort) {
		diffs = append(diffs, fmt.Sprintf("spec.components.ingress.values.nodePorts: {http: %d, https: %d}", HTTPNodePort, HTTPSNodePort))
	}
	return diffs, nil
}
