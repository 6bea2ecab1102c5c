//go:build linux

package kindcluster

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestWriteImageArchive checks the images WriteImageArchive makes without
// any tool: references, entrypoint, platform and the files in the layer.
func TestWriteImageArchive(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "app")
	if err := os.WriteFile(src, []byte("#!binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "images.tar")
	err := WriteImageArchive(archive,
		ImageSpec{Ref: "onprem.dev/app:v1", Files: []File{{Path: "/usr/local/bin/app", Source: src}, {Path: "etc/app.conf", Data: []byte("x=1\n")}},
			Entrypoint: []string{"/usr/local/bin/app"}, Env: []string{"A=b"}},
		ImageSpec{Ref: "registry.k8s.io/pause:3.10.2", Files: []File{{Path: "/pause", Data: []byte("p"), Mode: 0o755}}, Entrypoint: []string{"/pause"}},
	)
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag("onprem.dev/app:v1")
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture == "" || strings.Join(cf.Config.Entrypoint, " ") != "/usr/local/bin/app" ||
		!strings.HasPrefix(cf.Config.Env[0], "PATH=") || cf.Config.Env[1] != "A=b" {
		t.Fatalf("config: os %q arch %q entrypoint %v env %v", cf.OS, cf.Architecture, cf.Config.Entrypoint, cf.Config.Env)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers: %d, %v", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got := map[string]string{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		got[h.Name] = h.FileInfo().Mode().String() + " " + string(data)
	}
	for name, want := range map[string]string{
		"tmp/":              "dtrwxrwxrwx ",
		"usr/local/bin/":    "drwxr-xr-x ",
		"usr/local/bin/app": "-rwxr-xr-x #!binary",
		"etc/app.conf":      "-rw-r--r-- x=1\n",
	} {
		if got[name] != want {
			t.Errorf("layer entry %s = %q, want %q (all: %v)", name, got[name], want, got)
		}
	}
	pauseTag, _ := name.NewTag("registry.k8s.io/pause:3.10.2")
	if _, err := tarball.ImageFromPath(archive, &pauseTag); err != nil {
		t.Errorf("second image: %v", err)
	}
}

func TestMirrorFrom(t *testing.T) {
	deb822 := "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n\n" +
		"Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n"
	if got := mirrorFrom(deb822, true); got != "http://mirror.example/debian" {
		t.Errorf("deb822: %q", got)
	}
	oneLine := "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://other.example/x nodistro main\n" +
		"deb [signed-by=/k.gpg] http://mirror.example/debian bookworm main contrib\n"
	if got := mirrorFrom(oneLine, false); got != "http://mirror.example/debian" {
		t.Errorf("one-line: %q", got)
	}
	if got := mirrorFrom("deb http://x.example/debian trixie main\n", false); got != "" {
		t.Errorf("other suite: %q", got)
	}
}

func TestNodeContainerdConfig(t *testing.T) {
	in := "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.10\"\n  restrict_oom_score_adj = false\n"
	out, err := nodeContainerdConfig(in, "registry.k8s.io/pause:3.10.2")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "  sandbox_image = \"registry.k8s.io/pause:3.10.2\"\n") || !strings.Contains(out, "  restrict_oom_score_adj = true") {
		t.Errorf("config:\n%s", out)
	}
	if _, err := nodeContainerdConfig("version = 2\n", "p"); err == nil {
		t.Error("a config without the settings was accepted")
	}
}

func TestRegistryHostsTOML(t *testing.T) {
	got := registryHostsTOML("172.18.0.1:5000")
	want := "server = \"http://172.18.0.1:5000\"\n\n[host.\"http://172.18.0.1:5000\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
	if got != want {
		t.Errorf("hosts.toml:\n%s\nwant:\n%s", got, want)
	}
}
