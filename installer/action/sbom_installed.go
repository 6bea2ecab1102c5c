package action

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"onprem.dev/onprem/installer/bundle"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/sbom"
	"onprem.dev/onprem/installer/state"
	"onprem.dev/onprem/internal/bounded"
)

// runningImage is one image the platform's pods run, and who runs it.
type runningImage struct {
	ref   string // what is pulled: repository@digest when the pod says, else its reference
	users []string
}

// runInstalled catalogs the images the pods of the platform namespace
// run, each read from the registry it is pulled from, by the digest the
// kubelet reports when there is one.
func (s *SBOM) runInstalled(ctx context.Context) (*SBOMResult, error) {
	ns := s.Namespace
	if ns == "" {
		ns = "onprem"
	}
	kc := authn.Keychain(authn.DefaultKeychain)
	if s.DockerConfig != "" {
		k, err := readBundleDockerConfig(s.DockerConfig)
		if err != nil {
			return nil, err
		}
		kc = k
	}
	cl, err := connect(ctx, s.Conn, s.Cluster)
	if err != nil {
		return nil, err
	}
	pods, err := cl.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing the pods of namespace %s: %w", ns, err)
	}
	running := runningImages(pods.Items)
	if len(running) == 0 {
		return nil, inputErr(fmt.Errorf("no pod runs in namespace %s: is the platform installed there? (--namespace)", ns))
	}
	st, err := state.NewStore(cl.Client, ns).Load(ctx)
	if err != nil {
		return nil, err
	}
	version := st.Version
	if version == "" {
		version = "unknown"
	}

	tr := images.Transport(s.Insecure)
	var nopts []name.Option
	if s.Insecure {
		nopts = append(nopts, name.Insecure)
	}
	ropts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithTransport(tr), remote.WithPlatform(defaultSBOMPlatform)}
	invs := make([]*sbom.Inventory, len(running))
	errs := make([]error, len(running))
	interrupted := bounded.Each(ctx, len(running), 4, func(i int) {
		invs[i], errs[i] = catalogRunning(ctx, running[i], nopts, ropts)
	})
	if err := errors.Join(interrupted, errors.Join(errs...)); err != nil {
		return nil, err
	}
	res := &SBOMResult{Release: version, Created: time.Now().UTC().Truncate(time.Second)}
	for i, inv := range invs {
		if len(s.Images) == 0 || slices.Contains(s.Images, inv.Image) {
			res.Images = append(res.Images, SBOMImage{Inventory: inv, UsedBy: running[i].users})
		}
	}
	if len(res.Images) == 0 {
		return nil, inputErr(fmt.Errorf("--image: no running image is called %s", strings.Join(s.Images, ", ")))
	}
	return res, nil
}

// defaultSBOMPlatform is picked from multi-platform images.
var defaultSBOMPlatform = bundle.DefaultPlatform

// catalogRunning reads one running image from its registry and catalogs it.
func catalogRunning(ctx context.Context, ri runningImage, nopts []name.Option, ropts []remote.Option) (*sbom.Inventory, error) {
	ref, err := name.ParseReference(ri.ref, nopts...)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", ri.ref, err)
	}
	img, err := remote.Image(ref, ropts...)
	if err != nil {
		return nil, fmt.Errorf("image %s (run by %s): reading it from its registry: %w (credentials: --docker-config; a registry on plain HTTP or with a certificate this machine does not trust: --insecure)", ri.ref, strings.Join(ri.users, ", "), err)
	}
	return sbom.Catalog(ctx, path.Base(ref.Context().RepositoryStr()), ri.ref, img)
}

// runningImages lists the images of the pods' containers (init ones
// included), each once, with the components that run it (the label
// app.kubernetes.io/name, else the pod's name). The digest the kubelet
// resolved (status imageID) pins a reference given by tag.
func runningImages(pods []corev1.Pod) []runningImage {
	byRef := map[string]*runningImage{}
	for _, p := range pods {
		who := p.Labels["app.kubernetes.io/name"]
		if who == "" {
			who = p.Name
		}
		ids := map[string]string{}
		for _, cs := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			ids[cs.Name] = cs.ImageID
		}
		for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
			ref := pinnedRef(c.Image, ids[c.Name])
			ri := byRef[ref]
			if ri == nil {
				ri = &runningImage{ref: ref}
				byRef[ref] = ri
			}
			if !slices.Contains(ri.users, who) {
				ri.users = append(ri.users, who)
			}
		}
	}
	out := make([]runningImage, 0, len(byRef))
	for _, ri := range byRef {
		sort.Strings(ri.users)
		out = append(out, *ri)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ref < out[j].ref })
	return out
}

// pinnedRef is image pinned to the digest of imageID (as the kubelet
// reports it: "docker-pullable://repo@sha256:...", "repo@sha256:..."),
// when image does not name one already.
func pinnedRef(image, imageID string) string {
	repo, _, pinned := images.SplitReference(image)
	_, _, digest := images.SplitReference(imageID)
	if pinned != "" || !strings.HasPrefix(digest, "sha256:") {
		return image
	}
	return repo + "@" + digest
}
