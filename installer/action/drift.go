package action

import (
	"context"
	"fmt"

	"onprem.dev/onprem/installer/apply"
	"onprem.dev/onprem/installer/diff"
	"onprem.dev/onprem/installer/render"
)

// releaseDrift says how a component's live objects differ from its
// deployed release, what onprem last applied ("Deployment/gitops-ui
// image"), with the comparison 'onprem install' makes before it repairs
// (installer/diff's Checker). It changes nothing. A release that is not
// deployed (failed, pending, uninstalled) is not compared: nil.
func releaseDrift(ctx context.Context, ch *diff.Checker, name string, info *apply.ReleaseInfo) ([]string, error) {
	if info == nil || !info.Deployed {
		return nil, nil
	}
	objs, err := diff.Objects(info.Manifest)
	if err != nil {
		return nil, fmt.Errorf("reading the objects of release %s: %w", name, err)
	}
	d, err := ch.Drift(ctx, &render.Component{Name: name, Objects: objs})
	if err != nil {
		return nil, err
	}
	return diff.Strings(d), nil
}
