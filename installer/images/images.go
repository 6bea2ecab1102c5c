// Package images turns a release's images into the references the cluster
// pulls: the platform registry prefix for the platform's own images, digest
// pinning, and relocation to a private registry (air-gapped installs). The
// bundle push uses the same mapping, so what is pushed is what is pulled.
package images

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"onprem.dev/onprem/installer/release"
)

// Repository is the repository an image is published under: its own, or for
// a platform image, platformPrefix/repository.
func Repository(img release.Image, platformPrefix string) string {
	if img.Platform {
		return strings.TrimSuffix(platformPrefix, "/") + "/" + img.Repository
	}
	return img.Repository
}

// Reference is repository:tag, with @digest when the release pins one.
func Reference(img release.Image, platformPrefix string) string {
	ref := Repository(img, platformPrefix) + ":" + img.Tag
	if img.Digest != "" {
		ref += "@" + img.Digest
	}
	return ref
}

// Relocate maps a repository to the private registry: the source registry
// host is dropped and its path kept under host/prefix, so
// docker.io/library/redis becomes host/prefix/library/redis. Paths stay
// readable (an operator can tell what an image is) and distinct sources
// cannot collide unless they share a path.
func Relocate(repository, host, prefix string) (string, error) {
	repo, err := name.NewRepository(repository)
	if err != nil {
		return "", fmt.Errorf("image repository %q: %w", repository, err)
	}
	out := strings.TrimSuffix(host, "/")
	if p := strings.Trim(prefix, "/"); p != "" {
		out += "/" + p
	}
	out += "/" + repo.RepositoryStr()
	if _, err := name.NewRepository(out); err != nil {
		return "", fmt.Errorf("relocated repository %q: %w", out, err)
	}
	return out, nil
}
