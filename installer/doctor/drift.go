package doctor

import (
	"fmt"
	"strings"
)

var drift = Analyzer{
	ID:          "drift",
	Description: "a component's live objects differ from what onprem applied, in fields onprem sets (changed or deleted by hand or by another tool)",
	Run: func(in *Input) []Finding {
		var out []Finding
		for _, d := range in.S.Drift {
			if len(d.Objects) == 0 {
				continue
			}
			ev := make([]string, 0, len(d.Objects))
			for _, o := range d.Objects {
				ev = append(ev, "drifted: "+o)
			}
			out = append(out, Finding{Severity: Warning, Component: d.Component,
				Object:   fmt.Sprintf("HelmRelease/%s/%s", in.S.Meta.Namespace, d.Component),
				Title:    fmt.Sprintf("%s differs from what onprem applied: %s", d.Component, strings.Join(d.Objects, "; ")),
				Evidence: ev,
				Remediation: "run 'onprem install -c onprem.yaml': it applies the component again, reverts these fields and names them ('repaired: ...'); " +
					"'onprem diff -c onprem.yaml' shows the values first. To keep such a change, make it in onprem.yaml (the component's values or an overlay). " +
					"Fields onprem does not set are never reported nor reverted (docs/installing.md)"})
		}
		return out
	},
}
