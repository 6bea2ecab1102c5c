package render

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"

	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/config"
)

// The NetworkPolicies that follow the configuration. manifests/base holds
// the flows every platform has (default deny, DNS, databases in the
// namespace, the ingress controller, the Kubernetes API); manifests/
// components the fixed variants (an external database on its standard
// port, a routed service reachable from any namespace); this file opens
// exactly the flows that depend on values of onprem.yaml:
//
//   - an external database narrowed to spec.databases.<db>.external.cidrs
//     and .port;
//   - the HTTP proxy of spec.proxy, for every platform pod (the proxy
//     environment is given to every container), at the proxy's address
//     when it is an IP address, else at any address on the proxy's port.
//
// A private registry needs no flow: the kubelet pulls images, not pods.
// Build runners bring their own policies (charts/runner), with the
// registry's and the proxy's ports. GitOps runtimes on the platform's
// cluster are reached by the ingress controller through their namespace's
// onprem.dev/runtime label (manifests/base), whether spec.runtimes declares
// them or `onprem runtime install` alone installed them.

// standardPorts are the ports of the infrastructure services that the
// external-<db> components open.
var standardPorts = map[string][]int{
	"mongodb":    {27017},
	"postgresql": {5432},
	"redis":      {6379},
	"rabbitmq":   {5671, 5672},
}

// networkComponent returns the kustomize Component of the configuration's
// NetworkPolicies and the policies it adds (its policies.yaml), or nil when
// the configuration needs none.
func networkComponent(s config.Spec) (component map[string]any, policies []map[string]any, err error) {
	var patches []any
	for _, db := range []string{"mongodb", "postgresql", "redis", "rabbitmq"} {
		d := databaseOf(s, db)
		if d.Mode != config.DatabaseModeExternal || (len(d.External.CIDRs) == 0 && d.External.Port == 0) {
			continue
		}
		ports := standardPorts[db]
		if d.External.Port != 0 {
			ports = []int{d.External.Port}
		}
		cidrs := d.External.CIDRs
		if len(cidrs) == 0 {
			cidrs = []string{"0.0.0.0/0"}
		}
		rule := map[string]any{"to": ipBlocks(cidrs), "ports": tcpPorts(ports)}
		patch, err := yaml.Marshal([]any{map[string]any{"op": "replace", "path": "/spec/egress", "value": []any{rule}}})
		if err != nil {
			return nil, nil, fmt.Errorf("spec.databases.%s.external: %w", db, err)
		}
		patches = append(patches, map[string]any{
			"target": map[string]any{"group": "networking.k8s.io", "kind": "NetworkPolicy", "name": "onprem-" + db + "-client-egress"},
			"patch":  string(patch),
		})
	}

	proxies, err := proxyEndpoints(s.Proxy)
	if err != nil {
		return nil, nil, err
	}
	if len(proxies) > 0 {
		var egress []any
		for _, p := range proxies {
			egress = append(egress, map[string]any{"to": ipBlocks([]string{p.cidr}), "ports": tcpPorts([]int{p.port})})
		}
		policies = append(policies, policy("onprem-proxy-egress",
			"Every platform pod to the HTTP proxy of spec.proxy (every container is given its environment).",
			map[string]any{}, nil, egress))
	}

	if len(policies) == 0 && len(patches) == 0 {
		return nil, nil, nil
	}
	c := map[string]any{"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component"}
	if len(policies) > 0 {
		c["resources"] = []any{"policies.yaml"}
	}
	if len(patches) > 0 {
		c["patches"] = patches
	}
	return c, policies, nil
}

func policy(name, why string, podSelector map[string]any, ingress, egress []any) map[string]any {
	spec := map[string]any{"podSelector": podSelector}
	var types []any
	if ingress != nil {
		types = append(types, "Ingress")
		spec["ingress"] = ingress
	}
	if egress != nil {
		types = append(types, "Egress")
		spec["egress"] = egress
	}
	spec["policyTypes"] = types
	return map[string]any{
		"apiVersion": "networking.k8s.io/v1",
		"kind":       "NetworkPolicy",
		"metadata": map[string]any{
			"name":        name,
			"annotations": map[string]any{"onprem.dev/why": why},
		},
		"spec": spec,
	}
}

func ipBlocks(cidrs []string) []any {
	var out []any
	for _, c := range cidrs {
		out = append(out, map[string]any{"ipBlock": map[string]any{"cidr": c}})
	}
	return out
}

func tcpPorts(ports []int) []any {
	var out []any
	for _, p := range ports {
		out = append(out, map[string]any{"protocol": "TCP", "port": p})
	}
	return out
}

// endpoint is an address range and port that the policies open.
type endpoint struct {
	cidr string
	port int
}

// proxyEndpoints are the proxies of spec.proxy: the host's own /32 (or
// /128) when it is an IP address, any address otherwise (a name resolves
// only at run time), on the URL's port (default 80 for http, 443 for
// https).
func proxyEndpoints(px config.Proxy) ([]endpoint, error) {
	var out []endpoint
	for _, f := range []struct{ field, value string }{
		{"spec.proxy.httpProxy", px.HTTPProxy}, {"spec.proxy.httpsProxy", px.HTTPSProxy},
	} {
		if f.value == "" {
			continue
		}
		u, err := url.Parse(f.value)
		if err != nil || u.Hostname() == "" {
			return nil, fmt.Errorf("%s: %q is not a proxy URL such as http://proxy.internal:3128", f.field, f.value)
		}
		port := 80
		if u.Scheme == "https" {
			port = 443
		}
		if p := u.Port(); p != "" {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("%s: port %q of %s is not a port", f.field, p, f.value)
			}
			port = n
		}
		e := endpoint{cidr: "0.0.0.0/0", port: port}
		if ip := net.ParseIP(u.Hostname()); ip != nil {
			if ip.To4() != nil {
				e.cidr = ip.String() + "/32"
			} else {
				e.cidr = ip.String() + "/128"
			}
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	return out, nil
}
