package action

import (
	"context"
	"fmt"
	"strings"

	"onprem.dev/onprem/installer/quote"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/version"
)

// Render renders the platform (or one component) without a cluster.
type Render struct {
	Source
	// Set holds --set COMPONENT.key=value overrides.
	Set []string
	// Component limits the result to one component.
	Component string
}

// Run renders.
func (r *Render) Run(ctx context.Context) (*render.Result, error) {
	l, err := r.Source.Load(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if err := l.Release.CheckInstaller(version.Version); err != nil {
		return nil, err
	}
	res, err := render.Render(ctx, l.RenderOptions(r.Set))
	if err != nil {
		return nil, renderError(err, l.Source)
	}
	if r.Component == "" {
		return res, nil
	}
	c := res.Component(r.Component)
	if c == nil {
		var names []string
		for _, c := range res.Components {
			names = append(names, c.Name)
		}
		return nil, inputErr(fmt.Errorf("--component %s: not a component of this installation; components: %s", quote.Text(r.Component), strings.Join(names, ", ")))
	}
	res.Components = []*render.Component{c}
	return res, nil
}
