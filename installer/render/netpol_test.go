package render

import (
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"onprem.dev/onprem/installer/config"
)

// policiesOf returns the platform's NetworkPolicies by name.
func policiesOf(t *testing.T, res *Result) map[string]networkingv1.NetworkPolicy {
	t.Helper()
	out := map[string]networkingv1.NetworkPolicy{}
	for _, o := range res.Component(PlatformComponent).Objects {
		if o.GetKind() != "NetworkPolicy" {
			continue
		}
		var p networkingv1.NetworkPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &p); err != nil {
			t.Fatalf("NetworkPolicy %s: %v", o.GetName(), err)
		}
		out[p.Name] = p
	}
	return out
}

// egressOf describes a policy's egress rules as "cidr,cidr:port,port" per
// rule, for comparison.
func egressOf(p networkingv1.NetworkPolicy) []string {
	var out []string
	for _, r := range p.Spec.Egress {
		var to, ports []string
		for _, peer := range r.To {
			switch {
			case peer.IPBlock != nil:
				to = append(to, peer.IPBlock.CIDR)
			default:
				to = append(to, "pods")
			}
		}
		for _, port := range r.Ports {
			ports = append(ports, port.Port.String())
		}
		out = append(out, strings.Join(to, ",")+":"+strings.Join(ports, ","))
	}
	return out
}

func TestNetworkPoliciesFollowExternalDatabases(t *testing.T) {
	pols := policiesOf(t, mustRender(t, "external-databases"))
	for db, want := range map[string]string{
		// cidrs and port set: exactly those.
		"postgresql": "10.20.0.15/32,10.20.0.16/32:6432",
		// cidrs only: the standard port.
		"mongodb": "10.20.1.0/24:27017",
		// Neither: any address, on the standard ports only.
		"redis":    "0.0.0.0/0:6379",
		"rabbitmq": "0.0.0.0/0:5671,5672",
	} {
		p, ok := pols["onprem-"+db+"-client-egress"]
		if !ok {
			t.Errorf("no client egress policy for external %s", db)
			continue
		}
		if got := egressOf(p); len(got) != 1 || got[0] != want {
			t.Errorf("external %s: client egress %v, want [%s]", db, got, want)
		}
		if _, ok := pols["onprem-"+db+"-server-ingress"]; ok {
			t.Errorf("external %s: the server ingress policy is still rendered", db)
		}
	}
	// ingress.mode existing: the operator's controller, from its own
	// namespace, reaches the routed services.
	routed := pols["onprem-routed-ingress"]
	if from := routed.Spec.Ingress[0].From; len(from) != 1 || from[0].NamespaceSelector == nil || from[0].PodSelector != nil {
		t.Errorf("ingress.mode existing: routed services admit %+v, want pods of any namespace", from)
	}
}

func TestNetworkPoliciesFollowProxyAndIngress(t *testing.T) {
	minimal := policiesOf(t, mustRender(t, "minimal"))
	for _, absent := range []string{"onprem-proxy-egress"} {
		if _, ok := minimal[absent]; ok {
			t.Errorf("minimal configuration renders %s", absent)
		}
	}
	// The platform's own controller: only its pods reach routed services.
	from := minimal["onprem-routed-ingress"].Spec.Ingress[0].From
	if len(from) != 1 || from[0].NamespaceSelector != nil || from[0].PodSelector == nil ||
		from[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "ingress-controller" {
		t.Errorf("minimal: routed services admit %+v, want the platform's ingress controller only", from)
	}

	// A proxy given as an IP address: that address and port only, for
	// every pod. A private registry adds nothing (the kubelet pulls).
	large := policiesOf(t, mustRender(t, "private-registry-large"))
	px, ok := large["onprem-proxy-egress"]
	if !ok {
		t.Fatal("spec.proxy set, no onprem-proxy-egress policy")
	}
	if got := egressOf(px); !slices.Equal(got, []string{"10.0.8.8/32:3128"}) {
		t.Errorf("proxy egress %v, want [10.0.8.8/32:3128]", got)
	}
	if len(px.Spec.PodSelector.MatchLabels)+len(px.Spec.PodSelector.MatchExpressions) != 0 {
		t.Errorf("proxy egress selects %v, want every pod", px.Spec.PodSelector)
	}
	for name := range large {
		if _, ok := minimal[name]; !ok && name != "onprem-proxy-egress" {
			t.Errorf("private registry configuration adds policy %s", name)
		}
	}

	// A proxy named by host: any address, on its port only, once for
	// both settings. Gateway API routes: any namespace to routed services.
	every := policiesOf(t, mustRender(t, "everything"))
	if got := egressOf(every["onprem-proxy-egress"]); !slices.Equal(got, []string{"0.0.0.0/0:3128"}) {
		t.Errorf("proxy by name: egress %v, want [0.0.0.0/0:3128]", got)
	}
	if from := every["onprem-routed-ingress"].Spec.Ingress[0].From; len(from) != 1 || from[0].NamespaceSelector == nil {
		t.Errorf("gateway API: routed services admit %+v, want pods of any namespace", from)
	}
}

func TestNetworkPoliciesRefuseBadProxy(t *testing.T) {
	_, _, err := networkComponent(config.Spec{Proxy: config.Proxy{HTTPSProxy: "http://10.0.8.8:99999"}})
	if err == nil || !strings.Contains(err.Error(), "spec.proxy.httpsProxy") {
		t.Errorf("error %v, want one naming spec.proxy.httpsProxy", err)
	}
}
