package bundle

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"onprem.dev/onprem/installer/images"
)

// TestBundleFromLayoutAndDockerArchive builds a bundle from an OCI layout
// (every image but one, one of them inside a multi-platform index) and a
// docker-save archive (the last one).
func TestBundleFromLayoutAndDockerArchive(t *testing.T) {
	f := newFixture(t, 16<<10, 4<<10)
	dir := t.TempDir()
	lp, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	last := f.rel.Images[len(f.rel.Images)-1]
	first := f.rel.Images[0]
	want := map[string]v1.Hash{}
	for _, img := range f.rel.Images {
		ref := images.Repository(img, f.platformImages) + ":" + img.Tag
		im := f.byRef[ref]
		want[img.Name], _ = im.Digest()
		switch img.Name {
		case last.Name:
			archive := filepath.Join(dir, "last.tar")
			tag, _ := name.NewTag(ref)
			if err := tarball.WriteToFile(archive, tag, im); err != nil {
				t.Fatal(err)
			}
			// docker-save archives hold uncompressed layers: the image read
			// back is compressed again, so its digest is the archive's.
			back, err := tarball.ImageFromPath(archive, nil)
			if err != nil {
				t.Fatal(err)
			}
			want[img.Name], _ = back.Digest()
			wantCfg, _ := im.ConfigName()
			if gotCfg, _ := back.ConfigName(); gotCfg != wantCfg {
				t.Fatalf("archive changed the config: %s, want %s", gotCfg, wantCfg)
			}
		case first.Name:
			// A multi-platform index: arm64 and amd64.
			arm := imageOf(t, randomLayer(t, 1024, 999))
			cf, _ := arm.ConfigFile()
			cf = cf.DeepCopy()
			cf.Architecture = "arm64"
			arm, _ = mutate.ConfigFile(arm, cf)
			idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
				mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
				mutate.IndexAddendum{Add: im, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
			)
			if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{annotationContainerd: ref})); err != nil {
				t.Fatal(err)
			}
		default:
			// Short references match too (docker.io/library/ implied).
			if err := lp.AppendImage(im, layout.WithAnnotations(map[string]string{annotationRefName: ref})); err != nil {
				t.Fatal(err)
			}
		}
	}
	src := Sources{
		ByName:  map[string]Source{last.Name: ArchiveSource(filepath.Join(dir, "last.tar"))},
		Default: LayoutSource(filepath.Join(dir, "oci"), nil),
	}
	out := filepath.Join(dir, "b.tar")
	if _, err := Create(context.Background(), CreateOptions{Release: f.rel, Output: out, Source: src, PlatformImages: f.platformImages}); err != nil {
		t.Fatal(err)
	}
	b, err := Open(context.Background(), out, OpenOptions{Trust: allowUnsigned})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, img := range b.Release().Images {
		if img.Digest != want[img.Name].String() {
			t.Errorf("%s: %s, want %s", img.Name, img.Digest, want[img.Name])
		}
	}

	// The layout source finds nothing for an unknown reference.
	_, err = LayoutSource(filepath.Join(dir, "oci"), nil).Image(context.Background(), ImageRequest{Name: "x", Reference: "example.com/nope:1"})
	if !errors.Is(err, ErrImageNotFound) {
		t.Errorf("unknown reference: %v", err)
	}
	_, err = ArchiveSource(filepath.Join(dir, "missing.tar")).Image(context.Background(), ImageRequest{Name: "x", Reference: "example.com/nope:1"})
	if !errors.Is(err, ErrImageNotFound) {
		t.Errorf("missing archive: %v", err)
	}
}

func TestKeychainFromDockerConfig(t *testing.T) {
	res := func(s string) authn.Resource {
		r, err := name.NewRegistry(s)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	cases := map[string]string{
		"config.json":       `{"auths":{"https://reg.local:5000/v1/":{"auth":"dXNlcjpwYXNz"}}}`,
		"dockercfg":         `{"reg.local:5000":{"username":"user","password":"pass"}}`,
		"secret yaml":       "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\ndata:\n  .dockerconfigjson: eyJhdXRocyI6eyJyZWcubG9jYWw6NTAwMCI6eyJhdXRoIjoiZFhObGNqcHdZWE56In19fQ==\n",
		"secret stringData": `{"kind":"Secret","type":"kubernetes.io/dockerconfigjson","stringData":{".dockerconfigjson":"{\"auths\":{\"reg.local:5000\":{\"username\":\"user\",\"password\":\"pass\"}}}"}}`,
	}
	for name, data := range cases {
		kc, err := KeychainFromDockerConfig([]byte(data))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		a, _ := kc.Resolve(res("reg.local:5000"))
		cfg, err := a.Authorization()
		if err != nil || cfg.Username != "user" || cfg.Password != "pass" {
			t.Errorf("%s: %+v %v", name, cfg, err)
		}
		a, _ = kc.Resolve(res("other.local"))
		if a != authn.Anonymous {
			t.Errorf("%s: other registry gets %v", name, a)
		}
	}
	for _, bad := range []string{"not json", `{"kind":"Secret","type":"Opaque","data":{}}`, `{}`} {
		if _, err := KeychainFromDockerConfig([]byte(bad)); err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), "panic") {
			t.Error(err)
		}
	}
}
