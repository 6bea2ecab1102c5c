//go:build linux

package images

import (
	"context"
	"fmt"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// onpremPackage is onprem's command, which the scheduled backup's CronJob
// runs in the cluster (charts/backup).
const onpremPackage = mainModule + "/cmd/onprem"

// onpremUID is the image's user (the backup chart runs it as 65532).
const onpremUID = 65532

func (b *builder) onpremStamp(ctx context.Context) (string, error) {
	gs, err := b.goStamp(ctx, onpremPackage)
	if err != nil {
		return "", err
	}
	return hashOf(layoutVersion, "onprem", gs, fmt.Sprint(onpremUID)), nil
}

// onpremImage: onprem itself (static), not a stand-in: what the vendor
// publishes as the release's onprem image. The only file besides a user
// and an empty /tmp.
func (b *builder) onpremImage(ctx context.Context, scratch string) (v1.Image, string, error) {
	bin := filepath.Join(scratch, "onprem")
	if err := b.goBuild(ctx, "onprem", onpremPackage, bin); err != nil {
		return nil, "", err
	}
	layer, err := filesLayer([]file{
		{path: "/usr/local/bin/onprem", src: bin, mode: 0o755},
		{path: "/etc/passwd", data: passwd("onprem", onpremUID, "/tmp"), mode: 0o644},
		{path: "/etc/group", data: group("onprem", onpremUID), mode: 0o644},
		{path: "/tmp", dir: true, mode: 0o1777},
	})
	if err != nil {
		return nil, "", fmt.Errorf("onprem: %w", err)
	}
	img, err := assemble([]v1.Layer{layer}, v1.Config{
		Entrypoint: []string{"/usr/local/bin/onprem"},
		Env:        []string{"PATH=" + basePath, "HOME=/tmp"},
		User:       fmt.Sprintf("%d:%d", onpremUID, onpremUID),
		WorkingDir: "/tmp",
	})
	return img, "onprem (" + onpremPackage + ")", err
}
