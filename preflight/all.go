package preflight

import "sort"

// All returns every check, sorted by ID.
func All() []Check {
	checks := append(clusterChecks(), connectionChecks()...)
	sort.Slice(checks, func(i, j int) bool { return checks[i].ID < checks[j].ID })
	return checks
}
