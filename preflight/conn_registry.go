package preflight

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/imagesig"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/internal/bounded"
)

const (
	// registryConcurrency bounds the manifest requests in flight.
	registryConcurrency = 8
	// registryPingTimeout bounds the first contact with the registry.
	registryPingTimeout = 10 * time.Second
	// registryListed is how many missing images the message names.
	registryListed = 10
)

// registryCheck checks the private registry of an air-gapped install: it
// answers, the pull Secret authenticates, and every image the release
// needs is there under its relocated name (the mapping the render uses).
func registryCheck() Check {
	return Check{
		ID:       "registry",
		Title:    "The private registry answers, the pull Secret authenticates, and every image of the release is present at its relocated reference",
		Severity: Blocking,
		Run:      runRegistryCheck,
	}
}

// neededImage is one image the install pulls, at its relocated reference.
type neededImage struct {
	name string // the release's image name
	ref  string // host/prefix/repo:tag[@digest]
	tag  name.Reference
	dig  name.Reference // nil when the release pins no digest
}

func runRegistryCheck(ctx context.Context, env *Env) Outcome {
	if env == nil || env.Installation == nil {
		return connFail("the check could not run: no configuration was loaded", "run preflight with a valid onprem.yaml (-c onprem.yaml)")
	}
	reg := env.Installation.Spec.Registry
	if reg.Host == "" {
		return Passed("no private registry configured: images are pulled from their public registries")
	}
	if env.Release == nil {
		return connFail("the check could not run: no release manifest was loaded", "check spec.version in onprem.yaml and run preflight again")
	}
	var nameOpts []name.Option
	if reg.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	registry, err := name.NewRegistry(reg.Host, nameOpts...)
	if err != nil {
		return connFail(fmt.Sprintf("spec.registry.host %q is not a registry host: %v", reg.Host, err),
			"set spec.registry.host to the registry's host and optional port, e.g. registry.internal:5000")
	}
	needed, err := neededImages(env, reg.Host, reg.PathPrefix, nameOpts)
	if err != nil {
		return connFail(fmt.Sprintf("the check could not run: %v", err), "check spec.registry.host and spec.registry.pathPrefix")
	}

	tr := registryTransport(reg.Insecure)

	// 1. The registry answers.
	if err := pingRegistry(ctx, registry, tr); err != nil {
		rem := fmt.Sprintf("check spec.registry.host, that the registry runs and that this machine and the cluster's nodes can reach %s", reg.Host)
		if !reg.Insecure {
			rem += "; if it speaks plain HTTP or has a certificate this machine does not trust, set spec.registry.insecure: true"
		}
		return connFail(fmt.Sprintf("the registry %s does not answer: %v", reg.Host, err), rem)
	}

	// 2. The pull Secret.
	keychain := authn.Keychain(authn.NewMultiKeychain()) // anonymous
	secretRef := ""
	if reg.PullSecret != "" {
		kc, ref, out := pullSecretKeychain(ctx, env, reg.PullSecret, registry)
		if out != nil {
			return *out
		}
		keychain, secretRef = kc, ref
	}

	// 3. Every image, concurrently with a bound.
	opts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(tr), remote.WithAuthFromKeychain(keychain), remote.WithRetryBackoff(remote.Backoff{Steps: 1})}
	type result struct {
		missing []string // what is missing: "tag", "digest"
		authErr error
		err     error
	}
	results := make([]result, len(needed))
	interrupted := bounded.Each(ctx, len(needed), registryConcurrency, func(i int) {
		img := needed[i]
		refs := []name.Reference{img.tag}
		what := []string{"tag " + img.tag.Identifier()}
		if img.dig != nil {
			refs = append(refs, img.dig)
			what = append(what, "digest "+img.dig.Identifier())
		}
		for j, ref := range refs {
			_, err := remote.Head(ref, opts...)
			switch {
			case err == nil:
			case isNotFound(err):
				results[i].missing = append(results[i].missing, what[j])
			case isUnauthorized(err):
				results[i].authErr = err
				return
			default:
				results[i].err = err
				return
			}
		}
	})
	if interrupted != nil {
		return connFail(fmt.Sprintf("the check was interrupted: %v", interrupted), "run preflight again")
	}

	var missing, unchecked []string
	var authErr error
	for i, r := range results {
		switch {
		case r.authErr != nil:
			authErr = r.authErr
		case r.err != nil:
			unchecked = append(unchecked, fmt.Sprintf("%s: %v", needed[i].ref, r.err))
		case len(r.missing) > 0:
			missing = append(missing, fmt.Sprintf("%s (%s missing)", needed[i].ref, strings.Join(r.missing, ", ")))
		}
	}
	if authErr != nil {
		if secretRef == "" {
			return connFail(fmt.Sprintf("the registry %s requires credentials, and spec.registry.pullSecret is not set: %v", reg.Host, authErr),
				fmt.Sprintf("create a kubernetes.io/dockerconfigjson Secret in namespace %s with credentials for %s (kubectl create secret docker-registry NAME --docker-server=%s ...) and name it in spec.registry.pullSecret",
					connNamespace(env.Installation), reg.Host, reg.Host))
		}
		return connFail(fmt.Sprintf("the registry %s refused the credentials in Secret %s: %v", reg.Host, secretRef, authErr),
			fmt.Sprintf("correct the username and password for %s in Secret %s; that user needs pull access to every repository under %s", reg.Host, secretRef, relocatedRoot(reg.Host, reg.PathPrefix)))
	}
	sort.Strings(missing)
	sort.Strings(unchecked)
	if len(missing) > 0 {
		return Outcome{Result: Fail,
			Message: fmt.Sprintf("%d of the %d images that release %s needs are missing from %s: %s", len(missing), len(needed), env.Release.Version, reg.Host, listSome(missing, registryListed)),
			Remediation: fmt.Sprintf("push the release's images to %s: 'onprem bundle push' (coming) copies them from the release bundle; until then mirror each listed image to exactly the reference shown (e.g. crane copy or skopeo copy from the upstream image)",
				relocatedRoot(reg.Host, reg.PathPrefix)),
			Details: append(missing, unchecked...)}
	}
	if len(unchecked) > 0 {
		return Outcome{Result: Fail,
			Message:     fmt.Sprintf("%d of the %d images could not be checked in %s: %s", len(unchecked), len(needed), reg.Host, listSome(unchecked, 3)),
			Remediation: fmt.Sprintf("check that the registry %s is healthy and reachable, then run preflight again", reg.Host),
			Details:     unchecked}
	}
	how := "anonymously"
	if secretRef != "" {
		how = "with the credentials in Secret " + secretRef
	}
	return Passed("the registry %s has all %d images of release %s under %s (checked %s)", reg.Host, len(needed), env.Release.Version, relocatedRoot(reg.Host, reg.PathPrefix), how)
}

func relocatedRoot(host, prefix string) string {
	if p := strings.Trim(prefix, "/"); p != "" {
		return host + "/" + p
	}
	return host
}

func listSome(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(items[:n], ", "), len(items)-n)
}

// neededImages lists the release's images at their relocated references:
// those of the rendered components when a render is at hand, else every
// image of the release.
func neededImages(env *Env, host, prefix string, opts []name.Option) ([]neededImage, error) {
	rel := env.Release
	use := map[string]bool{}
	if env.Rendered != nil {
		for _, rc := range env.Rendered.Components {
			c, ok := rel.Component(rc.Name)
			if !ok {
				continue
			}
			for _, img := range c.Images {
				use[img] = true
			}
		}
	}
	platform := env.Installation.Spec.Images.Platform
	if platform == "" {
		platform = "quay.io/codefresh"
	}
	var out []neededImage
	seen := map[string]bool{}
	for _, img := range rel.Images {
		if len(use) > 0 && !use[img.Name] {
			continue
		}
		n, err := relocatedImage(img, platform, host, prefix, opts)
		if err != nil {
			return nil, err
		}
		if !seen[n.ref] {
			seen[n.ref] = true
			out = append(out, n)
		}
	}
	return out, nil
}

// relocatedImage maps one release image the way the render does:
// images.Reference for the reference, images.Relocate for its repository.
func relocatedImage(img release.Image, platform, host, prefix string, opts []name.Option) (neededImage, error) {
	repo := images.Repository(img, platform)
	ref := images.Reference(img, platform)
	to, err := images.Relocate(repo, host, prefix)
	if err != nil {
		return neededImage{}, err
	}
	n := neededImage{name: img.Name, ref: to + strings.TrimPrefix(ref, repo)}
	if n.tag, err = name.NewTag(to+":"+img.Tag, opts...); err != nil {
		return neededImage{}, fmt.Errorf("image %s: %w", img.Name, err)
	}
	if img.Digest != "" {
		if n.dig, err = name.NewDigest(to+"@"+img.Digest, opts...); err != nil {
			return neededImage{}, fmt.Errorf("image %s: %w", img.Name, err)
		}
	}
	return n, nil
}

// registryTransport is the default transport; with insecure, certificates
// are not verified (the registry may also speak plain HTTP).
func registryTransport(insecure bool) http.RoundTripper {
	t := images.Transport(insecure)
	t.ResponseHeaderTimeout = 15 * time.Second
	return t
}

// pingRegistry sends GET /v2/ (HTTPS, then HTTP for an insecure
// registry): any answer of a registry, 200 or 401, is a pass.
func pingRegistry(ctx context.Context, reg name.Registry, tr http.RoundTripper) error {
	ctx, cancel := context.WithTimeout(ctx, registryPingTimeout)
	defer cancel()
	schemes := []string{"https"}
	if reg.Scheme() == "http" {
		schemes = append(schemes, "http")
	}
	var errs []error
	for _, scheme := range schemes {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://"+reg.RegistryStr()+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("no answer within %s: %w", registryPingTimeout, err)
			}
			errs = append(errs, err)
			continue
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK, http.StatusUnauthorized, http.StatusForbidden:
			return nil
		}
		errs = append(errs, fmt.Errorf("%s://%s/v2/ answered %s: not a container registry (OCI distribution API)", scheme, reg.RegistryStr(), resp.Status))
	}
	return errors.Join(errs...)
}

func isNotFound(err error) bool { return imagesig.IsNotFound(err) }

func isUnauthorized(err error) bool {
	var te *transport.Error
	if errors.As(err, &te) {
		if te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden {
			return true
		}
		for _, d := range te.Errors {
			switch d.Code {
			case transport.UnauthorizedErrorCode, transport.DeniedErrorCode:
				return true
			}
		}
	}
	return false
}

// dockerConfig is the content of .dockerconfigjson.
type dockerConfig struct {
	Auths map[string]struct {
		Username      string `json:"username"`
		Password      string `json:"password"`
		Auth          string `json:"auth"`
		IdentityToken string `json:"identitytoken"`
		RegistryToken string `json:"registrytoken"`
	} `json:"auths"`
}

// registryKey normalizes a key of "auths": a host, or a URL
// (https://host/v1/) as docker login writes for some registries.
func registryKey(k string) string {
	k = strings.TrimSpace(k)
	if i := strings.Index(k, "://"); i >= 0 {
		k = k[i+3:]
	}
	if i := strings.Index(k, "/"); i >= 0 {
		k = k[:i]
	}
	return strings.ToLower(k)
}

// hostKeychain answers the Secret's credentials for one registry and
// anonymous for every other.
type hostKeychain struct {
	host string
	auth authn.Authenticator
}

func (k hostKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if strings.EqualFold(r.RegistryStr(), k.host) {
		return k.auth, nil
	}
	return authn.Anonymous, nil
}

// pullSecretKeychain reads the pull Secret and builds a keychain for the
// registry from it; a non-nil Outcome is the failure.
func pullSecretKeychain(ctx context.Context, env *Env, secretName string, reg name.Registry) (authn.Keychain, string, *Outcome) {
	ns := connNamespace(env.Installation)
	ref := ns + "/" + secretName
	createHelp := fmt.Sprintf("kubectl -n %s create secret docker-registry %s --docker-server=%s --docker-username=... --docker-password=...", ns, secretName, reg.RegistryStr())
	if env.Cluster == nil || env.Cluster.Client == nil {
		o := connFail(fmt.Sprintf("the check could not run: no cluster connection to read the pull Secret %s", ref),
			"connect onprem to the platform's cluster (--kubeconfig, --context) and run preflight again")
		return nil, "", &o
	}
	sec, err := env.Secret(ctx, ns, secretName)
	switch {
	case apierrors.IsNotFound(err):
		o := connFail(fmt.Sprintf("the pull Secret %s (spec.registry.pullSecret) does not exist", ref),
			"create it before installing: "+createHelp)
		return nil, "", &o
	case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
		o := connFail(fmt.Sprintf("the check could not run: not allowed to read the pull Secret %s: %v", ref, err),
			fmt.Sprintf("run onprem with an identity that may get secrets in namespace %s (the install needs it too)", ns))
		return nil, "", &o
	case err != nil:
		o := connFail(fmt.Sprintf("the check could not run: reading the pull Secret %s failed: %v", ref, err),
			"check the connection to the cluster and run preflight again")
		return nil, "", &o
	}
	if sec.Type != corev1.SecretTypeDockerConfigJson {
		o := connFail(fmt.Sprintf("the pull Secret %s has type %q; the kubelet only uses type %s", ref, sec.Type, corev1.SecretTypeDockerConfigJson),
			"recreate it as a docker-registry Secret: "+createHelp)
		return nil, "", &o
	}
	var cfg dockerConfig
	if err := json.Unmarshal(sec.Data[corev1.DockerConfigJsonKey], &cfg); err != nil {
		o := connFail(fmt.Sprintf("the pull Secret %s: %s is not valid JSON: %v", ref, corev1.DockerConfigJsonKey, err),
			"recreate it: "+createHelp)
		return nil, "", &o
	}
	var hosts []string
	for k, a := range cfg.Auths {
		hosts = append(hosts, k)
		if registryKey(k) != strings.ToLower(reg.RegistryStr()) {
			continue
		}
		ac := authn.AuthConfig{Username: a.Username, Password: a.Password, Auth: a.Auth, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
		if ac.Auth != "" && ac.Username == "" {
			if dec, err := base64.StdEncoding.DecodeString(ac.Auth); err == nil {
				if u, p, ok := strings.Cut(string(dec), ":"); ok {
					ac.Username, ac.Password, ac.Auth = u, p, ""
				}
			}
		}
		return hostKeychain{host: reg.RegistryStr(), auth: authn.FromConfig(ac)}, ref, nil
	}
	sort.Strings(hosts)
	o := connFail(fmt.Sprintf("the pull Secret %s has no credentials for %s (it has: %s)", ref, reg.RegistryStr(), strings.Join(hosts, ", ")),
		fmt.Sprintf("add an entry for %s to its .dockerconfigjson, or recreate it: %s", reg.RegistryStr(), createHelp))
	return nil, "", &o
}
