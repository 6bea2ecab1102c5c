package config

// SetDefaults fills in every default of the API, as the doc of each field
// states it. It is the one place defaults are applied, and applying it twice
// changes nothing. Persistence sizes are left alone: the sizing profile
// decides them when rendering.
func SetDefaults(in *Installation) {
	if in == nil {
		return
	}
	if in.Metadata.Name == "" {
		in.Metadata.Name = DefaultName
	}
	s := &in.Spec
	setString(&s.Namespace, DefaultNamespace)
	setString(&s.Profile, DefaultProfile)
	setString(&s.Availability, DefaultAvailability)
	setString(&s.TLS.Mode, DefaultTLSMode)

	setString(&s.Ingress.Mode, DefaultIngressMode)
	if s.Ingress.Mode == IngressModeInstall {
		setString(&s.Ingress.ClassName, DefaultIngressClassName)
		setString(&s.Ingress.ServiceType, DefaultServiceType)
	}
	if s.Ingress.GatewayAPI.Enabled {
		setString(&s.Ingress.GatewayAPI.GatewayNamespace, s.Namespace)
	}

	setString(&s.Images.Platform, DefaultPlatformImages)

	if s.Backup.Schedule != "" && s.Backup.Keep == 0 {
		s.Backup.Keep = DefaultBackupKeep
	}

	setBool(&s.Modules.Pipelines.Enabled, true)
	setBool(&s.Modules.GitOps.Enabled, true)
	setBool(&s.Legacy.NATS.Enabled, false)
	setBool(&s.Legacy.Consul.Enabled, false)

	for _, db := range s.Databases.All() {
		setString(&db.Mode, DefaultDatabaseMode)
		if db.Mode == DatabaseModeInternal {
			setString(&db.Persistence.StorageClass, s.Storage.ClassName)
		}
	}

	for i := range s.Placement.Tolerations {
		setString(&s.Placement.Tolerations[i].Operator, DefaultTolerationOperator)
	}

	for i := range s.Runners {
		s.Runners[i] = RunnerDefaults(s.Runners[i])
	}

	setRuntimeDefaults(s)
}

// setRuntimeDefaults names the one unnamed runtime codefresh (when several
// have no name, none is guessed and validation asks for names), gives each
// runtime a namespace named after it, and makes the first runtime the
// configuration runtime.
func setRuntimeDefaults(s *Spec) {
	unnamed := -1
	for i, rt := range s.Runtimes {
		if rt.Name == "" {
			if unnamed >= 0 {
				unnamed = -2 // more than one
				break
			}
			unnamed = i
		}
	}
	for i, rt := range s.Runtimes {
		if rt.Name != "" || i == unnamed {
			s.Runtimes[i] = RuntimeDefaults(rt)
		}
	}
	if len(s.Runtimes) > 0 {
		setString(&s.RuntimeConfig.ConfigRuntime, s.Runtimes[0].Name)
	}
}

func setString(p *string, def string) {
	if *p == "" {
		*p = def
	}
}

func setBool(p **bool, def bool) {
	if *p == nil {
		*p = &def
	}
}

// IsEnabled reports whether the module is switched on; def is the answer
// when the file does not say (true for platform modules, false for legacy
// services; after SetDefaults it is never needed).
func (m Module) IsEnabled(def bool) bool {
	if m.Enabled == nil {
		return def
	}
	return *m.Enabled
}

// IsEnabled reports whether the component is installed (true unless the
// override says enabled: false).
func (c ComponentOverride) IsEnabled() bool {
	return c.Enabled == nil || *c.Enabled
}

// IsExternal reports whether the operator runs this service.
func (d Database) IsExternal() bool { return d.Mode == DatabaseModeExternal }

// IsPlatformCluster reports whether the reference names the cluster the
// platform itself is installed on (neither kubeconfig nor context given).
func (c ClusterRef) IsPlatformCluster() bool { return c.Kubeconfig == "" && c.Context == "" }

// NamedDatabase is one of the four infrastructure services with its name in
// the API (mongodb, redis, rabbitmq, postgresql).
type NamedDatabase struct {
	Name string
	*Database
}

// All lists the four services in a fixed order, each pointing into d.
func (d *Databases) All() []NamedDatabase {
	return []NamedDatabase{
		{"mongodb", &d.MongoDB},
		{"redis", &d.Redis},
		{"rabbitmq", &d.RabbitMQ},
		{"postgresql", &d.PostgreSQL},
	}
}
