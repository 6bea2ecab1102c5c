//go:build linux

package images

import (
	"context"
	"fmt"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"onprem.dev/onprem/e2e/refservice"
)

func (b *builder) refserviceStamp(ctx context.Context) (string, error) {
	gs, err := b.goStamp(ctx, refservice.Package)
	if err != nil {
		return "", err
	}
	return hashOf(layoutVersion, "refservice", gs, fmt.Sprint(refservice.UID)), nil
}

// refserviceImage: the reference service (static) as the only file of a
// one-layer image, run as the service chart's user, with an empty /tmp.
func (b *builder) refserviceImage(ctx context.Context, scratch string) (v1.Image, string, error) {
	bin := filepath.Join(scratch, "refservice")
	if err := b.goBuild(ctx, "refservice", refservice.Package, bin); err != nil {
		return nil, "", err
	}
	layer, err := filesLayer([]file{
		{path: "/refservice", src: bin, mode: 0o755},
		{path: "/tmp", dir: true, mode: 0o1777},
	})
	if err != nil {
		return nil, "", fmt.Errorf("refservice: %w", err)
	}
	img, err := assemble([]v1.Layer{layer}, v1.Config{
		Entrypoint:   []string{"/refservice"},
		Env:          []string{"PATH=" + basePath},
		User:         fmt.Sprintf("%d:%d", refservice.UID, refservice.UID),
		WorkingDir:   "/",
		ExposedPorts: ports(8080),
	})
	return img, "onprem reference service (" + refservice.Package + ")", err
}
