package render

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
)

// PlatformComponent is the component holding the platform's namespace-level
// objects (namespace, RBAC, network policies) from manifests/. Every other
// component depends on it.
const PlatformComponent = "platform"

// planned is a component of the release that this configuration installs.
type planned struct {
	release.Component
	deps []string
}

// plan picks the release's components that the configuration enables and
// orders them so that every component comes after its dependencies
// (manifest order among equals). Dependencies on components that are left
// out are dropped; components with no dependency left depend on platform.
func plan(in *config.Installation, rel *release.Release) ([]planned, error) {
	enabled := map[string]bool{}
	var errs []string
	for _, c := range rel.Components {
		on, err := componentEnabled(in, c)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		enabled[c.Name] = on
	}
	for name := range in.Spec.Components {
		if _, ok := rel.Component(name); !ok {
			errs = append(errs, fmt.Sprintf("spec.components.%s: release %s has no component %q; components: %s",
				name, rel.Version, name, strings.Join(rel.ComponentNames(), ", ")))
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	var out []planned
	for _, c := range rel.Components {
		if !enabled[c.Name] {
			continue
		}
		p := planned{Component: c}
		for _, d := range c.DependsOn {
			if enabled[d] {
				p.deps = append(p.deps, d)
			}
		}
		if len(p.deps) == 0 {
			p.deps = []string{PlatformComponent}
		}
		out = append(out, p)
	}
	return topoSort(out), nil
}

func componentEnabled(in *config.Installation, c release.Component) (bool, error) {
	byGroup := groupEnabled(in, c)
	override, ok := in.Spec.Components[c.Name]
	if !ok || override.Enabled == nil {
		return byGroup, nil
	}
	switch c.Group {
	case release.GroupIngress:
		return false, fmt.Errorf("spec.components.%s.enabled: the ingress controller is switched with spec.ingress.mode (install or existing)", c.Name)
	case release.GroupInfrastructure:
		return false, fmt.Errorf("spec.components.%s.enabled: to run without the in-cluster %s, set spec.databases.%s.mode: external", c.Name, c.Name, c.Name)
	case release.GroupProvisioning:
		return false, fmt.Errorf("spec.components.%s.enabled: database provisioning cannot be switched off; it runs whenever a service has its own database", c.Name)
	case release.GroupBackup:
		return false, fmt.Errorf("spec.components.%s.enabled: scheduled backups are switched with spec.backup.schedule", c.Name)
	}
	if *override.Enabled && !byGroup {
		return false, fmt.Errorf("spec.components.%s.enabled: true, but its %s is switched off; switch the %s on instead", c.Name, groupSwitch(c.Group), groupSwitch(c.Group))
	}
	return *override.Enabled, nil
}

func groupSwitch(group string) string {
	switch group {
	case release.GroupPipelines:
		return "module (spec.modules.pipelines.enabled)"
	case release.GroupGitOps:
		return "module (spec.modules.gitops.enabled)"
	}
	return "group " + group
}

func isOn(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}

func groupEnabled(in *config.Installation, c release.Component) bool {
	s := in.Spec
	switch c.Group {
	case release.GroupIngress:
		return s.Ingress.Mode != "existing"
	case release.GroupInfrastructure:
		return databaseOf(s, c.Name).Mode != "external"
	case release.GroupLegacy:
		switch c.Name {
		case "nats":
			return isOn(s.Legacy.NATS.Enabled, false)
		case "consul":
			return isOn(s.Legacy.Consul.Enabled, false)
		}
		return false
	case release.GroupProvisioning:
		return true
	case release.GroupPipelines:
		return isOn(s.Modules.Pipelines.Enabled, true)
	case release.GroupGitOps:
		return isOn(s.Modules.GitOps.Enabled, true)
	case release.GroupBackup:
		return s.Backup.Schedule != ""
	}
	return false
}

// databaseOf returns the configuration of an infrastructure component.
func databaseOf(s config.Spec, name string) config.Database {
	switch name {
	case "mongodb":
		return s.Databases.MongoDB
	case "postgresql":
		return s.Databases.PostgreSQL
	case "redis":
		return s.Databases.Redis
	case "rabbitmq":
		return s.Databases.RabbitMQ
	}
	return config.Database{}
}

// topoSort orders components after their dependencies, keeping manifest
// order wherever the dependencies allow (Kahn's algorithm, always taking
// the earliest ready component). The release is validated acyclic.
func topoSort(ps []planned) []planned {
	index := map[string]int{}
	for i, p := range ps {
		index[p.Name] = i
	}
	done := map[string]bool{PlatformComponent: true}
	var out []planned
	for len(out) < len(ps) {
		progressed := false
		for _, p := range ps {
			if done[p.Name] {
				continue
			}
			ready := !slices.ContainsFunc(p.deps, func(d string) bool { return !done[d] })
			if ready {
				out = append(out, p)
				done[p.Name] = true
				progressed = true
				break
			}
		}
		if !progressed {
			// Unreachable for a validated release; keep the rest in
			// manifest order rather than loop forever.
			for _, p := range ps {
				if !done[p.Name] {
					out = append(out, p)
					done[p.Name] = true
				}
			}
		}
	}
	return out
}
