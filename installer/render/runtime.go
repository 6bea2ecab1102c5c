package render

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/sizing"
	"onprem.dev/onprem/manifests"
)

// GitOps runtimes are rendered one at a time, apart from the platform, like
// build runners: each is a Helm release of the release's runtime chart
// (release.Release.Runtime, an upstream chart fetched from its repository
// or read from a bundle) in the runtime's namespace, on the platform's
// cluster or another one. The same post-render (labels, relocation,
// hardening, placement, proxy) applies, without the platform's bases and
// the operator's overlays.
const (
	// RuntimeGroup is the Group of a runtime's Component.
	RuntimeGroup = "runtime"
	// RuntimeGitCredentials is the Secret of a runtime's namespace that
	// holds its Git token: an Argo CD credential template
	// (argocd.argoproj.io/secret-type: repo-creds) for the configuration
	// repository's URL. The chart receives its name (runtime.gitCredentials).
	RuntimeGitCredentials = "onprem-runtime-git"
)

// RuntimeInputError is a runtime that cannot be rendered as given: its
// name or namespace, or its access's tunnel server, that config's rules
// refuse (config.ValidateRuntime, config.ValidateTunnelServer: Err wraps
// each problem's config.FieldError), a release that cannot map the chart's
// values, a value the chart requires.
type RuntimeInputError struct{ Err error }

func (e *RuntimeInputError) Error() string { return e.Err.Error() }
func (e *RuntimeInputError) Unwrap() error { return e.Err }

// RuntimePath is the field path under which render's refusals name a
// runtime's fields: the runtime it is given may come from flags rather than
// from spec.runtimes, whose index it does not know.
const RuntimePath = "spec.runtimes[]"

// RuntimeDefaults names an unnamed runtime codefresh and puts it in the
// namespace named after it when none is given (config.RuntimeDefaults),
// and checks both with config's rules (config.ValidateRuntime).
func RuntimeDefaults(rt config.Runtime) (config.Runtime, error) {
	rt = config.RuntimeDefaults(rt)
	if err := config.ValidateRuntime(RuntimePath, rt); err != nil {
		return rt, &RuntimeInputError{refusal("runtime", rt.Name, RuntimePath, err)}
	}
	return rt, nil
}

// RuntimeOptions is what RenderRuntime needs.
type RuntimeOptions struct {
	// Installation is the platform's configuration (defaulted and valid),
	// with spec.version the release's. Its spec.domain makes the platform
	// URL, spec.runtimeConfig.accountId is the account the runtime
	// registers with, spec.ingress, spec.placement and spec.proxy are
	// passed on.
	Installation *config.Installation
	Release      *release.Release
	// Runtime is the runtime (RuntimeDefaults applied here).
	Runtime config.Runtime
	// ConfigurationRuntime: this runtime holds the configuration.
	ConfigurationRuntime bool
	// PlatformCA: the runtime's namespace holds the platform's CA
	// (RuntimePlatformCA), which its chart is told to trust.
	PlatformCA bool
	// Chart is the release's runtime chart, already fetched (see
	// installer/chartfetch); its name and version must be the release's.
	Chart *chartv2.Chart
	// Manifests defaults to the embedded ones (a bundle brings its own).
	Manifests fs.FS
}

// Secrets of a runtime's namespace that its chart is told about (by
// reference: the chart never receives a secret value).
const (
	// RuntimePlatformToken holds the platform user token the runtime
	// registers with (key RuntimePlatformTokenKey).
	RuntimePlatformToken    = "onprem-runtime-platform-token"
	RuntimePlatformTokenKey = "token"
	// RuntimePlatformCA holds the CA certificates of a platform whose
	// certificate the runtime's nodes do not trust (key
	// RuntimePlatformCAKey): the self-signed CA onprem made, or the
	// ca.crt of the operator's TLS Secret.
	RuntimePlatformCA    = "onprem-runtime-platform-ca"
	RuntimePlatformCAKey = "ca-bundle.crt"
	// RuntimeGitPasswordKey is the key of the Git token in
	// RuntimeGitCredentials; RuntimeGitUsername the user name sent with it
	// (Git hosts accept any non-empty one with a token).
	RuntimeGitPasswordKey = "password"
	RuntimeGitUsername    = "onprem"
)

// PlatformURL is the URL the platform is served at, which runtimes
// register with.
func PlatformURL(in *config.Installation) string { return "https://" + in.Spec.Domain }

// RuntimeHost is the host name of a runtime's Ingress.
func RuntimeHost(in *config.Installation, rt config.Runtime) string {
	if rt.Access.Host != "" {
		return rt.Access.Host
	}
	return rt.Name + ".runtimes." + in.Spec.Domain
}

// RenderRuntime renders one GitOps runtime: the runtime chart with the
// release's values, then what onprem fills in at the paths the release's
// runtime contract names (release.RemoteChart.Contract), then every image
// at its values paths, then the post-render.
//
// What each contract key receives:
//
//	runtimeName          the runtime's name
//	platformURL          https://DOMAIN
//	accountID            spec.runtimeConfig.accountId
//	platformToken        {name, key} of RuntimePlatformToken
//	platformCA           {name, key} of RuntimePlatformCA, when it exists
//	configurationRuntime true on the runtime holding the configuration
//	gitUsername          RuntimeGitUsername
//	gitPassword          {name, key} of RuntimeGitCredentials
//	ingressEnabled       true in access mode ingress
//	ingressClassName     the access's className, else the platform's
//	ingressHosts         [the access's host, else NAME.runtimes.DOMAIN]
//	ingressProtocol      https
//	ingressURL           the access's url, in mode url
//	tunnelEnabled        true in access mode tunnel
//	tunnelServerHost     in mode tunnel, the access's tunnelServer.host
//	tunnelServerPort     in mode tunnel, its port (default 443)
//	tunnelSubdomainHost  in mode tunnel, its subdomainHost
//	nodeSelector         spec.placement.nodeSelector
//	tolerations          spec.placement.tolerations
//	httpProxy, httpsProxy, noProxy   spec.proxy
//
// No secret value is ever a value: the chart reads them from the Secrets.
func RenderRuntime(ctx context.Context, o RuntimeOptions) (*Component, error) {
	in, rel := o.Installation, o.Release
	if in == nil || rel == nil || o.Chart == nil || o.Chart.Metadata == nil {
		return nil, fmt.Errorf("render runtime: an installation, a release and a chart are required")
	}
	a := rel.Runtime
	if a == nil {
		return nil, fmt.Errorf("release %s has no GitOps runtime (its manifest has no runtime section)", rel.Version)
	}
	rt, err := RuntimeDefaults(o.Runtime)
	if err != nil {
		return nil, err
	}
	if o.Manifests == nil {
		o.Manifests = manifests.FS
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if got := o.Chart.Metadata; got.Name != a.Chart || got.Version != a.ChartVersion {
		return nil, fmt.Errorf("runtime %s: release %s needs chart %s %s, but was given %s %s", rt.Name, rel.Version, a.Chart, a.ChartVersion, got.Name, got.Version)
	}
	if len(a.Contract) == 0 {
		return nil, &RuntimeInputError{fmt.Errorf("runtime %s: release %s installs chart %s %s, but its manifest has no runtime.contract for that chart version: onprem cannot map the chart's values (the name, platform and credentials it must fill in); use the onprem that ships release %s, or a bundle of it",
			rt.Name, rel.Version, a.Chart, a.ChartVersion, rel.Version)}
	}

	values := sizing.Merge(nil, a.Values)
	contract, err := RuntimeContractValues(in, rt, a, o.ConfigurationRuntime, o.PlatformCA)
	if err != nil {
		return nil, &RuntimeInputError{fmt.Errorf("runtime %s: release %s: %w", rt.Name, rel.Version, err)}
	}
	for _, p := range slices.Sorted(maps.Keys(contract)) {
		if err := setPath(values, p, contract[p]); err != nil {
			return nil, fmt.Errorf("runtime %s: release %s: runtime.contract: %w", rt.Name, rel.Version, err)
		}
	}
	if ps := in.Spec.Registry.PullSecret; ps != "" {
		for _, l := range a.PullSecrets {
			v := []any{map[string]any{"name": ps}}
			if l.Format == release.ListOfNames {
				v = []any{ps}
			}
			if err := setPath(values, l.Path, v); err != nil {
				return nil, fmt.Errorf("runtime %s: release %s: runtime.pullSecrets: %w", rt.Name, rel.Version, err)
			}
		}
	}
	name := config.RuntimeRelease(rt.Name)
	ms, err := charts.Template(o.Chart, name, rt.Namespace, values)
	if err != nil {
		// A subchart the package lacks, or a value the chart requires
		// (its templates fail, naming it): nothing was applied.
		return nil, &RuntimeInputError{fmt.Errorf("runtime %s: release %s: chart %s %s: %w", rt.Name, rel.Version, a.Chart, a.ChartVersion, err)}
	}
	objs, crds, err := chartObjects("runtime "+rt.Name, ms)
	if err != nil {
		return nil, err
	}
	objs, err = lastOfEach(objs)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: chart %s %s: %w", rt.Name, a.Chart, a.ChartVersion, err)
	}
	for _, obj := range objs {
		setLabel(obj, ComponentLabel, name)
		if namespaced(obj) {
			obj.SetNamespace("")
		}
	}
	post := &postRender{in: in, manifests: o.Manifests, namespace: rt.Namespace, runner: true, upstream: true}
	out, err := post.run(objs)
	if err != nil {
		return nil, fmt.Errorf("runtime %s: %w", rt.Name, err)
	}
	// The upstream chart's app-proxy and Argo CD server make Secrets that
	// its other pods read (the runtime's tokens, the admin password).
	c := &Component{Name: name, Group: RuntimeGroup, Chart: a.Chart, ChartVersion: a.ChartVersion, Values: values, Objects: out, Loaded: o.Chart,
		ConfigAtRunTime: true}
	addChartCRDs(c, crds)
	installOrder(c.Objects)
	return c, nil
}

// namespaced tells the cluster-scoped kinds a runtime chart brings.
func namespaced(obj *unstructured.Unstructured) bool {
	switch obj.GetKind() {
	case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Namespace",
		"PriorityClass", "StorageClass", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration":
		return false
	}
	return true
}

// setPath writes value at a dot-separated path of values, making the maps
// on the way; a path that crosses a value that is not a map is an error.
func setPath(values map[string]any, path string, value any) error {
	keys := strings.Split(path, ".")
	m := values
	for i, k := range keys {
		if k == "" {
			return fmt.Errorf("%q is not a values path (empty key)", path)
		}
		if i == len(keys)-1 {
			m[k] = value
			return nil
		}
		next, ok := m[k]
		if !ok || next == nil {
			child := map[string]any{}
			m[k] = child
			m = child
			continue
		}
		child, ok := next.(map[string]any)
		if !ok {
			return fmt.Errorf("%s is a %T, not a map", strings.Join(keys[:i+1], "."), next)
		}
		m = child
	}
	return nil
}

// RuntimeContractValues is what onprem fills in for runtime rt, keyed by
// the values paths of the release's contract a (see RenderRuntime). A
// required key the contract lacks, an access mode the chart cannot do, or
// a missing account is an error.
func RuntimeContractValues(in *config.Installation, rt config.Runtime, a *release.RemoteChart, configRuntime, platformCA bool) (map[string]any, error) {
	s := in.Spec
	if s.RuntimeConfig.AccountID == "" {
		return nil, &RuntimeInputError{errors.New("no platform account: set spec.runtimeConfig.accountId in onprem.yaml, or give --account")}
	}
	ref := func(name, key string) map[string]any { return map[string]any{"name": name, "key": key} }
	mode := config.RuntimeAccessMode(rt.Access)
	want := map[string]any{
		release.ContractRuntimeName:    rt.Name,
		release.ContractPlatformURL:    PlatformURL(in),
		release.ContractAccountID:      s.RuntimeConfig.AccountID,
		release.ContractPlatformToken:  ref(RuntimePlatformToken, RuntimePlatformTokenKey),
		release.ContractConfigRuntime:  configRuntime,
		release.ContractGitUsername:    RuntimeGitUsername,
		release.ContractGitPassword:    ref(RuntimeGitCredentials, RuntimeGitPasswordKey),
		release.ContractIngressEnabled: mode == config.RuntimeAccessIngress,
		release.ContractTunnelEnabled:  mode == config.RuntimeAccessTunnel,
	}
	if platformCA {
		want[release.ContractPlatformCA] = ref(RuntimePlatformCA, RuntimePlatformCAKey)
	}
	switch mode {
	case config.RuntimeAccessIngress:
		class := rt.Access.ClassName
		if class == "" {
			class = s.Ingress.ClassName
		}
		want[release.ContractIngressClass] = class
		want[release.ContractIngressHosts] = []any{RuntimeHost(in, rt)}
		want[release.ContractIngressProtocol] = "https"
	case config.RuntimeAccessTunnel:
		// The operator's tunnel server, never the chart's default (the
		// vendor's hosted one).
		ts := rt.Access.TunnelServer
		if err := config.ValidateTunnelServer(RuntimePath+".access.tunnelServer", ts); err != nil {
			// Said as before; config's problems are wrapped.
			return nil, &RuntimeInputError{&summary{"access mode tunnel needs a tunnel server of yours: set spec.runtimes[].access.tunnelServer.host and .subdomainHost (onprem does not use the vendor's hosted one)",
				refusal("runtime", rt.Name, RuntimePath, err)}}
		}
		want[release.ContractTunnelServer] = ts.Host
		want[release.ContractTunnelPort] = config.TunnelServerPort(ts)
		want[release.ContractTunnelSubdomain] = ts.SubdomainHost
	case config.RuntimeAccessURL:
		want[release.ContractIngressURL] = rt.Access.URL
	}
	if len(s.Placement.NodeSelector) > 0 {
		ns := map[string]any{}
		for k, v := range s.Placement.NodeSelector {
			ns[k] = v
		}
		want[release.ContractNodeSelector] = ns
	}
	if len(s.Placement.Tolerations) > 0 {
		var tol []any
		b, err := json.Marshal(s.Placement.Tolerations)
		if err == nil {
			err = json.Unmarshal(b, &tol)
		}
		if err != nil {
			return nil, fmt.Errorf("spec.placement.tolerations: %w", err)
		}
		want[release.ContractTolerations] = tol
	}
	if px := s.Proxy; px.HTTPProxy != "" || px.HTTPSProxy != "" {
		want[release.ContractHTTPProxy] = px.HTTPProxy
		want[release.ContractHTTPSProxy] = px.HTTPSProxy
		want[release.ContractNoProxy] = noProxy(rt.Namespace, px.NoProxy)
	}

	// What the runtime cannot work without, or an access mode it was
	// asked for, must have a path; anything else the chart does not read
	// is left out.
	needed := append([]string{}, release.RequiredContractKeys...)
	switch mode {
	case config.RuntimeAccessIngress:
		needed = append(needed, release.ContractIngressEnabled, release.ContractIngressHosts)
	case config.RuntimeAccessTunnel:
		needed = append(needed, release.ContractTunnelEnabled, release.ContractTunnelServer, release.ContractTunnelPort, release.ContractTunnelSubdomain)
	case config.RuntimeAccessURL:
		needed = append(needed, release.ContractIngressURL)
	}
	if platformCA {
		needed = append(needed, release.ContractPlatformCA)
	}
	for _, k := range needed {
		if a.Contract[k] == "" {
			return nil, fmt.Errorf("the runtime chart %s %s has no values path for %s (runtime.contract.%s in the release manifest)", a.Chart, a.ChartVersion, k, k)
		}
	}
	out := map[string]any{}
	for k, v := range want {
		if p := a.Contract[k]; p != "" {
			out[p] = v
		}
	}
	return out, nil
}
