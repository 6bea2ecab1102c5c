//go:build linux

package action

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"onprem.dev/onprem/e2e/testcluster"
	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/sbom"
)

// debianImage is an image whose layer holds a dpkg database of two
// packages.
func debianImage(t *testing.T) v1.Image {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range []struct{ name, data string }{
		{"etc/os-release", "ID=debian\nVERSION_ID=\"12\"\n"},
		{"var/lib/dpkg/status", "Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nSource: glibc\nVersion: 2.36-9+deb12u9\n\nPackage: tzdata\nStatus: install ok installed\nArchitecture: all\nVersion: 2024b-0+deb12u1\n"},
	} {
		tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(e.data)), Typeflag: tar.TypeReg})
		tw.Write([]byte(e.data))
	}
	tw.Close()
	layer, err := tarball.LayerFromReader(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestSBOMOfTheInstalledPlatform catalogs what the pods of a namespace
// run, on a real API server, with the images in the CNCF distribution
// registry: each image by the digest the kubelet reports, even when its
// tag has moved since.
func TestSBOMOfTheInstalledPlatform(t *testing.T) {
	ctx := context.Background()
	c := testcluster.Start(t)
	host := testservers.Distribution(t)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "platform"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	push := func(ref string, img v1.Image) v1.Hash {
		t.Helper()
		r, err := name.ParseReference(ref, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(r, img); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		return d
	}
	api := host + "/onprem/codefresh/pipelines-api:2.8.0"
	running := push(api, debianImage(t))
	other, _ := random.Image(256, 1)
	push(host+"/onprem/library/redis:7.2.7", other)
	// The tag moves after the pod pulled it: the SBOM is of what runs.
	moved, _ := random.Image(256, 1)
	push(api, moved)

	pod := func(podName, app, image, imageID string) {
		t.Helper()
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: "platform", Labels: map[string]string{"app.kubernetes.io/name": app}},
			Spec: corev1.PodSpec{
				// Never scheduled: kwok would write its own status.
				NodeSelector:   map[string]string{"onprem.dev/nowhere": "true"},
				InitContainers: []corev1.Container{{Name: "wait", Image: host + "/onprem/library/redis:7.2.7"}},
				Containers:     []corev1.Container{{Name: "main", Image: image}},
			},
		}
		if _, err := c.Client.CoreV1().Pods("platform").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if imageID != "" {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				p, err := c.Client.CoreV1().Pods("platform").Get(ctx, podName, metav1.GetOptions{})
				if err != nil {
					return err
				}
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", Image: image, ImageID: imageID}}
				_, err = c.Client.CoreV1().Pods("platform").UpdateStatus(ctx, p, metav1.UpdateOptions{})
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	pod("pipelines-api-1", "pipelines-api", api, strings.TrimSuffix(api, ":2.8.0")+"@"+running.String())
	pod("pipelines-api-2", "pipelines-api", api, strings.TrimSuffix(api, ":2.8.0")+"@"+running.String())
	pod("redis-0", "redis", host+"/onprem/library/redis:7.2.7", "")

	s := &SBOM{Installed: true, Namespace: "platform", Insecure: true, Cluster: kube.Options{Kubeconfig: c.Kubeconfig}}
	res, err := s.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Images) != 2 {
		t.Fatalf("images: %+v", res.Images)
	}
	var apiInv, redisInv SBOMImage
	for _, i := range res.Images {
		switch i.Image {
		case "pipelines-api":
			apiInv = i
		case "redis":
			redisInv = i
		}
	}
	if apiInv.Inventory == nil || apiInv.Digest != running.String() || apiInv.Count()[sbom.TypeDeb] != 2 || strings.Join(apiInv.UsedBy, ",") != "pipelines-api" {
		t.Errorf("pipelines-api: %+v", apiInv)
	}
	if redisInv.Inventory == nil || strings.Join(redisInv.UsedBy, ",") != "pipelines-api,redis" {
		t.Errorf("redis (init container of the api pods, main of redis-0): %+v", redisInv)
	}
	var out bytes.Buffer
	if err := WriteSBOM(&out, SBOMSPDX, res); err != nil || !strings.Contains(out.String(), "pkg:deb/debian/libc6@2.36-9%2Bdeb12u9") {
		t.Errorf("spdx: %v %.400s", err, out.String())
	}

	for _, bad := range []*SBOM{
		{Installed: true, Bundle: "x.bundle"},
		{Installed: true, Namespace: "empty", Cluster: kube.Options{Kubeconfig: c.Kubeconfig}},
	} {
		var ie *InputError
		if _, err := bad.Run(ctx); !errors.As(err, &ie) {
			t.Errorf("%+v: %v, want an input error", bad, err)
		}
	}
}

func TestPinnedRef(t *testing.T) {
	for _, c := range []struct{ image, id, want string }{
		{"reg:5000/a/b:1.0", "reg:5000/a/b@sha256:abc", "reg:5000/a/b@sha256:abc"},
		{"reg:5000/a/b:1.0", "docker-pullable://reg:5000/a/b@sha256:abc", "reg:5000/a/b@sha256:abc"},
		{"reg:5000/a/b", "reg:5000/a/b@sha256:abc", "reg:5000/a/b@sha256:abc"},
		{"reg:5000/a/b@sha256:def", "reg:5000/a/b@sha256:abc", "reg:5000/a/b@sha256:def"},
		{"reg:5000/a/b:1.0", "sha256:0123", "reg:5000/a/b:1.0"},
		{"reg:5000/a/b:1.0", "", "reg:5000/a/b:1.0"},
	} {
		if got := pinnedRef(c.image, c.id); got != c.want {
			t.Errorf("pinnedRef(%q, %q) = %q, want %q", c.image, c.id, got, c.want)
		}
	}
}
