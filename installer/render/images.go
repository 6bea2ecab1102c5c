package render

import (
	"context"
	"fmt"
	"io/fs"
	"slices"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
)

// ImageOptions says what ReleaseImages renders.
type ImageOptions struct {
	Release *release.Release
	// PlatformImages is where the platform's own images are published
	// (spec.images.platform; default config.DefaultPlatformImages).
	PlatformImages string
	// Charts and Manifests default to the embedded ones.
	Charts, Manifests fs.FS
	// RuntimeChart is the release's runtime chart; nil leaves the
	// runtime out (a release without one).
	RuntimeChart *chartv2.Chart
}

// imagesInstallation is the installation whose render holds every image a
// release can run: every module, the legacy components, scheduled backups,
// every database in the cluster, a build runner, and a runtime.
const imagesInstallation = `apiVersion: onprem.dev/v1alpha1
kind: Installation
metadata: {name: images}
spec:
  version: %q
  domain: images.invalid
  images: {platform: %q}
  legacy:
    nats: {enabled: true}
    consul: {enabled: true}
  backup:
    schedule: "0 1 * * *"
    s3: {endpoint: "https://s3.images.invalid", bucket: images, credentialsSecret: images}
    recipients: [age1wvt9qswx46jnegg8qfra5evxl450ur5ul2jx2gpgtay0248ykg9qsasy7p]
  runtimeConfig: {accountId: images}
`

// ReleaseImages lists every image a release runs, as its charts render
// them with the release's values (images.InObjects: containers, init
// containers, hook Jobs, and the images charts write into configuration),
// not as a list says: the platform with every component on (and its
// migrations), a build runner, and the GitOps runtime in each access mode
// (ingress and tunnel: the tunnel client is an image of its own). Each
// pullable reference once, sorted, as the charts write them (before any
// relocation). Bundles carry exactly these.
func ReleaseImages(ctx context.Context, o ImageOptions) ([]string, error) {
	rel := o.Release
	if o.PlatformImages == "" {
		o.PlatformImages = config.DefaultPlatformImages
	}
	in, _, err := config.Decode("images.yaml", fmt.Appendf(nil, imagesInstallation, rel.Version, o.PlatformImages))
	if err != nil {
		return nil, fmt.Errorf("release %s: images: %w", rel.Version, err)
	}
	config.SetDefaults(in)
	var objs []*unstructured.Unstructured
	res, err := Render(ctx, Options{Installation: in, Release: rel, Charts: o.Charts, Manifests: o.Manifests, Tasks: true})
	if err != nil {
		return nil, fmt.Errorf("release %s: rendering the platform for its images: %w", rel.Version, err)
	}
	for _, c := range res.Components {
		objs = append(objs, c.Objects...)
	}
	for _, t := range res.Tasks {
		objs = append(objs, t.Job)
	}
	if rel.Runner != nil {
		r, err := RenderRunner(ctx, RunnerOptions{Installation: in, Release: rel, Runner: config.Runner{Name: "images"}, Charts: o.Charts, Manifests: o.Manifests})
		if err != nil {
			return nil, fmt.Errorf("release %s: rendering a build runner for its images: %w", rel.Version, err)
		}
		objs = append(objs, r.Objects...)
	}
	if rel.Runtime != nil && o.RuntimeChart != nil {
		for _, mode := range []string{config.RuntimeAccessIngress, config.RuntimeAccessTunnel} {
			rt := config.Runtime{Name: "images", Access: config.RuntimeAccess{Mode: mode}}
			if mode == config.RuntimeAccessTunnel {
				rt.Access.TunnelServer = config.TunnelServer{Host: "register.tunnels.images.invalid", SubdomainHost: "tunnels.images.invalid"}
			}
			c, err := RenderRuntime(ctx, RuntimeOptions{Installation: in, Release: rel, Runtime: rt, ConfigurationRuntime: true, Chart: o.RuntimeChart, Manifests: o.Manifests})
			if err != nil {
				return nil, fmt.Errorf("release %s: rendering the runtime (%s) for its images: %w", rel.Version, mode, err)
			}
			objs = append(objs, c.Objects...)
		}
	}
	refs, err := images.References(objs)
	if err != nil {
		return nil, fmt.Errorf("release %s: images: %w", rel.Version, err)
	}
	return slices.Compact(refs), nil
}
