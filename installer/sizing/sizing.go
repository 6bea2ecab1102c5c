// Package sizing holds the sizing profiles (small, medium, large): the
// requests, limits, replicas and volume sizes of every component, as one
// layer of its Helm values.
package sizing

import (
	_ "embed"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

//go:embed profiles.yaml
var profilesYAML []byte

// ServiceChart is the chart every platform service is a release of; the
// profile's "services" block applies to its components.
const ServiceChart = "service"

// Profile is one sizing profile.
type Profile struct {
	Name        string                    `json:"-"`
	Description string                    `json:"description"`
	Services    map[string]any            `json:"services"`
	Components  map[string]map[string]any `json:"components"`
}

var profiles = mustLoad()

func mustLoad() map[string]*Profile {
	ps, err := parse(profilesYAML)
	if err != nil {
		// The file is embedded and covered by the package tests.
		panic(fmt.Sprintf("embedded sizing profiles: %v", err))
	}
	return ps
}

func parse(data []byte) (map[string]*Profile, error) {
	var ps map[string]*Profile
	if err := yaml.UnmarshalStrict(data, &ps); err != nil {
		return nil, err
	}
	for name, p := range ps {
		if p == nil {
			return nil, fmt.Errorf("profile %s is empty", name)
		}
		p.Name = name
	}
	return ps, nil
}

// Names lists the profiles, smallest first.
func Names() []string {
	order := map[string]int{"small": 0, "medium": 1, "large": 2}
	names := slices.Collect(maps.Keys(profiles))
	sort.Slice(names, func(i, j int) bool { return order[names[i]] < order[names[j]] })
	return names
}

// Get returns the named profile.
func Get(name string) (*Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return nil, fmt.Errorf("sizing profile %q does not exist; profiles: %s", name, strings.Join(Names(), ", "))
	}
	return p, nil
}

// Values returns the profile's layer of values for a component rendered
// from chart: the services block for service components, overlaid with the
// component's own block. The result is a fresh copy.
func (p *Profile) Values(component, chart string) map[string]any {
	out := map[string]any{}
	if chart == ServiceChart {
		out = deepCopy(p.Services)
	}
	return Merge(out, deepCopy(p.Components[component]))
}

// Merge merges src into dst, recursively for nested maps; src wins. It
// returns dst (allocated if nil).
func Merge(dst, src map[string]any) map[string]any {
	if dst == nil {
		dst = map[string]any{}
	}
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				dst[k] = Merge(dm, sm)
				continue
			}
			dst[k] = Merge(nil, sm)
			continue
		}
		dst[k] = v
	}
	return dst
}

func deepCopy(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return Merge(nil, m)
}
