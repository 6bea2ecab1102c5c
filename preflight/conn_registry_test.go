//go:build linux

package preflight

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"

	"onprem.dev/onprem/e2e/testservers"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

const registryYAML = `apiVersion: onprem.dev/v1alpha1
kind: Installation
spec:
  version: 2.8.0
  domain: ci.example.com
  registry:
    host: registry.invalid:5000
    pathPrefix: mirror
    pullSecret: pull
    insecure: true
`

// pushRelease pushes a small random image to the relocated reference of
// every image of rel (the mapping the render uses), except those named in
// skip, and returns the digests pushed, by image name.
func pushRelease(t *testing.T, rel *release.Release, platform, host, prefix string, auth authn.Authenticator, skip map[string]bool) map[string]string {
	t.Helper()
	var mu sync.Mutex
	digests := map[string]string{}
	var wg sync.WaitGroup
	errs := make(chan error, len(rel.Images))
	for _, img := range rel.Images {
		if skip[img.Name] {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			to, err := images.Relocate(images.Repository(img, platform), host, prefix)
			if err != nil {
				errs <- err
				return
			}
			ref, err := name.NewTag(to+":"+img.Tag, name.Insecure)
			if err != nil {
				errs <- err
				return
			}
			ri, err := random.Image(256, 1)
			if err != nil {
				errs <- err
				return
			}
			if err := remote.Write(ref, ri, remote.WithAuth(auth)); err != nil {
				errs <- fmt.Errorf("push %s: %w", ref, err)
				return
			}
			d, _ := ri.Digest()
			mu.Lock()
			digests[img.Name] = d.String()
			mu.Unlock()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return digests
}

func dockerConfigJSON(server, user, password string) string {
	b, _ := json.Marshal(map[string]any{"auths": map[string]any{server: map[string]string{
		"username": user, "password": password,
		"auth": base64.StdEncoding.EncodeToString([]byte(user + ":" + password)),
	}}})
	return string(b)
}

// TestRegistryCheck runs the registry check against go-containerregistry's
// registry with basic auth on loopback, with the pull Secret read from a
// real API server: pass, and every failure mode.
func TestRegistryCheck(t *testing.T) {
	t.Parallel() // its own cluster
	env := connTestEnv(t, registryYAML)
	host := testservers.Registry(t, testservers.WithBasicAuth("puller", "pull-s3cret"))
	auth := &authn.Basic{Username: "puller", Password: "pull-s3cret"}
	platform := env.Installation.Spec.Images.Platform
	rel := env.Release
	n := len(rel.Images)

	digests := pushRelease(t, rel, platform, host, "mirror", auth, nil)
	var skip = map[string]bool{}
	for _, img := range rel.Images[:12] {
		skip[img.Name] = true
	}
	pushRelease(t, rel, platform, host, "partial", auth, skip)

	withRegistry := func(mut func(r *config.Registry)) *Env {
		in := *env.Installation
		in.Spec.Registry = config.Registry{Host: host, PathPrefix: "mirror", PullSecret: "pull", Insecure: true}
		if mut != nil {
			mut(&in.Spec.Registry)
		}
		e := *env
		e.Installation = &in
		return &e
	}
	goodSecret := func() {
		connPutSecret(t, env, "pull", corev1.SecretTypeDockerConfigJson, map[string]string{".dockerconfigjson": dockerConfigJSON(host, "puller", "pull-s3cret")})
	}
	check := registryCheck()
	if check.ID != "registry" || check.Severity != Blocking {
		t.Fatalf("%+v", check)
	}

	t.Run("no registry", func(t *testing.T) {
		o := connRunCheck(t, withRegistry(func(r *config.Registry) { *r = config.Registry{} }), check)
		connExpect(t, o, Pass, "no private registry configured")
	})
	t.Run("all images present", func(t *testing.T) {
		goodSecret()
		o := connRunCheck(t, withRegistry(nil), check)
		connExpect(t, o, Pass, host, fmt.Sprintf("all %d images", n), "Secret onprem/pull")
	})
	t.Run("secret keyed by URL", func(t *testing.T) {
		connPutSecret(t, env, "pull", corev1.SecretTypeDockerConfigJson, map[string]string{".dockerconfigjson": dockerConfigJSON("https://"+host+"/v1/", "puller", "pull-s3cret")})
		connExpect(t, connRunCheck(t, withRegistry(nil), check), Pass, "all")
	})
	t.Run("missing images", func(t *testing.T) {
		goodSecret()
		o := connRunCheck(t, withRegistry(func(r *config.Registry) { r.PathPrefix = "partial" }), check)
		connExpect(t, o, Fail, fmt.Sprintf("12 of the %d images", n), host+"/partial/", "and 2 more", "|", "onprem bundle push", "mirror")
		if len(o.Details) != 12 {
			t.Errorf("details list %d images, want 12: %v", len(o.Details), o.Details)
		}
		details := strings.Join(o.Details, "\n")
		for _, img := range rel.Images[:12] {
			to, _ := images.Relocate(images.Repository(img, platform), host, "partial")
			if !strings.Contains(details, to+":"+img.Tag+" (tag "+img.Tag+" missing)") {
				t.Errorf("details do not name %s:%s: %s", to, img.Tag, details)
			}
		}
	})
	t.Run("only the rendered components' images", func(t *testing.T) {
		goodSecret()
		e := withRegistry(func(r *config.Registry) { r.PathPrefix = "partial" })
		// Only components whose images were all pushed under partial/.
		var comps []*render.Component
		for _, c := range rel.Components {
			ok := true
			for _, img := range c.Images {
				ok = ok && !skip[img]
			}
			if ok {
				comps = append(comps, &render.Component{Name: c.Name})
			}
		}
		if len(comps) == 0 {
			t.Fatal("no component has all its images pushed")
		}
		e.Rendered = &render.Result{Components: comps}
		connExpect(t, connRunCheck(t, e, check), Pass, "all")
	})
	t.Run("pinned digests", func(t *testing.T) {
		goodSecret()
		pinned := *rel
		pinned.Images = append([]release.Image(nil), rel.Images...)
		pinned.Images[0].Digest = digests[pinned.Images[0].Name]
		e := withRegistry(nil)
		e.Release = &pinned
		connExpect(t, connRunCheck(t, e, check), Pass, "all")

		pinned.Images[1].Digest = "sha256:" + strings.Repeat("ab", 32)
		o := connRunCheck(t, e, check)
		connExpect(t, o, Fail, "1 of the", "@sha256:abab", "digest sha256:abab", "missing")
	})
	t.Run("wrong password", func(t *testing.T) {
		connPutSecret(t, env, "pull", corev1.SecretTypeDockerConfigJson, map[string]string{".dockerconfigjson": dockerConfigJSON(host, "puller", "wrong")})
		o := connRunCheck(t, withRegistry(nil), check)
		connExpect(t, o, Fail, "refused the credentials in Secret onprem/pull", "|", "username and password")
	})
	t.Run("no pull secret configured", func(t *testing.T) {
		o := connRunCheck(t, withRegistry(func(r *config.Registry) { r.PullSecret = "" }), check)
		connExpect(t, o, Fail, "requires credentials", "spec.registry.pullSecret is not set", "|", "docker-registry")
	})
	t.Run("secret for another registry", func(t *testing.T) {
		connPutSecret(t, env, "pull", corev1.SecretTypeDockerConfigJson, map[string]string{".dockerconfigjson": dockerConfigJSON("other.example.com", "puller", "pull-s3cret")})
		o := connRunCheck(t, withRegistry(nil), check)
		connExpect(t, o, Fail, "no credentials for "+host, "other.example.com")
	})
	t.Run("secret of the wrong type", func(t *testing.T) {
		connPutSecret(t, env, "pull", corev1.SecretTypeOpaque, map[string]string{".dockerconfigjson": dockerConfigJSON(host, "puller", "pull-s3cret")})
		o := connRunCheck(t, withRegistry(nil), check)
		connExpect(t, o, Fail, `type "Opaque"`, "kubernetes.io/dockerconfigjson")
	})
	t.Run("missing secret", func(t *testing.T) {
		connDeleteSecret(t, env, "pull")
		o := connRunCheck(t, withRegistry(nil), check)
		connExpect(t, o, Fail, "pull Secret onprem/pull", "does not exist", "|", "create secret docker-registry pull")
	})
	t.Run("no permission to read the secret", func(t *testing.T) {
		goodSecret()
		o := connRunCheck(t, connAsNobody(t, withRegistry(nil)), check)
		connExpect(t, o, Fail, "could not run", "not allowed to read the pull Secret onprem/pull")
	})
	t.Run("unreachable registry", func(t *testing.T) {
		free := "127.0.0.1:" + strconv.Itoa(testservers.FreePort(t))
		o := connRunCheck(t, withRegistry(func(r *config.Registry) { r.Host = free }), check)
		connExpect(t, o, Fail, "the registry "+free+" does not answer", "connection refused", "|", "spec.registry.host")
	})
	t.Run("anonymous registry", func(t *testing.T) {
		open := testservers.Registry(t)
		pushRelease(t, rel, platform, open, "", authn.Anonymous, nil)
		o := connRunCheck(t, withRegistry(func(r *config.Registry) { *r = config.Registry{Host: open, Insecure: true} }), check)
		connExpect(t, o, Pass, "all", "anonymously")
	})
}
