package backup

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/installer/config"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The overlay folders travel with the configuration: PackConfig renames
// them overlays/overlay-N in onprem.yaml and carries their files;
// UnpackConfig puts them back where that onprem.yaml finds them.
func TestPackUnpackConfigRoundTrip(t *testing.T) {
	src := t.TempDir()
	first, second := filepath.Join(src, "first"), filepath.Join(src, "second")
	writeFiles(t, first, map[string]string{"kustomization.yaml": "kind: Component\n", "patches/ui.yaml": "spec: {}\n"})
	writeFiles(t, second, map[string]string{"kustomization.yaml": "kind: Component\nname: second\n"})
	in := &config.Installation{APIVersion: "onprem.dev/v1alpha1", Kind: "Installation"}
	in.Metadata.Name = "acme"
	in.Spec.Overlays = []string{first, second}

	data, err := PackConfig(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Spec.Overlays) != 2 || in.Spec.Overlays[0] != first {
		t.Errorf("PackConfig changed its input: %v", in.Spec.Overlays)
	}
	var packed config.Installation
	if err := yaml.Unmarshal(data[ConfigKey], &packed); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(packed.Spec.Overlays, ","); got != "overlays/overlay-0,overlays/overlay-1" {
		t.Errorf("packed overlays = %s, want overlays/overlay-0,overlays/overlay-1", got)
	}
	if packed.Metadata.Name != "acme" {
		t.Errorf("packed name = %q", packed.Metadata.Name)
	}

	dst := t.TempDir()
	path, err := UnpackConfig(dst, data)
	if err != nil {
		t.Fatal(err)
	}
	if path != filepath.Join(dst, config.DefaultPath) {
		t.Errorf("UnpackConfig returned %s", path)
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, data[ConfigKey]) {
		t.Errorf("onprem.yaml = %q, want %q", got, data[ConfigKey])
	}
	for name, want := range map[string]string{
		"overlays/overlay-0/kustomization.yaml": "kind: Component\n",
		"overlays/overlay-0/patches/ui.yaml":    "spec: {}\n",
		"overlays/overlay-1/kustomization.yaml": "kind: Component\nname: second\n",
	} {
		got, err := os.ReadFile(filepath.Join(dst, filepath.FromSlash(name)))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestPackConfigWithoutOverlaysHasNoTar(t *testing.T) {
	data, err := PackConfig(&config.Installation{APIVersion: "onprem.dev/v1alpha1", Kind: "Installation"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := data[OverlaysKey]; ok {
		t.Errorf("a configuration without overlays carries %s", OverlaysKey)
	}
	if len(data[ConfigKey]) == 0 {
		t.Error("no onprem.yaml")
	}
}

func TestPackConfigRefusesLargeOverlays(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"big.yaml": strings.Repeat("x", maxOverlayBytes+1)})
	in := &config.Installation{}
	in.Spec.Overlays = []string{dir}
	_, err := PackConfig(in)
	if err == nil || !strings.Contains(err.Error(), "at most 512 KiB") {
		t.Fatalf("PackConfig of a 512 KiB overlay: %v, want a refusal naming the limit", err)
	}
}

func TestPackConfigMissingOverlayNamesIt(t *testing.T) {
	in := &config.Installation{}
	in.Spec.Overlays = []string{filepath.Join(t.TempDir(), "gone")}
	_, err := PackConfig(in)
	if err == nil || !strings.Contains(err.Error(), "spec.overlays[0]") {
		t.Fatalf("PackConfig of a missing folder: %v, want an error naming spec.overlays[0]", err)
	}
}

func overlayTar(t *testing.T, names ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A backup's overlay tar may only write below overlays/ of the folder it
// is unpacked in.
func TestUnpackConfigRefusesPathsOutsideOverlays(t *testing.T) {
	for _, name := range []string{"../escape.yaml", "overlays/../../escape.yaml", "/etc/escape.yaml", "elsewhere/x.yaml"} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "restore")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			_, err := UnpackConfig(dir, map[string][]byte{ConfigKey: []byte("kind: Installation\n"), OverlaysKey: overlayTar(t, name)})
			if err == nil || !strings.Contains(err.Error(), "unexpected file") {
				t.Fatalf("UnpackConfig with %q: %v, want a refusal", name, err)
			}
			if _, err := os.Stat(filepath.Join(parent, "escape.yaml")); err == nil {
				t.Error("a file was written outside the folder")
			}
			if _, err := os.Stat(filepath.Join(dir, config.DefaultPath)); err == nil {
				t.Error("onprem.yaml was written although the overlays were refused")
			}
		})
	}
}

func TestUnpackConfigWithoutConfiguration(t *testing.T) {
	if _, err := UnpackConfig(t.TempDir(), map[string][]byte{OverlaysKey: overlayTar(t, "overlays/overlay-0/k.yaml")}); err == nil {
		t.Fatal("UnpackConfig of data without onprem.yaml succeeded")
	}
}

// StoreConfig creates the Secret once, leaves it alone while nothing
// changed, and updates it (data and annotations) when something did.
func TestStoreConfigCreatesThenUpdatesOnlyOnChange(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	in := &config.Installation{APIVersion: "onprem.dev/v1alpha1", Kind: "Installation"}
	in.Spec.Registry.PullSecret = "my-pull-secret"
	if err := StoreConfig(ctx, c, "platform", in, []string{"onprem-a-mongodb", "onprem-b-postgresql"}); err != nil {
		t.Fatal(err)
	}
	sec, err := c.CoreV1().Secrets("platform").Get(ctx, ConfigSecret, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := sec.Annotations[GeneratedSecretsAnnotation]; got != "onprem-a-mongodb,onprem-b-postgresql" {
		t.Errorf("generated annotation = %q", got)
	}
	if got := sec.Annotations[ReferencedSecretsAnnotation]; got != "my-pull-secret" {
		t.Errorf("referenced annotation = %q", got)
	}
	if len(sec.Data[ConfigKey]) == 0 {
		t.Error("no onprem.yaml in the Secret")
	}

	c.ClearActions()
	if err := StoreConfig(ctx, c, "platform", in, []string{"onprem-a-mongodb", "onprem-b-postgresql"}); err != nil {
		t.Fatal(err)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("an unchanged configuration was written again: %s", a.GetVerb())
		}
	}

	if err := StoreConfig(ctx, c, "platform", in, []string{"onprem-a-mongodb"}); err != nil {
		t.Fatal(err)
	}
	sec, _ = c.CoreV1().Secrets("platform").Get(ctx, ConfigSecret, metav1.GetOptions{})
	if got := sec.Annotations[GeneratedSecretsAnnotation]; got != "onprem-a-mongodb" {
		t.Errorf("after a change, generated annotation = %q", got)
	}
	if sec.Type != corev1.SecretTypeOpaque {
		t.Errorf("type %q", sec.Type)
	}
}
