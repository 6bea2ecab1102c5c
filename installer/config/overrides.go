package config

// Overrides are the fields that command-line flags can set; they win over the
// file and the environment. A nil field leaves the value alone; a non-nil one
// sets it, even to "" (so an empty registry host turns relocation off).
type Overrides struct {
	Version            *string // spec.version
	Namespace          *string // spec.namespace
	Domain             *string // spec.domain
	Profile            *string // spec.profile
	RegistryHost       *string // spec.registry.host
	RegistryPathPrefix *string // spec.registry.pathPrefix
}

// Apply sets every non-nil override on the installation.
func (o Overrides) Apply(in *Installation) {
	if in == nil {
		return
	}
	for _, f := range o.fields(in) {
		if f.value != nil {
			*f.target = *f.value
		}
	}
}

// FlagOrigin is what Source.Origin says of a field set through Overrides.
const FlagOrigin = "a command-line flag"

// origins maps the field path of every override that is set to FlagOrigin,
// for Source.
func (o Overrides) origins() map[string]string {
	out := map[string]string{}
	for _, f := range o.fields(new(Installation)) {
		if f.value != nil {
			out[f.path] = FlagOrigin
		}
	}
	return out
}

type override struct {
	value  *string
	target *string
	path   string
}

func (o Overrides) fields(in *Installation) []override {
	return []override{
		{o.Version, &in.Spec.Version, "spec.version"},
		{o.Namespace, &in.Spec.Namespace, "spec.namespace"},
		{o.Domain, &in.Spec.Domain, "spec.domain"},
		{o.Profile, &in.Spec.Profile, "spec.profile"},
		{o.RegistryHost, &in.Spec.Registry.Host, "spec.registry.host"},
		{o.RegistryPathPrefix, &in.Spec.Registry.PathPrefix, "spec.registry.pathPrefix"},
	}
}
