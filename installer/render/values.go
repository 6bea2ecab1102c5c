package render

import (
	"fmt"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/strvals"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/credentials"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/sizing"
)

// Standard ports of the infrastructure services.
var defaultPorts = map[string]int{"mongodb": 27017, "postgresql": 5432, "redis": 6379, "rabbitmq": 5672}

// adminSecrets are the generated Secrets of the in-cluster services.
var adminSecrets = map[string]string{
	"mongodb":    credentials.MongoDBAdmin,
	"postgresql": credentials.PostgreSQLAdmin,
	"redis":      credentials.Redis,
	"rabbitmq":   credentials.RabbitMQ,
}

// SetError is a bad --set argument.
type SetError struct{ Err error }

func (e *SetError) Error() string { return e.Err.Error() }
func (e *SetError) Unwrap() error { return e.Err }

// parseSet reads --set arguments (COMPONENT.key=value, Helm's syntax) into
// one values map per component.
func parseSet(sets []string, rel *release.Release) (map[string]map[string]any, error) {
	all := map[string]any{}
	for _, s := range sets {
		if err := strvals.ParseInto(s, all); err != nil {
			return nil, &SetError{fmt.Errorf("--set %s: %w", s, err)}
		}
	}
	out := map[string]map[string]any{}
	for name, v := range all {
		if _, ok := rel.Component(name); !ok {
			return nil, &SetError{fmt.Errorf("--set %s...: release %s has no component %q; write --set COMPONENT.key=value with one of: %s",
				name, rel.Version, name, strings.Join(rel.ComponentNames(), ", "))}
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, &SetError{fmt.Errorf("--set %s=...: name a value inside the component, as --set %s.key=value", name, name)}
		}
		out[name] = m
	}
	return out, nil
}

// globalValues is the `global` block every chart receives (charts/README.md).
func globalValues(in *config.Installation) map[string]any {
	s := in.Spec
	pullSecrets := []any{}
	if s.Registry.PullSecret != "" {
		pullSecrets = append(pullSecrets, s.Registry.PullSecret)
	}
	tlsSecret := credentials.TLS
	if s.TLS.Mode == "secret" {
		tlsSecret = s.TLS.SecretName
	}
	gwNS := s.Ingress.GatewayAPI.GatewayNamespace
	if gwNS == "" {
		gwNS = s.Namespace
	}
	dbs := map[string]any{}
	for name, port := range defaultPorts {
		db := databaseOf(s, name)
		if db.Mode == "external" {
			dbs[name] = map[string]any{"external": true, "host": "", "port": 0, "secretName": db.External.SecretName}
			continue
		}
		dbs[name] = map[string]any{"external": false, "host": name, "port": port, "secretName": adminSecrets[name]}
		if name == "mongodb" && s.Availability == config.AvailabilityHigh {
			dbs[name].(map[string]any)["replicaSet"] = MongoDBReplicaSet
		}
	}
	return map[string]any{
		"availability": s.Availability,
		"platform": map[string]any{
			"name":      in.Metadata.Name,
			"version":   s.Version,
			"namespace": s.Namespace,
			"domain":    s.Domain,
		},
		"imagePullSecrets": pullSecrets,
		"storageClass":     s.Storage.ClassName,
		"ingress": map[string]any{
			"enabled":   true,
			"className": s.Ingress.ClassName,
			"tlsSecret": tlsSecret,
		},
		"gatewayAPI": map[string]any{
			"enabled":          s.Ingress.GatewayAPI.Enabled,
			"gatewayName":      s.Ingress.GatewayAPI.GatewayName,
			"gatewayNamespace": gwNS,
			"sectionName":      s.Ingress.GatewayAPI.SectionName,
		},
		"databases": dbs,
	}
}

// configValues is the configuration's layer for one component: the global
// block, its image references, and what onprem.yaml says of it.
func configValues(in *config.Installation, rel *release.Release, c release.Component, global map[string]any) (map[string]any, error) {
	s := in.Spec
	v := map[string]any{"global": global}
	refs := map[string]any{}
	for key, imgName := range c.Images {
		img, ok := rel.Image(imgName)
		if !ok {
			return nil, fmt.Errorf("component %s: image %q is not in release %s", c.Name, imgName, rel.Version)
		}
		refs[key] = images.Reference(img, s.Images.Platform)
	}
	v["images"] = refs
	switch {
	case c.Chart == sizing.ServiceChart:
		v["name"] = c.Name
	case c.Group == release.GroupInfrastructure:
		p := databaseOf(s, c.Name).Persistence
		pers := map[string]any{}
		if p.Size != "" {
			pers["size"] = p.Size
		}
		if p.StorageClass != "" {
			pers["storageClass"] = p.StorageClass
		}
		if len(pers) > 0 {
			v["persistence"] = pers
		}
	case c.Group == release.GroupBackup:
		b := s.Backup
		v["schedule"] = b.Schedule
		v["timeZone"] = b.TimeZone
		v["s3"] = map[string]any{"endpoint": b.S3.Endpoint, "bucket": b.S3.Bucket, "prefix": b.S3.Prefix, "region": b.S3.Region,
			"credentialsSecret": b.S3.CredentialsSecret, "caSecret": b.S3.CASecret}
		recipients := make([]any, 0, len(b.Recipients))
		for _, r := range b.Recipients {
			recipients = append(recipients, r)
		}
		v["recipients"] = recipients
		v["keep"] = b.Keep
		v["includeRedis"] = b.IncludeRedis
	case c.Group == release.GroupIngress:
		v["className"] = s.Ingress.ClassName
		if s.Ingress.ServiceType != "" {
			v["serviceType"] = s.Ingress.ServiceType
		}
		v["gatewayAPI"] = map[string]any{"enabled": s.Ingress.GatewayAPI.Enabled}
	}
	return v, nil
}

// componentValues layers one component's values: release < sizing profile
// < availability (spec.availability high's minimum replicas) < configuration < the operator's values in onprem.yaml < --set. (The
// chart's own values.yaml lies beneath all of them, merged by Helm.)
func componentValues(in *config.Installation, rel *release.Release, prof *sizing.Profile, c release.Component, global map[string]any, set map[string]map[string]any) (map[string]any, error) {
	cfg, err := configValues(in, rel, c, global)
	if err != nil {
		return nil, err
	}
	v := sizing.Merge(nil, c.Values)
	v = sizing.Merge(v, prof.Values(c.Name, c.Chart))
	v = sizing.Merge(v, availabilityValues(in, c, v))
	v = sizing.Merge(v, cfg)
	if o, ok := in.Spec.Components[c.Name]; ok {
		v = sizing.Merge(v, o.Values)
	}
	v = sizing.Merge(v, set[c.Name])
	if err := checkAvailability(in, rel, c, v); err != nil {
		return nil, err
	}
	return v, nil
}

// serviceUses reads values.uses.<what> of a service component.
func serviceUses(values map[string]any, what string) bool {
	uses, _ := values["uses"].(map[string]any)
	b, _ := uses[what].(bool)
	return b
}

// provisionList is db-provision's `services` value: every enabled service
// with its own MongoDB or PostgreSQL database, sorted by name.
func provisionList(svcValues map[string]map[string]any) []any {
	names := make([]string, 0, len(svcValues))
	for n := range svcValues {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []any
	for _, n := range names {
		m, p := serviceUses(svcValues[n], "mongodb"), serviceUses(svcValues[n], "postgresql")
		if m || p {
			out = append(out, map[string]any{"name": n, "mongodb": m, "postgresql": p})
		}
	}
	return out
}
