package config

// Valid values of the enumerated fields (the enum struct tags list the same).
const (
	ProfileSmall  = "small"
	ProfileMedium = "medium"
	ProfileLarge  = "large"

	AvailabilitySingle = "single"
	AvailabilityHigh   = "high"

	TLSModeSelfSigned = "selfSigned"
	TLSModeSecret     = "secret"

	IngressModeInstall  = "install"
	IngressModeExisting = "existing"

	ServiceTypeLoadBalancer = "LoadBalancer"
	ServiceTypeNodePort     = "NodePort"
	ServiceTypeClusterIP    = "ClusterIP"

	DatabaseModeInternal = "internal"
	DatabaseModeExternal = "external"

	TolerationOpExists = "Exists"
	TolerationOpEqual  = "Equal"
)

// Defaults that SetDefaults applies.
const (
	DefaultName             = "onprem"
	DefaultNamespace        = "onprem"
	DefaultProfile          = ProfileSmall
	DefaultAvailability     = AvailabilitySingle
	DefaultTLSMode          = TLSModeSelfSigned
	DefaultIngressMode      = IngressModeInstall
	DefaultIngressClassName = "onprem"
	DefaultServiceType      = ServiceTypeLoadBalancer
	DefaultPlatformImages   = "quay.io/codefresh"
	// DefaultBackupKeep is how many scheduled backups the bucket keeps.
	DefaultBackupKeep         = 7
	DefaultDatabaseMode       = DatabaseModeInternal
	DefaultRunnerConcurrency  = 4
	DefaultRuntimeName        = "codefresh"
	RunnerNamespacePrefix     = "onprem-runner-"
	DefaultTolerationOperator = TolerationOpEqual
)

// Limits enforced by Validate.
const (
	MaxRunnerNameLength  = 40
	MaxRunnerConcurrency = 256
)
