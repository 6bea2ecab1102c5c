// Package release reads and checks release manifests: what one platform
// version is made of (components, charts, images, migrations), which
// Kubernetes versions it supports and which versions it may be upgraded
// from. Manifests for the versions this onprem knows are embedded; a bundle
// brings its own.
package release

// APIVersion and Kind identify a release manifest.
const (
	APIVersion = "onprem.dev/v1alpha1"
	Kind       = "Release"
)

// Groups a component may belong to. The group decides when the component is
// installed (see installer/render) and the order of the apply DAG.
const (
	GroupIngress        = "ingress"
	GroupInfrastructure = "infrastructure"
	GroupLegacy         = "legacy"
	GroupProvisioning   = "provisioning"
	GroupPipelines      = "pipelines"
	GroupGitOps         = "gitops"
	// GroupBackup is the scheduled backup (spec.backup.schedule).
	GroupBackup = "backup"
)

// Release is one platform version.
type Release struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Version is the platform version (semver, no leading v).
	Version string `json:"version"`
	// Date is the release date (YYYY-MM-DD).
	Date string `json:"date,omitempty"`
	// MinInstallerVersion is the oldest onprem that may install this release.
	MinInstallerVersion string `json:"minInstallerVersion"`
	// Kubernetes is the range of Kubernetes server versions supported, as a
	// hashicorp/go-version constraint (">= 1.30, < 1.37"): cluster versions
	// such as v1.33.4-eks-1234 are not always semver.
	Kubernetes string `json:"kubernetes"`
	// UpgradeFrom is the Masterminds semver constraint that an installed
	// version must satisfy to be upgraded to this one directly. Empty: this
	// release can only be installed fresh.
	UpgradeFrom string `json:"upgradeFrom,omitempty"`
	// Required releases may not be skipped: an upgrade path stops here.
	Required bool `json:"required,omitempty"`
	// Notes is a one-paragraph summary shown by `onprem versions`.
	Notes string `json:"notes,omitempty"`

	Images     []Image     `json:"images"`
	Components []Component `json:"components"`
	// Runner is the build runner's chart and images. It is not a
	// component: 'onprem runner install' (or spec.runners[] in
	// onprem.yaml) installs it, once per runner, on the platform's cluster
	// or a remote one (installer/runner). Its images are release images
	// like the others, so bundles carry them.
	Runner *Addon `json:"runner,omitempty"`
	// Runtime is the GitOps runtime's chart (Argo CD, Workflows, Rollouts,
	// Events and app-proxy): an upstream chart in a remote chart
	// repository, fetched with the Helm SDK ('onprem runtime install' or
	// spec.runtimes[]; installer/gitops). Its images are the ones its
	// render holds with the release's values (render.ReleaseImages), not a
	// list kept here; bundles carry the chart and those images.
	Runtime    *RemoteChart `json:"runtime,omitempty"`
	Migrations []Migration  `json:"migrations,omitempty"`
	// Trust are the public keys this onprem trusts to sign air-gapped
	// bundles (installer/bundle). Only the releases embedded in the
	// binary count (Set.Keyring): a bundle's own manifest cannot make
	// itself trusted.
	Trust []TrustedKey `json:"trust,omitempty"`
}

// TrustedKey is a public key trusted to sign bundles.
type TrustedKey struct {
	// Name says whose key it is.
	Name string `json:"name"`
	// PublicKey is the ed25519 public key: PEM ("PUBLIC KEY") or base64
	// of its 32 bytes.
	PublicKey string `json:"publicKey"`
}

// RemoteChart is a chart of the release that lives in a remote chart
// repository rather than in this onprem.
type RemoteChart struct {
	// Chart is the chart's name in its repository.
	Chart        string `json:"chart"`
	ChartVersion string `json:"chartVersion"`
	// Repository is an OCI repository (oci://host/path, the chart at
	// host/path/CHART) or a Helm HTTP(S) repository (https://host/path,
	// with its index.yaml).
	Repository string `json:"repository"`
	// Digest pins the chart archive (sha256:...); a fetched archive that
	// does not match it is refused. Bundles always pin.
	Digest string `json:"digest,omitempty"`
	// Contract says where this chart version reads what onprem fills in:
	// each key is one of RuntimeContractKeys, each value a dot-separated
	// values path of the chart (global.runtime.name). The mapping lives
	// here, per release, so that a chart version that moves a value needs
	// a new manifest, not new code.
	Contract map[string]string `json:"contract,omitempty"`
	// PullSecrets are the chart's values paths that take image pull
	// Secrets, each in its format: with spec.registry.pullSecret, onprem
	// writes that Secret's name at every one (the pods of templates that
	// read none get it from the post-render).
	PullSecrets []ValuesList `json:"pullSecrets,omitempty"`
	// Values is the release's layer of the chart's values.
	Values map[string]any `json:"values,omitempty"`
}

// Formats of a ValuesList.
const (
	// ListOfReferences: [{name: NAME}], as a pod's imagePullSecrets.
	ListOfReferences = "references"
	// ListOfNames: [NAME].
	ListOfNames = "names"
)

// ValuesList is a values path that takes a list of names, and the list's
// format (ListOfReferences or ListOfNames).
type ValuesList struct {
	Path   string `json:"path"`
	Format string `json:"format"`
}

// The keys of RemoteChart.Contract: what onprem fills in for a GitOps
// runtime (installer/render RenderRuntime says what each one receives).
const (
	ContractRuntimeName     = "runtimeName"
	ContractPlatformURL     = "platformURL"
	ContractAccountID       = "accountID"
	ContractPlatformToken   = "platformToken"
	ContractPlatformCA      = "platformCA"
	ContractConfigRuntime   = "configurationRuntime"
	ContractGitUsername     = "gitUsername"
	ContractGitPassword     = "gitPassword"
	ContractIngressEnabled  = "ingressEnabled"
	ContractIngressClass    = "ingressClassName"
	ContractIngressHosts    = "ingressHosts"
	ContractIngressProtocol = "ingressProtocol"
	ContractIngressURL      = "ingressURL"
	ContractTunnelEnabled   = "tunnelEnabled"
	ContractTunnelServer    = "tunnelServerHost"
	ContractTunnelPort      = "tunnelServerPort"
	ContractTunnelSubdomain = "tunnelSubdomainHost"
	ContractNodeSelector    = "nodeSelector"
	ContractTolerations     = "tolerations"
	ContractHTTPProxy       = "httpProxy"
	ContractHTTPSProxy      = "httpsProxy"
	ContractNoProxy         = "noProxy"
)

// RuntimeContractKeys are every key a runtime contract may map; the
// required ones are what a runtime cannot work without (its name, the
// platform it registers with and how, and its Git credentials).
var (
	RuntimeContractKeys = []string{
		ContractRuntimeName, ContractPlatformURL, ContractAccountID, ContractPlatformToken, ContractPlatformCA,
		ContractConfigRuntime, ContractGitUsername, ContractGitPassword, ContractIngressEnabled, ContractIngressClass,
		ContractIngressHosts, ContractIngressProtocol, ContractIngressURL, ContractTunnelEnabled, ContractTunnelServer,
		ContractTunnelPort, ContractTunnelSubdomain, ContractNodeSelector,
		ContractTolerations, ContractHTTPProxy, ContractHTTPSProxy, ContractNoProxy,
	}
	RequiredContractKeys = []string{ContractRuntimeName, ContractPlatformURL, ContractAccountID, ContractPlatformToken, ContractGitPassword}
)

// Addon is a chart of the release that is installed apart from the
// platform's components (the build runner).
type Addon struct {
	Chart        string `json:"chart"`
	ChartVersion string `json:"chartVersion"`
	// Images maps the chart's image keys (values images.<key>) to image
	// names of the release.
	Images map[string]string `json:"images"`
}

// Image is one container image of the release.
type Image struct {
	// Name is how components refer to the image.
	Name string `json:"name"`
	// Repository is a full repository (docker.io/library/redis) or, with
	// Platform, a path under the configured platform registry
	// (spec.images.platform in onprem.yaml).
	Repository string `json:"repository"`
	Tag        string `json:"tag"`
	// Digest pins the image (sha256:...). Bundles always pin; embedded
	// manifests may leave it empty until the release is published.
	Digest   string `json:"digest,omitempty"`
	Platform bool   `json:"platform,omitempty"`
	// Chart, on an image of a bundle's release manifest, names the chart
	// (NAME-VERSION) whose render brought it: an image an upstream chart
	// runs by itself (the runtime chart's, with the release's values),
	// which bundle create finds in the chart's render and carries. The
	// release's own images, which the charts take from their values,
	// have none.
	Chart string `json:"chart,omitempty"`
}

// Component is one Helm release of the platform.
type Component struct {
	Name         string `json:"name"`
	Chart        string `json:"chart"`
	ChartVersion string `json:"chartVersion"`
	Group        string `json:"group"`
	// DependsOn names components that must be ready first. A dependency on a
	// component that the configuration leaves out is dropped.
	DependsOn []string `json:"dependsOn,omitempty"`
	// Images maps the chart's image keys (values images.<key>) to image names.
	Images map[string]string `json:"images"`
	// Values is the release's layer of the chart's values.
	Values map[string]any `json:"values,omitempty"`
	// Deprecated says why and until when, for components on their way out.
	Deprecated string `json:"deprecated,omitempty"`
}

// Migration is a data migration that runs as a Job before the components of
// its release are upgraded.
type Migration struct {
	Name string `json:"name"`
	// Component whose image runs the migration (with Args).
	Component string   `json:"component"`
	Args      []string `json:"args"`
	// Touches lists the data the migration changes; it is backed up first.
	Touches []DataRef `json:"touches"`
	// Timeout is a Go duration (default 10m).
	Timeout string `json:"timeout,omitempty"`
}

// DataRef names a database of a service.
type DataRef struct {
	Engine  string `json:"engine"`  // mongodb or postgresql
	Service string `json:"service"` // the service whose database it is
}

// Component returns the named component and whether it exists.
func (r *Release) Component(name string) (Component, bool) {
	for _, c := range r.Components {
		if c.Name == name {
			return c, true
		}
	}
	return Component{}, false
}

// Image returns the named image and whether it exists.
func (r *Release) Image(name string) (Image, bool) {
	for _, i := range r.Images {
		if i.Name == name {
			return i, true
		}
	}
	return Image{}, false
}

// ComponentNames lists the release's components in manifest order.
func (r *Release) ComponentNames() []string {
	names := make([]string, 0, len(r.Components))
	for _, c := range r.Components {
		names = append(names, c.Name)
	}
	return names
}
