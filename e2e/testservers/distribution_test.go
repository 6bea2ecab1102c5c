//go:build linux

package testservers

import (
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

func TestDistributionStoresImagesOnDiskPerRepository(t *testing.T) {
	srv := StartDistribution(t)
	img, err := random.Image(1024, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := name.NewTag(srv.Host + "/mirror/library/redis:7")
	if err := remote.Write(ref, img, remote.WithContext(ctx(t))); err != nil {
		t.Fatal(err)
	}
	got, err := remote.Image(ref, remote.WithContext(ctx(t)))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := img.Digest()
	if d, _ := got.Digest(); d != want {
		t.Errorf("pulled %s, pushed %s", d, want)
	}
	// The layers are files of the filesystem storage.
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	var found bool
	filepath.WalkDir(filepath.Join(srv.Dir, "storage"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "data" && strings.Contains(p, ld.Hex) {
			found = true
		}
		return nil
	})
	if !found {
		t.Errorf("layer %s not stored under %s", ld, srv.Dir)
	}
	// Blobs belong to repositories: another repository does not see the
	// layer until it is mounted or uploaded there (unlike Registry).
	for repo, want := range map[string]int{"mirror/library/redis": http.StatusOK, "mirror/library/other": http.StatusNotFound} {
		resp, err := http.Head("http://" + srv.Host + "/v2/" + repo + "/blobs/" + ld.String())
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("HEAD the layer in %s: %s, want %d", repo, resp.Status, want)
		}
	}
	srv.Stop()
	if _, err := http.Get("http://" + srv.Host + "/v2/"); err == nil {
		t.Error("still answering after Stop")
	}
}
