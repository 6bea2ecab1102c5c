package refservice

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Package is the program's import path.
const Package = "onprem.dev/onprem/e2e/refservice/cmd/refservice"

// UID is the user the image runs as (the service chart's runAsUser).
const UID = 10001

// Image builds the program (static, linux/amd64) and packs it into a
// one-layer image: /refservice as the entrypoint, run as UID, and an empty
// /tmp. No base image and no registry are needed.
func Image(ctx context.Context) (v1.Image, error) {
	dir, err := os.MkdirTemp("", "refservice-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "refservice")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, Package)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s: %w\n%s", Package, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mod := time.Unix(0, 0)
	if err := tw.WriteHeader(&tar.Header{Name: "tmp/", Typeflag: tar.TypeDir, Mode: 0o1777, ModTime: mod}); err != nil {
		return nil, err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "refservice", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(data)), ModTime: mod}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config.Entrypoint = []string{"/refservice"}
	cf.Config.User = fmt.Sprintf("%d:%d", UID, UID)
	cf.Config.ExposedPorts = map[string]struct{}{"8080/tcp": {}}
	return mutate.ConfigFile(img, cf)
}
