package config

import (
	"context"
	"path/filepath"
	"testing"
)

var testValidateOptions = ValidateOptions{
	KnownVersions:   []string{"2.8.0", "2.9.0"},
	KnownComponents: []string{"pipelines-api", "argo-hub", "mongodb"},
}

func loadTestdata(t *testing.T, name string) (*Installation, *Source, error) {
	t.Helper()
	return Load(context.Background(), LoadOptions{
		Path:     filepath.Join("testdata", name),
		Lookup:   mapLookup(nil),
		Validate: testValidateOptions,
	})
}

func TestValidateGoodFiles(t *testing.T) {
	for _, name := range []string{"minimal.yaml", "external-databases.yaml", "private-registry-large.yaml", "full.yaml"} {
		if _, _, err := loadTestdata(t, name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestValidateBadFiles(t *testing.T) {
	for _, tc := range []struct {
		file string
		want []string
	}{
		{"bad-values.yaml", []string{
			`testdata/bad-values.yaml:4: spec.version: "9.9.9" is not a version this installer knows (valid: 2.8.0, 2.9.0)`,
			`testdata/bad-values.yaml:5: spec.namespace: "CI_Platform" is not a valid DNS label: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
			`testdata/bad-values.yaml:6: spec.domain: "https://CI.example.com/" must not include a scheme (valid: a lowercase DNS name such as ci.example.com); did you mean "ci.example.com"?`,
			`testdata/bad-values.yaml:7: spec.profile: "xl" is not valid (valid: small, medium, large)`,
			`testdata/bad-values.yaml:8: spec.tls.secretName: required: with spec.tls.mode secret, the name of a kubernetes.io/tls Secret in namespace CI_Platform`,
			`testdata/bad-values.yaml:10: spec.ingress.className: required: with spec.ingress.mode existing, the IngressClass of your ingress controller ('kubectl get ingressclass' lists them)`,
			`testdata/bad-values.yaml:12: spec.ingress.gatewayAPI.gatewayName: required: with gatewayAPI enabled, the name of the Gateway the routes attach to ('kubectl get gateways -A' lists them)`,
			`testdata/bad-values.yaml:15: spec.images.platform: "codefresh" does not start with a registry host (valid: registry host and optional path, e.g. quay.io/codefresh, with no tag or digest); did you mean "docker.io/codefresh"?`,
			`testdata/bad-values.yaml:17: spec.registry.pathPrefix: only with spec.registry.host: set the registry host too, or remove it`,
			`testdata/bad-values.yaml:18: spec.registry.insecure: only with spec.registry.host: set the registry host too, or remove it`,
			`testdata/bad-values.yaml:20: spec.databases.mongodb.external.secretName: required: with mode external, the Secret in namespace CI_Platform holding host, port, username and password`,
			`testdata/bad-values.yaml:22: spec.databases.mongodb.persistence: must be empty with mode external (onprem runs no mongodb to give a volume to): remove it`,
			`testdata/bad-values.yaml:26: spec.databases.redis.persistence.size: "20GB" is not a valid Kubernetes quantity (valid: a number with a unit such as 20Gi, 500Mi or 1Ti); did you mean "20Gi"?`,
			`testdata/bad-values.yaml:29: spec.databases.rabbitmq.external: must be empty with mode internal (onprem runs rabbitmq in the cluster); set mode: external to use your own rabbitmq`,
			`testdata/bad-values.yaml:31: spec.modules: no module is enabled: enable at least one of pipelines, gitops`,
			`testdata/bad-values.yaml:37: spec.components.pipeline-api: unknown component; did you mean "pipelines-api"?`,
			`testdata/bad-values.yaml:40: spec.overlays[0]: folder testdata/overlays/a does not exist (a relative path is relative to onprem.yaml's folder)`,
			`testdata/bad-values.yaml:41: spec.overlays[1]: "testdata/overlays/a" is listed twice (also spec.overlays[0]): keep only one`,
			`testdata/bad-values.yaml:45: spec.placement.tolerations[0].value: must be empty with operator Exists (Exists matches any value); use operator Equal to match "ci"`,
			`testdata/bad-values.yaml:46: spec.placement.tolerations[0].tolerationSeconds: only with effect NoExecute (effect is not set): set effect: NoExecute or remove it`,
			`testdata/bad-values.yaml:48: spec.proxy.httpProxy: "proxy.internal:3128" has no scheme (valid: an http:// or https:// URL, e.g. http://proxy.internal:3128); did you mean "http://proxy.internal:3128"?`,
		}},
		{"bad-workloads.yaml", []string{
			`testdata/bad-workloads.yaml:8: spec.runners[1].name: duplicate runner name "default" (also spec.runners[0]): runner names must be unique`,
			`testdata/bad-workloads.yaml:9: spec.runners[1].concurrency: 300 is out of range (valid: 1 to 256; 0 or unset means 4)`,
			`testdata/bad-workloads.yaml:10: spec.runners[2].name: "a-runner-name-that-is-far-too-long-to-be-used" is 45 characters long: a runner name must be at most 40 (its namespace and objects are named after it)`,
			`testdata/bad-workloads.yaml:11: spec.runners[3].name: required: a unique name for the runner (a DNS label of at most 40 characters)`,
			`testdata/bad-workloads.yaml:13: spec.runtimes[0].gitToken: set either file or env, not both`,
			`testdata/bad-workloads.yaml:19: spec.runtimes[0].gitSources[0].repository.url: "git@git.example.com:platform/apps.git" is an SSH address, not an http(s) URL (valid: an http:// or https:// URL, e.g. https://git.example.com/platform/gitops.git); use the repository's https clone URL`,
			`testdata/bad-workloads.yaml:20: spec.runtimes[0].gitSources[1].name: duplicate git source name "apps" (also spec.runtimes[0].gitSources[0]): names must be unique`,
			`testdata/bad-workloads.yaml:21: spec.runtimes[0].gitSources[1].repository.url: required: the repository's clone URL, e.g. https://git.example.com/platform/gitops.git`,
			`testdata/bad-workloads.yaml:22: spec.runtimes[1].cluster: spec.runtimes[0] already runs on the platform's cluster: one runtime per cluster; set cluster.kubeconfig or cluster.context to another cluster`,
			`testdata/bad-workloads.yaml:24: spec.runtimes[1].gitToken.env: "1TOKEN" is not a valid environment variable name (valid: letters, digits and '_', not starting with a digit, e.g. GIT_TOKEN)`,
			`testdata/bad-workloads.yaml:27: spec.runtimes[1].managedClusters[0].cluster: required: how onprem reaches the cluster: set context and/or kubeconfig`,
			`testdata/bad-workloads.yaml:28: spec.runtimeConfig.accountId: required: the platform account the runtimes register with (its ID, from the platform's account settings)`,
			`testdata/bad-workloads.yaml:28: spec.runtimeConfig.platformToken: required: where the platform token the runtimes register with is read from: file (a file holding it) or env (an environment variable holding it)`,
			`testdata/bad-workloads.yaml:28: spec.runtimeConfig.repository.url: required: the repository's clone URL, e.g. https://git.example.com/platform/gitops.git`,
			`testdata/bad-workloads.yaml:29: spec.runtimeConfig.configRuntime: "secnd" is not one of the runtimes (valid: codefresh, second); did you mean "second"?`,
		}},
		{"bad-network.yaml", []string{
			`testdata/bad-network.yaml:11: spec.databases.postgresql.external.cidrs[1]: "10.20.0.300" is not a CIDR; an address and prefix length, e.g. 10.20.0.15/32 for one server or 10.20.0.0/24 for a subnet`,
			`testdata/bad-network.yaml:12: spec.databases.postgresql.external.port: 70000 is not a port (1 to 65535); the port in the Secret corp-postgresql, e.g. 5432`,
		}},
		{"bad-backup.yaml", []string{
			`testdata/bad-backup.yaml:7: spec.backup.schedule: "0 2 * *" has 4 fields, a schedule has 5: minute hour day-of-month month day-of-week; e.g. "0 2 * * *" (every day at 02:00) or @daily`,
			`testdata/bad-backup.yaml:8: spec.backup.timeZone: "Europe Berlin" is not an IANA time zone name; e.g. Europe/Berlin or UTC`,
			`testdata/bad-backup.yaml:9: spec.backup.s3.credentialsSecret: required: a Secret of the platform namespace with the keys accessKeyID and secretAccessKey`,
			`testdata/bad-backup.yaml:10: spec.backup.s3.endpoint: "minio.example.com:9000/backups" has no scheme (valid: an http:// or https:// URL, e.g. https://minio.example.com:9000); did you mean "https://minio.example.com:9000/backups"?`,
			`testdata/bad-backup.yaml:11: spec.backup.s3.bucket: "Backups_Prod" is not a bucket name (3 to 63 lower-case letters, digits, dots and hyphens)`,
			`testdata/bad-backup.yaml:12: spec.backup.s3.prefix: "/onprem": a folder of the bucket, relative, without ..; e.g. onprem/prod`,
			`testdata/bad-backup.yaml:14: spec.backup.recipients[0]: this is a private key; give the public key (backup.pub), and keep the private key off the cluster`,
			`testdata/bad-backup.yaml:15: spec.backup.recipients[1]: "age1notakey" is not an age public key; the content of backup.pub from 'onprem backup keygen'`,
			`testdata/bad-backup.yaml:16: spec.backup.keep: -1: how many backups to keep cannot be negative; 0 keeps every backup`,
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			in, src, err := loadTestdata(t, tc.file)
			if in != nil || src != nil {
				t.Error("a result came back with the error")
			}
			assertErrors(t, err, tc.want...)
		})
	}
}

// validBase is a defaulted, valid installation that each rule case breaks
// in one way.
func validBase() *Installation {
	in := &Installation{APIVersion: APIVersion, Kind: Kind, Spec: Spec{Version: "2.9.0", Domain: "ci.example.com"}}
	SetDefaults(in)
	return in
}

func TestValidateRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Installation)
		want   []string
	}{
		{"valid", func(*Installation) {}, nil},
		{"apiVersion", func(in *Installation) { in.APIVersion = "v1" }, []string{
			`apiVersion: "v1" is not valid (valid: onprem.dev/v1alpha1)`}},
		{"no kind", func(in *Installation) { in.Kind = "" }, []string{
			`kind: required: set kind: Installation`}},
		{"metadata.name", func(in *Installation) { in.Metadata.Name = "a.b" }, []string{
			`metadata.name: "a.b" is not a valid DNS label: must not contain dots`}},
		{"no version", func(in *Installation) { in.Spec.Version = "" }, []string{
			`spec.version: required: the platform version to install (valid: 2.8.0, 2.9.0)`}},
		{"version typo", func(in *Installation) { in.Spec.Version = "v2.9.0" }, []string{
			`spec.version: "v2.9.0" is not a version this installer knows (valid: 2.8.0, 2.9.0); did you mean "2.9.0"?`}},
		{"no domain", func(in *Installation) { in.Spec.Domain = "" }, []string{
			`spec.domain: required: the DNS name the platform is served under, e.g. ci.example.com`}},
		{"domain with port", func(in *Installation) { in.Spec.Domain = "ci.example.com:443" }, []string{
			`spec.domain: "ci.example.com:443" must not include a port (valid: a lowercase DNS name such as ci.example.com); did you mean "ci.example.com"?`}},
		{"domain with path", func(in *Installation) { in.Spec.Domain = "ci.example.com/ui" }, []string{
			`spec.domain: "ci.example.com/ui" must not include a path (valid: a lowercase DNS name such as ci.example.com); did you mean "ci.example.com"?`}},
		{"domain uppercase", func(in *Installation) { in.Spec.Domain = "CI.Example.com" }, []string{
			`spec.domain: "CI.Example.com" must be lowercase (valid: a lowercase DNS name such as ci.example.com); did you mean "ci.example.com"?`}},
		{"domain wildcard", func(in *Installation) { in.Spec.Domain = "*.example.com" }, []string{
			`spec.domain: "*.example.com" must not be a wildcard (valid: a lowercase DNS name such as ci.example.com)`}},
		{"tls selfSigned with secret", func(in *Installation) { in.Spec.TLS.SecretName = "x" }, []string{
			`spec.tls.secretName: must be empty with spec.tls.mode selfSigned (onprem generates the certificate); set spec.tls.mode: secret to use your own certificate`}},
		{"certificate max age too long", func(in *Installation) { in.Spec.Rotation.CertificateMaxAgeDays = 800 }, []string{
			`spec.rotation.certificateMaxAgeDays: 800: give the age in days after which 'onprem install' renews the certificate, 1 to 790; e.g. 365 renews the certificate once a year; 0 never renews it by itself`}},
		{"certificate max age negative", func(in *Installation) { in.Spec.Rotation.CertificateMaxAgeDays = -1 }, []string{
			`spec.rotation.certificateMaxAgeDays: -1: give the age in days after which 'onprem install' renews the certificate, 1 to 790; e.g. 365 renews the certificate once a year; 0 never renews it by itself`}},
		{"certificate max age", func(in *Installation) { in.Spec.Rotation.CertificateMaxAgeDays = 365 }, nil},
		{"keys max age too long", func(in *Installation) { in.Spec.Rotation.KeysMaxAgeDays = 4000 }, []string{
			`spec.rotation.keysMaxAgeDays: 4000: give the age in days after which 'onprem install' rotates the signing and encryption keys, 1 to 3650; e.g. 180 rotates the signing and encryption keys twice a year; 0 never rotates them by itself`}},
		{"keys max age", func(in *Installation) { in.Spec.Rotation.KeysMaxAgeDays = 180 }, nil},
		{"trusted keys", func(in *Installation) {
			in.Spec.Trust = []TrustedKey{{Name: "platform team", PublicKey: "MCowBQYDK2VwAyEA0JMk8+R44lX19vq5L7JHoPFdXu2aD8RkEc94WZORgtE="}}
		}, nil},
		{"trusted keys wrong", func(in *Installation) {
			in.Spec.Trust = []TrustedKey{
				{Name: "a", PublicKey: "MCowBQYDK2VwAyEA0JMk8+R44lX19vq5L7JHoPFdXu2aD8RkEc94WZORgtE="},
				{PublicKey: "-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA0JMk8+R44lX19vq5L7JHoPFdXu2aD8RkEc94WZORgtE=\n-----END PUBLIC KEY-----\n"},
				{Name: "c", PublicKey: "not a key"},
				{Name: "d"},
			}
		}, []string{
			`spec.trust[1].name: required: say whose key it is (e.g. platform team)`,
			`spec.trust[1].publicKey: the same key as spec.trust[0] (sha256:c651e1e2349070e1); remove one of them`,
			`spec.trust[2].publicKey: public key: neither PEM nor base64; give the PEM text of bundle.pub ('onprem bundle keygen') or of cosign.pub ('cosign generate-key-pair', ECDSA P-256), the line between its BEGIN and END lines, or the base64 of an ed25519 key's 32 bytes`,
			`spec.trust[3].publicKey: required: the PEM text of bundle.pub ('onprem bundle keygen')`}},
		{"tls mode typo", func(in *Installation) { in.Spec.TLS.Mode = "selfsigned" }, []string{
			`spec.tls.mode: "selfsigned" is not valid (valid: selfSigned, secret); did you mean "selfSigned"?`}},
		{"serviceType with existing", func(in *Installation) {
			in.Spec.Ingress = Ingress{Mode: "existing", ClassName: "nginx", ServiceType: "NodePort"}
		}, []string{
			`spec.ingress.serviceType: only with spec.ingress.mode install (onprem installs no controller Service with mode existing): remove it`}},
		{"serviceType enum", func(in *Installation) { in.Spec.Ingress.ServiceType = "nodeport" }, []string{
			`spec.ingress.serviceType: "nodeport" is not valid (valid: LoadBalancer, NodePort, ClusterIP); did you mean "NodePort"?`}},
		{"gateway disabled", func(in *Installation) { in.Spec.Ingress.GatewayAPI.GatewayName = "gw" }, []string{
			`spec.ingress.gatewayAPI.gatewayName: set but spec.ingress.gatewayAPI.enabled is not true: set enabled: true or remove it`}},
		{"registry host scheme", func(in *Installation) { in.Spec.Registry.Host = "https://registry.internal" }, []string{
			`spec.registry.host: "https://registry.internal" must not include a scheme (valid: host or host:port, e.g. registry.internal:5000); did you mean "registry.internal"?`}},
		{"registry host path", func(in *Installation) { in.Spec.Registry.Host = "registry.internal/onprem" }, []string{
			`spec.registry.host: "registry.internal/onprem" must not include a path (valid: host or host:port, e.g. registry.internal:5000); set host: registry.internal and pathPrefix: onprem`}},
		{"registry host port", func(in *Installation) { in.Spec.Registry.Host = "registry.internal:99999" }, []string{
			`spec.registry.host: "registry.internal:99999" has an invalid port "99999" (valid: 1 to 65535)`}},
		{"registry host empty port", func(in *Installation) { in.Spec.Registry.Host = "registry.internal:" }, []string{
			`spec.registry.host: "registry.internal:" has an invalid port "" (valid: 1 to 65535)`}},
		{"registry host upper", func(in *Installation) { in.Spec.Registry.Host = "Registry" }, []string{
			`spec.registry.host: "Registry" is not a valid registry host (valid: host or host:port, e.g. registry.internal:5000): a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"requireSignatures without a registry", func(in *Installation) { in.Spec.Registry = Registry{RequireSignatures: true} }, []string{
			`spec.registry.requireSignatures: only with spec.registry.host: set the registry host too, or remove it`}},
		{"requireSignatures with a registry", func(in *Installation) {
			in.Spec.Registry = Registry{Host: "registry.internal:5000", RequireSignatures: true}
		}, nil},
		{"registry ip hosts", func(in *Installation) { in.Spec.Registry.Host = "10.0.0.1:5000" }, nil},
		{"registry ipv6 host", func(in *Installation) { in.Spec.Registry.Host = "[fd00::1]:5000" }, nil},
		{"registry localhost", func(in *Installation) { in.Spec.Registry.Host = "localhost" }, nil},
		{"registry prefix and secret", func(in *Installation) {
			in.Spec.Registry = Registry{Host: "r.internal", PathPrefix: "team//onprem", PullSecret: "Pull"}
		}, []string{
			`spec.registry.pathPrefix: "team//onprem" is not a valid repository path: component "" must be lowercase letters and digits, separated by '.', '_', '__' or '-' (e.g. onprem or team/onprem), with no leading, trailing or double '/'`,
			`spec.registry.pullSecret: "Pull" is not a valid DNS subdomain: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"image prefix tag", func(in *Installation) { in.Spec.Images.Platform = "quay.io/codefresh:1.0" }, []string{
			`spec.images.platform: "quay.io/codefresh:1.0" must not include a tag (valid: registry host and optional path, e.g. quay.io/codefresh, with no tag or digest)`}},
		{"image prefix digest", func(in *Installation) { in.Spec.Images.Platform = "quay.io/codefresh@sha256:00" }, []string{
			`spec.images.platform: "quay.io/codefresh@sha256:00" must not include a digest (valid: registry host and optional path, e.g. quay.io/codefresh, with no tag or digest)`}},
		{"image prefix scheme", func(in *Installation) { in.Spec.Images.Platform = "https://quay.io/codefresh" }, []string{
			`spec.images.platform: "https://quay.io/codefresh" must not include a scheme (valid: registry host and optional path, e.g. quay.io/codefresh, with no tag or digest); did you mean "quay.io/codefresh"?`}},
		{"image prefix uppercase path", func(in *Installation) { in.Spec.Images.Platform = "quay.io/CodeFresh" }, []string{
			`spec.images.platform: "quay.io/CodeFresh" has an invalid path: "CodeFresh" is not a valid repository path: component "CodeFresh" must be lowercase letters and digits, separated by '.', '_', '__' or '-' (e.g. onprem or team/onprem), with no leading, trailing or double '/'`}},
		{"image prefix with port", func(in *Installation) { in.Spec.Images.Platform = "registry.internal:5000/ci/platform" }, nil},
		{"storage class", func(in *Installation) { in.Spec.Storage.ClassName = "Fast SSD" }, []string{
			// Inherited by the internal databases, but reported once.
			`spec.storage.className: "Fast SSD" is not a valid DNS subdomain: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`}},
		{"zero size", func(in *Installation) { in.Spec.Databases.Redis.Persistence.Size = "0" }, []string{
			`spec.databases.redis.persistence.size: "0" must be greater than zero (e.g. 20Gi)`}},
		{"database mode", func(in *Installation) { in.Spec.Databases.PostgreSQL.Mode = "extern" }, []string{
			`spec.databases.postgresql.mode: "extern" is not valid (valid: internal, external); did you mean "external"?`}},
		{"runners without pipelines", func(in *Installation) {
			in.Spec.Modules.Pipelines.Enabled = ptr(false)
			in.Spec.Runners = []Runner{{Name: "a", Namespace: "onprem-runner-a", Concurrency: 4}}
		}, []string{
			`spec.runners: runners need the pipelines module: enable spec.modules.pipelines or remove the runners`}},
		{"runtimes without gitops", func(in *Installation) {
			in.Spec.Modules.GitOps.Enabled = ptr(false)
			in.Spec.Runtimes = []Runtime{{Name: "a", Namespace: "a", GitToken: SecretSource{Env: "T"}}}
			in.Spec.RuntimeConfig = RuntimeConfig{Repository: GitRepository{URL: "https://g/x.git"}, ConfigRuntime: "a", AccountID: "acc", PlatformToken: SecretSource{Env: "PT"}}
		}, []string{
			`spec.runtimes: GitOps runtimes need the gitops module: enable spec.modules.gitops or remove the runtimes`}},
		{"component names", func(in *Installation) {
			in.Spec.Components = map[string]ComponentOverride{"anything": {}, "": {}, "mongodb": {}}
		}, []string{
			`spec.components.anything: unknown component (valid: pipelines-api, argo-hub, mongodb)`,
			`spec.components[""]: a component name must not be empty ('onprem render' lists the components)`}},
		{"unknown component far from any", func(in *Installation) {
			in.Spec.Components = map[string]ComponentOverride{"zzz": {}}
		}, []string{
			`spec.components.zzz: unknown component (valid: pipelines-api, argo-hub, mongodb)`}},
		{"empty overlay", func(in *Installation) { in.Spec.Overlays = []string{""} }, []string{
			`spec.overlays[0]: must not be empty: the path of a folder holding a kustomization.yaml of kind Component`}},
		{"node selector", func(in *Installation) {
			in.Spec.Placement.NodeSelector = map[string]string{"bad key": "ok", "good": "bad value!"}
		}, []string{
			`spec.placement.nodeSelector.good: "bad value!" is not a valid label value: a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')`,
			`spec.placement.nodeSelector["bad key"]: "bad key" is not a valid label key: name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')`}},
		{"toleration without key", func(in *Installation) {
			in.Spec.Placement.Tolerations = []Toleration{{Operator: "Equal", Value: "x", Effect: "NoSchedule"}}
		}, []string{
			`spec.placement.tolerations[0].key: required: the taint key to tolerate (only operator Exists may leave it empty, to tolerate every taint)`}},
		{"toleration enums", func(in *Installation) {
			in.Spec.Placement.Tolerations = []Toleration{{Key: "k", Operator: "exists", Effect: "NoScheduled"}}
		}, []string{
			`spec.placement.tolerations[0].effect: "NoScheduled" is not valid (valid: NoSchedule, PreferNoSchedule, NoExecute); did you mean "NoSchedule"?`,
			`spec.placement.tolerations[0].operator: "exists" is not valid (valid: Exists, Equal); did you mean "Exists"?`}},
		{"proxy scheme", func(in *Installation) { in.Spec.Proxy.HTTPSProxy = "socks5://proxy:1080" }, []string{
			`spec.proxy.httpsProxy: "socks5://proxy:1080" has scheme "socks5" (valid: an http:// or https:// URL, e.g. http://proxy.internal:3128)`}},
		{"runner namespace clash", func(in *Installation) {
			in.Spec.Runners = []Runner{{Name: "a", Namespace: "ci", Concurrency: 4}, {Name: "b", Namespace: "ci", Concurrency: 4}}
		}, []string{
			`spec.runners[1].namespace: spec.runners[0] already runs in namespace "ci" on the platform's cluster: give each runner its own namespace`}},
		{"runners on different clusters may share a namespace", func(in *Installation) {
			in.Spec.Runners = []Runner{{Name: "a", Namespace: "ci", Concurrency: 4}, {Name: "b", Namespace: "ci", Concurrency: 4, Cluster: ClusterRef{Context: "other"}}}
		}, nil},
		{"runner negative concurrency and bad name", func(in *Installation) {
			in.Spec.Runners = []Runner{{Name: "Build_1", Namespace: "x", Concurrency: -1}}
		}, []string{
			`spec.runners[0].concurrency: -1 is out of range (valid: 1 to 256; 0 or unset means 4)`,
			`spec.runners[0].name: "Build_1" is not a valid DNS label: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`}},
		{"two unnamed runtimes", func(in *Installation) {
			in.Spec.Runtimes = []Runtime{{GitToken: SecretSource{Env: "T"}}, {GitToken: SecretSource{Env: "T"}, Cluster: ClusterRef{Context: "b"}}}
			in.Spec.RuntimeConfig.Repository.URL = "https://git.example.com/c.git"
			in.Spec.RuntimeConfig.AccountID, in.Spec.RuntimeConfig.PlatformToken = "acc", SecretSource{File: "/t"}
			SetDefaults(in)
		}, []string{
			`spec.runtimes[0].name: required: a unique name for the runtime (a DNS label); only a single runtime may leave it out, and is then named codefresh`,
			`spec.runtimes[1].name: required: a unique name for the runtime (a DNS label); only a single runtime may leave it out, and is then named codefresh`}},
		{"runtime without token, duplicate name", func(in *Installation) {
			in.Spec.Runtimes = []Runtime{{Name: "a", Namespace: "a"}, {Name: "a", Namespace: "a", GitToken: SecretSource{File: "t"}, Cluster: ClusterRef{Kubeconfig: "k"}}}
			in.Spec.RuntimeConfig = RuntimeConfig{Repository: GitRepository{URL: "https://git.example.com/c.git"}, ConfigRuntime: "a", AccountID: "acc", PlatformToken: SecretSource{Env: "PT"}}
		}, []string{
			`spec.runtimes[0].gitToken: required: where the runtime's Git token is read from: file (a file holding it) or env (an environment variable holding it)`,
			`spec.runtimes[1].name: duplicate runtime name "a" (also spec.runtimes[0]): runtime names must be unique`}},
		{"two runtimes on one remote cluster", func(in *Installation) {
			in.Spec.Runtimes = []Runtime{
				{Name: "a", Namespace: "a", GitToken: SecretSource{Env: "T"}, Cluster: ClusterRef{Kubeconfig: "/k", Context: "prod"}},
				{Name: "b", Namespace: "b", GitToken: SecretSource{Env: "T"}, Cluster: ClusterRef{Kubeconfig: "/k", Context: "prod"}},
				{Name: "c", Namespace: "c", GitToken: SecretSource{Env: "T"}, Cluster: ClusterRef{Kubeconfig: "/k", Context: "dev"}},
			}
			in.Spec.RuntimeConfig = RuntimeConfig{Repository: GitRepository{URL: "https://git.example.com/c.git"}, ConfigRuntime: "a", AccountID: "acc", PlatformToken: SecretSource{Env: "PT"}}
		}, []string{
			`spec.runtimes[1].cluster: spec.runtimes[0] already runs on the cluster of kubeconfig "/k", context "prod": one runtime per cluster; set cluster.kubeconfig or cluster.context to another cluster`}},
		{"runtime config without runtimes: a bad URL", func(in *Installation) {
			in.Spec.RuntimeConfig.Repository.URL = "ssh://git.example.com/c.git"
		}, []string{
			`spec.runtimeConfig.repository.url: "ssh://git.example.com/c.git" has scheme "ssh" (valid: an http:// or https:// URL, e.g. https://git.example.com/platform/gitops.git)`}},
		{"runtime config without runtimes: a designation without a repository", func(in *Installation) {
			in.Spec.RuntimeConfig.ConfigRuntime = "Edge"
		}, []string{
			`spec.runtimeConfig.configRuntime: "Edge" is not a valid DNS label: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')`,
			`spec.runtimeConfig.configRuntime: set but there is no repository: set spec.runtimeConfig.repository.url, or remove configRuntime`}},
		{"runtime config url scheme", func(in *Installation) {
			in.Spec.Runtimes = []Runtime{{Name: "a", Namespace: "a", GitToken: SecretSource{Env: "T"}}}
			in.Spec.RuntimeConfig = RuntimeConfig{Repository: GitRepository{URL: "git.example.com/c.git"}, ConfigRuntime: "a", AccountID: "acc", PlatformToken: SecretSource{Env: "PT"}}
		}, []string{
			`spec.runtimeConfig.repository.url: "git.example.com/c.git" has no scheme (valid: an http:// or https:// URL, e.g. https://git.example.com/platform/gitops.git); did you mean "https://git.example.com/c.git"?`}},
		{"runtimes without account or platform token, bad access", func(in *Installation) {
			in.Spec.Runtimes = []Runtime{
				{Name: "a", Namespace: "a", GitToken: SecretSource{Env: "T"}, Access: RuntimeAccess{Mode: "tunel"}},
				{Name: "b", Namespace: "b", GitToken: SecretSource{Env: "T"}, Cluster: ClusterRef{Context: "b"}, Access: RuntimeAccess{Mode: "url", Host: "b.example.com"}},
				{Name: "c", Namespace: "c", GitToken: SecretSource{Env: "T"}, Cluster: ClusterRef{Context: "c"}, Access: RuntimeAccess{Host: "Not_A_Host", URL: "https://c.example.com"}},
			}
			in.Spec.RuntimeConfig = RuntimeConfig{Repository: GitRepository{URL: "https://git.example.com/c.git"}, ConfigRuntime: "a", PlatformToken: SecretSource{Env: "1P"}}
		}, []string{
			`spec.runtimeConfig.accountId: required: the platform account the runtimes register with (its ID, from the platform's account settings)`,
			`spec.runtimeConfig.platformToken.env: "1P" is not a valid environment variable name (valid: letters, digits and '_', not starting with a digit, e.g. GIT_TOKEN)`,
			`spec.runtimes[0].access.mode: "tunel" is not valid (valid: ingress, tunnel, url); did you mean "tunnel"?`,
			`spec.runtimes[1].access: mode url has no Ingress; remove host and className, or use mode ingress`,
			`spec.runtimes[1].access.url: required: the https URL the platform reaches the runtime at, e.g. https://edge.example.com`,
			`spec.runtimes[2].access.host: "Not_A_Host" is not a host name: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
			`spec.runtimes[2].access.url: only used with mode url; set mode: url, or remove url`}},
		{"tunnel mode needs a tunnel server of the operator's", func(in *Installation) {
			in.Spec.Runtimes = []Runtime{
				{Name: "a", Namespace: "a", GitToken: SecretSource{Env: "T"}, Access: RuntimeAccess{Mode: "tunnel"}},
				{Name: "b", Namespace: "b", GitToken: SecretSource{Env: "T"}, Cluster: ClusterRef{Context: "b"}, Access: RuntimeAccess{Mode: "tunnel", TunnelServer: TunnelServer{Host: "Reg_Tunnels", Port: 70000, SubdomainHost: "tunnels.example.com"}}},
				{Name: "c", Namespace: "c", GitToken: SecretSource{Env: "T"}, Cluster: ClusterRef{Context: "c"}, Access: RuntimeAccess{TunnelServer: TunnelServer{Host: "register.tunnels.example.com"}}},
				{Name: "d", Namespace: "d", GitToken: SecretSource{Env: "T"}, Cluster: ClusterRef{Context: "d"}, Access: RuntimeAccess{Mode: "tunnel", TunnelServer: TunnelServer{Host: "register.tunnels.example.com", SubdomainHost: "tunnels.example.com"}}},
			}
			in.Spec.RuntimeConfig = RuntimeConfig{Repository: GitRepository{URL: "https://git.example.com/c.git"}, ConfigRuntime: "a", AccountID: "acc", PlatformToken: SecretSource{Env: "PT"}}
		}, []string{
			`spec.runtimes[0].access.tunnelServer.host: required: mode tunnel needs a tunnel server of yours (an frp server): the host the runtime's tunnel client registers with, reachable from the runtime's cluster, e.g. tunnels-register.example.com; onprem does not use the vendor's hosted one`,
			`spec.runtimes[0].access.tunnelServer.subdomainHost: required: mode tunnel needs a tunnel server of yours (an frp server): the domain under which it serves each runtime as ACCOUNT-NAME.SUBDOMAINHOST, reachable from the platform, e.g. tunnels.example.com; onprem does not use the vendor's hosted one`,
			`spec.runtimes[1].access.tunnelServer.host: "Reg_Tunnels" is not a valid DNS subdomain: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')`,
			`spec.runtimes[1].access.tunnelServer.port: 70000 is not a port (valid: 1 to 65535; default 443)`,
			`spec.runtimes[2].access.tunnelServer: only used with mode tunnel; set mode: tunnel, or remove tunnelServer`}},
		{"managed clusters", func(in *Installation) {
			in.Spec.Runtimes = []Runtime{{Name: "a", Namespace: "a", GitToken: SecretSource{Env: "T"}, ManagedClusters: []ManagedCluster{
				{Name: "x", Cluster: ClusterRef{Context: "x"}}, {Name: "x", Cluster: ClusterRef{Context: "y"}}, {Cluster: ClusterRef{Context: "z"}},
			}}}
			in.Spec.RuntimeConfig = RuntimeConfig{Repository: GitRepository{URL: "https://git.example.com/c.git"}, ConfigRuntime: "a", AccountID: "acc", PlatformToken: SecretSource{Env: "PT"}}
		}, []string{
			`spec.runtimes[0].managedClusters[1].name: duplicate managed cluster name "x" (also spec.runtimes[0].managedClusters[0]): names must be unique`,
			`spec.runtimes[0].managedClusters[2].name: required: a unique name for the managed cluster (a DNS label)`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := validBase()
			tc.mutate(in)
			err := Validate(in, nil, testValidateOptions)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("unexpected: %v", err)
				}
				return
			}
			assertErrors(t, err, tc.want...)
		})
	}
}

func TestValidateNil(t *testing.T) {
	assertErrors(t, Validate(nil, NewSource("onprem.yaml"), ValidateOptions{}), "onprem.yaml: no configuration to validate")
}

func TestValidateWithoutKnownLists(t *testing.T) {
	in := validBase()
	in.Spec.Version = "0.0.1-anything"
	in.Spec.Components = map[string]ComponentOverride{"whatever": {}}
	if err := Validate(in, nil, ValidateOptions{}); err != nil {
		t.Fatal(err)
	}
	in.Spec.Version = ""
	assertErrors(t, Validate(in, nil, ValidateOptions{}),
		`spec.version: required: the platform version to install ('onprem versions' lists them)`)
}
