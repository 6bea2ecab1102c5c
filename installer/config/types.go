// Package config is the onprem.yaml API: the Installation type, its strict
// decoder, defaults, validation, environment and flag overrides, and the JSON
// Schema that editors use to complete the file.
package config

import "slices"

// APIVersion and Kind identify an onprem.yaml document.
const (
	APIVersion = "onprem.dev/v1alpha1"
	Kind       = "Installation"
)

// Installation is the whole of onprem.yaml: what the platform installation
// should be. The struct tags drive decoding (json), environment overrides
// (env, read with go-envconfig under the ONPREM_ prefix) and the JSON Schema
// (doc, enum).
type Installation struct {
	APIVersion string   `json:"apiVersion" doc:"Always onprem.dev/v1alpha1."`
	Kind       string   `json:"kind" doc:"Always Installation."`
	Metadata   Metadata `json:"metadata,omitempty" env:",prefix=" doc:"Identifies this installation."`
	Spec       Spec     `json:"spec" env:",prefix=" doc:"What the installation should be."`
}

// Metadata names the installation.
type Metadata struct {
	Name string `json:"name,omitempty" env:"NAME, overwrite" doc:"Name of this installation, shown in status and recorded in the state. Default: onprem."`
}

// Spec is the desired installation.
type Spec struct {
	Version   string `json:"version" env:"VERSION, overwrite" doc:"Platform version to install: one of the releases that 'onprem versions' lists."`
	Namespace string `json:"namespace,omitempty" env:"NAMESPACE, overwrite" doc:"Namespace the platform is installed into. Default: onprem."`
	Domain    string `json:"domain" env:"DOMAIN, overwrite" doc:"DNS name the platform is served under, e.g. ci.example.com."`
	Profile   string `json:"profile,omitempty" env:"PROFILE, overwrite" enum:"small,medium,large" doc:"Sizing profile: requests, limits and replicas of every component. Default: small."`

	Availability string `json:"availability,omitempty" env:"AVAILABILITY, overwrite" enum:"single,high" doc:"single: one pod of a component may be all it has. high: every stateless component (the ingress controller too) runs at least two replicas on different nodes with a disruption budget, PostgreSQL runs three instances with automatic failover and synchronous replication (Patroni), RabbitMQ three nodes of one cluster whose queues are quorum queues, Redis a master and two replicas with Sentinel's automatic failover, and MongoDB a replica set of three members; needs three schedulable nodes (docs/availability.md). Independent of the profile. Default: single."`

	TLS      TLS      `json:"tls,omitempty" env:",prefix=TLS_" doc:"Certificate for the platform's domain."`
	Ingress  Ingress  `json:"ingress,omitempty" env:",prefix=INGRESS_" doc:"How traffic reaches the platform."`
	Images   Images   `json:"images,omitempty" env:",prefix=IMAGES_" doc:"Where the platform's own images are published."`
	Registry Registry `json:"registry,omitempty" env:",prefix=REGISTRY_" doc:"Private registry that every image is relocated to (air-gapped installs)."`
	Storage  Storage  `json:"storage,omitempty" env:",prefix=STORAGE_" doc:"Storage defaults for persistent volumes."`
	Modules  Modules  `json:"modules,omitempty" env:",prefix=MODULES_" doc:"Platform modules to install."`
	Legacy   Legacy   `json:"legacy,omitempty" env:",prefix=LEGACY_" doc:"Legacy services, off by default."`

	Databases Databases `json:"databases,omitempty" env:",prefix=" doc:"MongoDB, Redis, RabbitMQ and PostgreSQL: in-cluster or external."`

	Components map[string]ComponentOverride `json:"components,omitempty" doc:"Per-component overrides, keyed by component name (see 'onprem render'): extra Helm values, or disabling a component."`
	Overlays   []string                     `json:"overlays,omitempty" doc:"The operator's own kustomize overlay folders (each holding a kustomization.yaml of kind Component), applied after the built-in overlays, in order. Relative paths are relative to onprem.yaml."`

	Placement Placement `json:"placement,omitempty" doc:"Node selector and tolerations for every platform pod."`
	Proxy     Proxy     `json:"proxy,omitempty" env:",prefix=PROXY_" doc:"HTTP proxy settings given to every platform container."`

	Trust []TrustedKey `json:"trust,omitempty" doc:"Public keys trusted to sign air-gapped bundles, besides the ones onprem's releases name: install, upgrade, restore and every other command given --bundle refuse a bundle that is unsigned or signed by any other key unless --allow-unsigned is given (docs/air-gapped.md)."`

	Backup Backup `json:"backup,omitempty" doc:"Scheduled backups of the platform to an S3-compatible bucket, and the backups 'onprem upgrade apply' writes there before each step ('onprem backup --help')."`

	Rotation Rotation `json:"rotation,omitempty" doc:"What 'onprem install' renews by itself when it is old; everything else changes only with 'onprem rotate'."`

	Runners       []Runner      `json:"runners,omitempty" doc:"Build runners to install and register with the platform."`
	Runtimes      []Runtime     `json:"runtimes,omitempty" doc:"Argo-based GitOps runtimes to install."`
	RuntimeConfig RuntimeConfig `json:"runtimeConfig,omitempty" doc:"Configuration shared by all GitOps runtimes."`
}

// TLS says where the certificate for the domain comes from.
type TLS struct {
	Mode       string `json:"mode,omitempty" env:"MODE, overwrite" enum:"selfSigned,secret" doc:"selfSigned: onprem generates a CA and a certificate once and keeps them in the cluster. secret: use an existing kubernetes.io/tls Secret. Default: selfSigned."`
	SecretName string `json:"secretName,omitempty" env:"SECRET_NAME, overwrite" doc:"With mode secret: name of the kubernetes.io/tls Secret in the platform namespace."`
}

// Rotation lets 'onprem install' renew what it generated once it is old
// (installer/rotate); without it nothing generated ever changes but by
// 'onprem rotate'.
type Rotation struct {
	CertificateMaxAgeDays int `json:"certificateMaxAgeDays,omitempty" doc:"With spec.tls.mode selfSigned: 'onprem install' renews the serving certificate (under the same CA, so no client changes anything) once it is older than this many days or has fewer than 30 days left. 1 to 790; 0 or unset: never (renew with 'onprem rotate certificates')."`
	CredentialsMaxAgeDays int `json:"credentialsMaxAgeDays,omitempty" doc:"'onprem install' rotates each service's own PostgreSQL and MongoDB login, the RabbitMQ login and Redis password they share, and the PostgreSQL and MongoDB admins (as 'onprem rotate credentials' does, without disconnecting it) once it is older than this many days, and finishes a rotation that was interrupted. 1 to 3650; 0 or unset: never (rotate with 'onprem rotate credentials')."`
	KeysMaxAgeDays        int `json:"keysMaxAgeDays,omitempty" doc:"'onprem install' rotates the platform's signing and encryption keys (as 'onprem rotate keys' does: the old keys keep verifying and decrypting until 'onprem rotate keys --retire') once they are older than this many days, and finishes a key rotation that was interrupted. 1 to 3650; 0 or unset: never."`
}

// Ingress chooses between the controller that onprem installs and an
// IngressClass the cluster already has.
type Ingress struct {
	Mode        string     `json:"mode,omitempty" env:"MODE, overwrite" enum:"install,existing" doc:"install: onprem installs its ingress controller (Traefik). existing: use the IngressClass given in className. Default: install."`
	ClassName   string     `json:"className,omitempty" env:"CLASS_NAME, overwrite" doc:"IngressClass of the platform's Ingress objects. Default: onprem (the class of the installed controller)."`
	ServiceType string     `json:"serviceType,omitempty" env:"SERVICE_TYPE, overwrite" enum:"LoadBalancer,NodePort,ClusterIP" doc:"With mode install: type of the controller's Service. Default: LoadBalancer."`
	GatewayAPI  GatewayAPI `json:"gatewayAPI,omitempty" env:",prefix=GATEWAY_API_" doc:"Also publish the platform through Gateway API HTTPRoutes."`
}

// GatewayAPI publishes HTTPRoutes attached to an existing Gateway.
type GatewayAPI struct {
	Enabled          bool   `json:"enabled,omitempty" env:"ENABLED, overwrite" doc:"Create HTTPRoutes for the platform's APIs and UIs."`
	GatewayName      string `json:"gatewayName,omitempty" env:"GATEWAY_NAME, overwrite" doc:"Name of the Gateway the routes attach to."`
	GatewayNamespace string `json:"gatewayNamespace,omitempty" env:"GATEWAY_NAMESPACE, overwrite" doc:"Namespace of that Gateway. Default: the platform namespace."`
	SectionName      string `json:"sectionName,omitempty" env:"SECTION_NAME, overwrite" doc:"Listener of the Gateway to attach to (optional)."`
}

// Images says where the platform's own images come from (infrastructure
// images are the official upstream ones named by the release).
type Images struct {
	Platform string `json:"platform,omitempty" env:"PLATFORM, overwrite" doc:"Registry and path of the platform's own images, e.g. quay.io/codefresh. Default: quay.io/codefresh."`
}

// Registry is the private registry every image is relocated to.
type Registry struct {
	Host       string `json:"host,omitempty" env:"HOST, overwrite" doc:"Registry host (and port), e.g. registry.internal:5000. When set, every image is pulled from here."`
	PathPrefix string `json:"pathPrefix,omitempty" env:"PATH_PREFIX, overwrite" doc:"Path under the host that images are pushed to, e.g. onprem."`
	PullSecret string `json:"pullSecret,omitempty" env:"PULL_SECRET, overwrite" doc:"Name of a kubernetes.io/dockerconfigjson Secret in the platform namespace used to pull from the registry."`
	Insecure   bool   `json:"insecure,omitempty" env:"INSECURE, overwrite" doc:"The registry speaks plain HTTP or has a certificate this machine does not trust."`
	// RequireSignatures makes preflight and install refuse an image of the
	// registry that has no valid cosign signature by a trusted key.
	RequireSignatures bool `json:"requireSignatures,omitempty" env:"REQUIRE_SIGNATURES, overwrite" doc:"Refuse, in preflight and install, any image of the registry without a cosign signature (tag sha256-<digest>.sig) made by a trusted key: the releases' keys and spec.trust. 'onprem bundle push' attaches the signatures a signed bundle carries (docs/air-gapped.md)."`
}

// Storage holds storage defaults.
type Storage struct {
	ClassName string `json:"className,omitempty" env:"CLASS_NAME, overwrite" doc:"StorageClass for every PersistentVolumeClaim that does not name its own. Default: the cluster's default StorageClass."`
}

// Modules switches the platform's modules on or off.
type Modules struct {
	Pipelines Module `json:"pipelines,omitempty" env:",prefix=PIPELINES_" doc:"The pipelines module: pipelines-api, pipelines-ui, broadcaster, runtime-manager, context-manager, pipeline-manager, helm-manager."`
	GitOps    Module `json:"gitops,omitempty" env:",prefix=GITOPS_" doc:"The GitOps module: gitops-api, gitops-ui, cron-executor, api-events, event-handler, audit-manager, analytics-reporter, argo-hub."`
}

// Module is one module's switch.
type Module struct {
	Enabled *bool `json:"enabled,omitempty" env:"ENABLED, overwrite, noinit" doc:"Install it. Default: true for the platform modules, false for legacy services."`
}

// Legacy holds services kept for older integrations.
type Legacy struct {
	NATS   Module `json:"nats,omitempty" env:",prefix=NATS_" doc:"Legacy NATS message bus. Default: off."`
	Consul Module `json:"consul,omitempty" env:",prefix=CONSUL_" doc:"Legacy Consul. Default: off."`
}

// Databases holds the four infrastructure services.
type Databases struct {
	MongoDB    Database `json:"mongodb,omitempty" env:",prefix=MONGODB_" doc:"MongoDB: entities; every service gets its own database and user."`
	Redis      Database `json:"redis,omitempty" env:",prefix=REDIS_" doc:"Redis: cache and build-log streaming."`
	RabbitMQ   Database `json:"rabbitmq,omitempty" env:",prefix=RABBITMQ_" doc:"RabbitMQ: the platform's message bus."`
	PostgreSQL Database `json:"postgresql,omitempty" env:",prefix=POSTGRESQL_" doc:"PostgreSQL: audit log and analytics."`
}

// Database is one infrastructure service, in-cluster or external.
type Database struct {
	Mode        string      `json:"mode,omitempty" env:"MODE, overwrite" enum:"internal,external" doc:"internal: onprem runs it in the cluster. external: the operator runs it; onprem deploys nothing and connects with externalSecret. Default: internal."`
	Persistence Persistence `json:"persistence,omitempty" env:",prefix=PERSISTENCE_" doc:"With mode internal: its volume."`
	External    External    `json:"external,omitempty" env:",prefix=EXTERNAL_" doc:"With mode external: how to connect."`
}

// Persistence sizes an in-cluster service's volume.
type Persistence struct {
	Size         string `json:"size,omitempty" env:"SIZE, overwrite" doc:"Size of the PersistentVolumeClaim, e.g. 20Gi. Default: from the sizing profile."`
	StorageClass string `json:"storageClass,omitempty" env:"STORAGE_CLASS, overwrite" doc:"StorageClass of the volume. Default: storage.className, else the cluster's default."`
}

// External points at the connection Secret of an external service.
type External struct {
	SecretName string   `json:"secretName,omitempty" env:"SECRET_NAME, overwrite" doc:"Secret in the platform namespace with keys host, port, username, password (and optionally tls: \"true\"). The user must be allowed to create databases and users (MongoDB, PostgreSQL)."`
	CIDRs      []string `json:"cidrs,omitempty" doc:"The server's addresses as CIDRs, e.g. 10.20.0.15/32: the platform's NetworkPolicies let its clients reach only these. Default: any address (on the port below only)."`
	Port       int      `json:"port,omitempty" doc:"The server's port as the platform's NetworkPolicies open it; the same as the Secret's port. Default: the standard port (MongoDB 27017, PostgreSQL 5432, Redis 6379, RabbitMQ 5671 and 5672)."`
}

// IsZero reports whether nothing of External is set.
func (e External) IsZero() bool {
	return e.SecretName == "" && len(e.CIDRs) == 0 && e.Port == 0
}

// ComponentOverride changes one component.
type ComponentOverride struct {
	Enabled *bool          `json:"enabled,omitempty" doc:"Set to false to leave this component out."`
	Values  map[string]any `json:"values,omitempty" doc:"Extra Helm values for this component's chart, merged over everything else but --set."`
}

// Placement constrains where platform pods run.
type Placement struct {
	NodeSelector map[string]string `json:"nodeSelector,omitempty" doc:"Node labels every platform pod must match."`
	Tolerations  []Toleration      `json:"tolerations,omitempty" doc:"Taints every platform pod tolerates."`
}

// Toleration is a Kubernetes toleration.
type Toleration struct {
	Key               string `json:"key,omitempty" doc:"Taint key; empty with operator Exists matches every taint."`
	Operator          string `json:"operator,omitempty" enum:"Exists,Equal" doc:"Exists or Equal. Default: Equal."`
	Value             string `json:"value,omitempty" doc:"Taint value, with operator Equal."`
	Effect            string `json:"effect,omitempty" enum:"NoSchedule,PreferNoSchedule,NoExecute" doc:"Taint effect to tolerate; empty matches all effects."`
	TolerationSeconds *int64 `json:"tolerationSeconds,omitempty" doc:"With effect NoExecute: how long the pod stays bound after the taint appears."`
}

// Proxy is the HTTP proxy environment given to every container.
type Proxy struct {
	HTTPProxy  string `json:"httpProxy,omitempty" env:"HTTP_PROXY, overwrite" doc:"Value of HTTP_PROXY."`
	HTTPSProxy string `json:"httpsProxy,omitempty" env:"HTTPS_PROXY, overwrite" doc:"Value of HTTPS_PROXY."`
	NoProxy    string `json:"noProxy,omitempty" env:"NO_PROXY, overwrite" doc:"Value of NO_PROXY. The cluster's service domain and the platform namespace are always added."`
}

// ClusterRef selects a cluster through a kubeconfig.
type ClusterRef struct {
	Kubeconfig string `json:"kubeconfig,omitempty" doc:"Kubeconfig file. Default: the one onprem itself uses."`
	Context    string `json:"context,omitempty" doc:"Context in that kubeconfig. Default: its current context."`
}

// Runner is a build runner registered to the platform.
type Runner struct {
	Name        string     `json:"name" doc:"Unique name of the runner in this installation (a DNS label)."`
	Namespace   string     `json:"namespace,omitempty" doc:"Namespace of the runner on its cluster. Default: onprem-runner-NAME."`
	Cluster     ClusterRef `json:"cluster,omitempty" doc:"Cluster the runner runs on. Default: the platform's cluster."`
	Concurrency int        `json:"concurrency,omitempty" doc:"Builds run at once. Default: 4."`
}

// Runtime is an Argo-based GitOps runtime.
type Runtime struct {
	Name            string           `json:"name,omitempty" doc:"Unique name of the runtime (a DNS label). Default, for the only runtime without a name: codefresh."`
	Namespace       string           `json:"namespace,omitempty" doc:"Namespace of the runtime on its cluster. Default: the runtime's name."`
	Cluster         ClusterRef       `json:"cluster,omitempty" doc:"Cluster the runtime runs on (one runtime per cluster). Default: the platform's cluster."`
	GitToken        SecretSource     `json:"gitToken,omitempty" doc:"Git token of the runtime: read from a file or an environment variable, never written in this file. Stored only as a Secret on the runtime's cluster."`
	GitSources      []GitSource      `json:"gitSources,omitempty" doc:"Git sources the runtime syncs, each an Argo CD Application."`
	ManagedClusters []ManagedCluster `json:"managedClusters,omitempty" doc:"External clusters registered to this runtime."`
	Access          RuntimeAccess    `json:"access,omitempty" doc:"How the platform reaches the runtime: an Ingress (default), a tunnel, or a URL of the operator's."`
}

// Ways the platform reaches a runtime (RuntimeAccess.Mode).
const (
	RuntimeAccessIngress = "ingress"
	RuntimeAccessTunnel  = "tunnel"
	RuntimeAccessURL     = "url"
)

// RuntimeAccess is how the platform reaches a runtime.
type RuntimeAccess struct {
	Mode      string `json:"mode,omitempty" enum:"ingress,tunnel,url" doc:"ingress: the runtime's chart creates an Ingress on its cluster; tunnel: no Ingress, the chart's tunnel client connects out to tunnelServer; url: no Ingress, the operator routes url to the runtime. Default: ingress."`
	Host      string `json:"host,omitempty" doc:"Host name of the runtime's Ingress. Default: NAME.runtimes.DOMAIN (the runtime's name under spec.domain)."`
	ClassName string `json:"className,omitempty" doc:"IngressClass of the runtime's Ingress. Default: the platform's (spec.ingress.className)."`
	URL       string `json:"url,omitempty" doc:"With mode url: the https URL the platform reaches the runtime at."`
	// TunnelServer is required with mode tunnel: onprem never lets a
	// runtime connect to the vendor's hosted tunnel server, which the
	// chart defaults to and an air-gapped cluster cannot reach.
	TunnelServer TunnelServer `json:"tunnelServer,omitempty" doc:"With mode tunnel (required then): the tunnel server the runtime's tunnel client connects to, one of yours, not the vendor's hosted one."`
}

// TunnelServer is a tunnel server (an frp server) that a runtime's tunnel
// client registers with, and that serves each runtime to the platform at
// ACCOUNT-NAME.SUBDOMAINHOST.
type TunnelServer struct {
	Host          string `json:"host,omitempty" doc:"Host name where the runtime's tunnel client registers (the frp server's address), reachable from the runtime's cluster."`
	Port          int    `json:"port,omitempty" doc:"Port of host. Default: 443."`
	SubdomainHost string `json:"subdomainHost,omitempty" doc:"Domain under which the tunnel server serves the runtimes (ACCOUNT-NAME.SUBDOMAINHOST), reachable from the platform."`
}

// SecretSource says where a secret value is read from at run time.
type SecretSource struct {
	File string `json:"file,omitempty" doc:"File holding the value."`
	Env  string `json:"env,omitempty" doc:"Environment variable holding the value."`
}

// GitRepository is a Git repository location.
type GitRepository struct {
	URL    string `json:"url" doc:"Clone URL (https)."`
	Branch string `json:"branch,omitempty" doc:"Branch. Default: the repository's default branch."`
	Path   string `json:"path,omitempty" doc:"Folder inside the repository. Default: its root."`
}

// GitSource is one Git source of a runtime.
type GitSource struct {
	Name       string        `json:"name" doc:"Name of the source, unique within its runtime (a DNS label)."`
	Repository GitRepository `json:"repository" doc:"Where the source's manifests live."`
}

// ManagedCluster is an external cluster registered to a runtime.
type ManagedCluster struct {
	Name    string     `json:"name" doc:"Name of the cluster inside the runtime (a DNS label)."`
	Cluster ClusterRef `json:"cluster" doc:"How onprem reaches that cluster to create its service account."`
}

// RuntimeConfig is shared by every GitOps runtime.
type RuntimeConfig struct {
	Repository    GitRepository `json:"repository,omitempty" doc:"The shared configuration repository of all runtimes."`
	ConfigRuntime string        `json:"configRuntime,omitempty" doc:"Runtime that holds the configuration (resources/configuration). Default: the first runtime."`
	AccountID     string        `json:"accountId,omitempty" doc:"The platform account the runtimes register with (the account's ID, shown in the platform's account settings)."`
	PlatformToken SecretSource  `json:"platformToken,omitempty" doc:"The platform user token a runtime registers with: read from a file or an environment variable, never written in this file. Stored only as a Secret on each runtime's cluster."`
}

// Backup schedules backups of the platform (installer/backup) to a bucket.
type Backup struct {
	Schedule string   `json:"schedule,omitempty" doc:"When to back up, in cron syntax, e.g. \"0 2 * * *\" (every day at 02:00) or @daily. Empty: no scheduled backup. onprem install creates a CronJob that runs onprem itself in the cluster."`
	TimeZone string   `json:"timeZone,omitempty" doc:"IANA time zone of the schedule, e.g. Europe/Berlin. Default: the cluster's (kube-controller-manager's)."`
	S3       BackupS3 `json:"s3,omitempty" doc:"The bucket the backups go to."`
	// Recipients are age public keys.
	Recipients   []string `json:"recipients,omitempty" doc:"Public keys the backups are encrypted to (age1pq1... or age1..., from 'onprem backup keygen'). The private key stays off the cluster: whoever holds it can read every backup."`
	Keep         int      `json:"keep,omitempty" doc:"How many backups of this installation the bucket keeps; the oldest are deleted after each scheduled backup. Default: 7."`
	IncludeRedis bool     `json:"includeRedis,omitempty" doc:"Also back up Redis's data (the platform uses Redis as a cache)."`
	Upgrades     *bool    `json:"upgrades,omitempty" doc:"'onprem upgrade apply' writes a backup of the whole platform to the bucket before each step. Default: true when the bucket and recipients are set."`
}

// BackupS3 is a bucket of an S3-compatible server.
type BackupS3 struct {
	Endpoint          string `json:"endpoint,omitempty" doc:"The server's URL, https://HOST[:PORT] (http:// for a lab server only)."`
	Bucket            string `json:"bucket,omitempty" doc:"The bucket; it must exist (onprem never creates buckets)."`
	Prefix            string `json:"prefix,omitempty" doc:"Folder of the bucket the backups go under, e.g. onprem/prod."`
	Region            string `json:"region,omitempty" doc:"The bucket's region, when the server wants one."`
	CredentialsSecret string `json:"credentialsSecret,omitempty" doc:"Secret of the platform namespace with the keys accessKeyID and secretAccessKey, which you create (kubectl create secret generic NAME --from-literal=...)."`
	CASecret          string `json:"caSecret,omitempty" doc:"Secret of the platform namespace whose key ca.crt holds the CA (PEM) of the server's certificate, when a private CA signed it."`
}

// Configured reports whether the bucket is set (backups can be written to
// it).
func (b Backup) Configured() bool { return b.S3.Bucket != "" && len(b.Recipients) > 0 }

// BeforeUpgrades reports whether 'onprem upgrade apply' writes a backup to
// the bucket before each step.
func (b Backup) BeforeUpgrades() bool {
	if b.Upgrades == nil {
		return b.Configured()
	}
	return *b.Upgrades && b.Configured()
}

// ReferencedSecrets lists, sorted and without repeats, the Secrets of the
// platform namespace that the operator creates and the configuration
// names: the TLS Secret (tls.mode secret), the registry's pull Secret, the
// external databases' Secrets, and the bucket's credentials and CA. A
// backup carries them beside the generated ones.
func (in *Installation) ReferencedSecrets() []string {
	s := in.Spec
	var out []string
	add := func(name string) {
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	if s.TLS.Mode == "secret" {
		add(s.TLS.SecretName)
	}
	add(s.Registry.PullSecret)
	for _, db := range s.Databases.All() {
		if db.Mode == DatabaseModeExternal {
			add(db.External.SecretName)
		}
	}
	add(s.Backup.S3.CredentialsSecret)
	add(s.Backup.S3.CASecret)
	slices.Sort(out)
	return out
}

// TrustedKey is a public key the operator trusts to sign bundles.
type TrustedKey struct {
	Name      string `json:"name" doc:"Whose key it is, shown when a bundle is verified with it (e.g. platform team)."`
	PublicKey string `json:"publicKey" doc:"The ed25519 public key: the PEM text of bundle.pub from 'onprem bundle keygen' (-----BEGIN PUBLIC KEY-----), the one line between its BEGIN and END lines, or the base64 of the key's 32 bytes."`
}
