package preflight

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"onprem.dev/onprem/installer/imagesig"
	"onprem.dev/onprem/installer/signing"
	"onprem.dev/onprem/internal/bounded"
)

// signaturesCheck checks, with spec.registry.requireSignatures, that every
// image the install pulls from the private registry has a cosign signature
// made by a trusted key.
func signaturesCheck() Check {
	return Check{
		ID:       "image-signatures",
		Title:    "With spec.registry.requireSignatures, every image in the private registry has a cosign signature by a trusted key",
		Severity: Blocking,
		Run:      runSignaturesCheck,
	}
}

// TrustedKeys is the keyring images and bundles are judged with: the keys
// the releases name and the operator's spec.trust.
func (e *Env) TrustedKeys() (signing.Keyring, error) {
	var ring signing.Keyring
	if e.Releases != nil {
		r, err := e.Releases.Keyring()
		if err != nil {
			return nil, err
		}
		ring = r
	}
	own, err := e.Installation.Spec.TrustedKeys()
	if err != nil {
		return nil, err
	}
	return ring.With(own...), nil
}

func runSignaturesCheck(ctx context.Context, env *Env) Outcome {
	if env == nil || env.Installation == nil {
		return connFail("the check could not run: no configuration was loaded", "run preflight with a valid onprem.yaml (-c onprem.yaml)")
	}
	reg := env.Installation.Spec.Registry
	if !reg.RequireSignatures {
		return Passed("image signatures are not required (spec.registry.requireSignatures is off)")
	}
	if reg.Host == "" || env.Release == nil {
		return connFail("the check could not run: spec.registry.requireSignatures needs spec.registry.host and a release", "set spec.registry.host, or remove requireSignatures")
	}
	keys, err := env.TrustedKeys()
	if err != nil {
		return connFail(fmt.Sprintf("the trusted keys do not parse: %v", err), "correct spec.trust ('onprem config validate' names the entry)")
	}
	if len(keys) == 0 {
		return connFail("no key is trusted to sign images: the releases name none and spec.trust is empty",
			"add the public key of whoever signs the images (the bundle's maker: bundle.pub) to spec.trust")
	}
	var nameOpts []name.Option
	if reg.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	registry, err := name.NewRegistry(reg.Host, nameOpts...)
	if err != nil {
		return connFail(fmt.Sprintf("spec.registry.host %q is not a registry host: %v", reg.Host, err), "set spec.registry.host to the registry's host and optional port")
	}
	needed, err := neededImages(env, reg.Host, reg.PathPrefix, nameOpts)
	if err != nil {
		return connFail(fmt.Sprintf("the check could not run: %v", err), "check spec.registry.host and spec.registry.pathPrefix")
	}
	keychain := authn.Keychain(authn.NewMultiKeychain())
	if reg.PullSecret != "" {
		kc, _, out := pullSecretKeychain(ctx, env, reg.PullSecret, registry)
		if out != nil {
			return *out
		}
		keychain = kc
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithTransport(registryTransport(reg.Insecure)),
		remote.WithAuthFromKeychain(keychain), remote.WithRetryBackoff(remote.Backoff{Steps: 1})}

	type result struct {
		signer  string // the trusted key that verified it
		problem string // why it is refused
		err     error  // why it could not be checked
	}
	results := make([]result, len(needed))
	interrupted := bounded.Each(ctx, len(needed), registryConcurrency, func(i int) {
		img := needed[i]
		d, err := imageDigest(img, opts)
		if err != nil {
			if isNotFound(err) {
				results[i].problem = "not in the registry (see the check registry)"
			} else {
				results[i].err = err
			}
			return
		}
		sigs, err := imagesig.Fetch(ctx, img.tag.Context(), d, opts...)
		if err != nil {
			results[i].err = err
			return
		}
		v, err := imagesig.Verify(sigs, d, keys)
		var nt *imagesig.NotTrustedError
		switch {
		case err == nil:
			results[i].signer = v.Key.ID()
		case errors.Is(err, imagesig.ErrNoSignature):
			results[i].problem = "no signature (no tag " + imagesig.Tag(d) + ")"
		case errors.As(err, &nt):
			results[i].problem = strings.Join(nt.Reasons, "; ")
		default:
			results[i].err = err
		}
	})

	if err := errors.Join(interrupted, ctx.Err()); err != nil {
		return connFail(fmt.Sprintf("the check was interrupted: %v", err), "run preflight again")
	}
	var refused, unchecked []string
	signers := map[string]int{}
	for i, r := range results {
		switch {
		case r.err != nil:
			if isUnauthorized(r.err) {
				return connFail(fmt.Sprintf("the registry %s refused to give the signature of %s: %v", reg.Host, needed[i].ref, r.err),
					"the check registry names the credentials' fix; the pull Secret's user needs pull access to every repository")
			}
			unchecked = append(unchecked, fmt.Sprintf("%s: %v", needed[i].ref, r.err))
		case r.problem != "":
			refused = append(refused, fmt.Sprintf("image %s (%s): %s", needed[i].name, needed[i].ref, r.problem))
		default:
			signers[r.signer]++
		}
	}
	sort.Strings(refused)
	sort.Strings(unchecked)
	if len(refused) > 0 {
		return Outcome{Result: Fail,
			Message: fmt.Sprintf("%d of the %d images have no valid signature by a trusted key in %s: %s", len(refused), len(needed), reg.Host, listSome(refused, 3)),
			Remediation: fmt.Sprintf("push them from a signed bundle ('onprem bundle push' attaches the bundle's image signatures); or sign each one yourself (for example 'cosign sign --key cosign.key --tlog-upload=false %s/...@DIGEST') and put the text of the public key in spec.trust (ed25519, or cosign's ECDSA P-256; see docs/air-gapped.md#image-signatures); or turn the check off with spec.registry.requireSignatures: false. Keys trusted now: %s",
				relocatedRoot(reg.Host, reg.PathPrefix), keys),
			Details: append(refused, unchecked...)}
	}
	if len(unchecked) > 0 {
		return Outcome{Result: Fail,
			Message:     fmt.Sprintf("the signatures of %d of the %d images could not be read from %s: %s", len(unchecked), len(needed), reg.Host, listSome(unchecked, 3)),
			Remediation: fmt.Sprintf("check that the registry %s is healthy and reachable, then run preflight again", reg.Host),
			Details:     unchecked}
	}
	var by []string
	for id, n := range signers {
		k, _ := keys.ByID(id)
		by = append(by, fmt.Sprintf("%d by %s", n, k))
	}
	sort.Strings(by)
	return Passed("all %d images in %s carry a valid signature by a trusted key (%s)", len(needed), relocatedRoot(reg.Host, reg.PathPrefix), strings.Join(by, ", "))
}

// imageDigest is the digest the image is pulled at: the one the release
// pins, else what its tag points to.
func imageDigest(img neededImage, opts []remote.Option) (v1.Hash, error) {
	if img.dig != nil {
		return v1.NewHash(img.dig.Identifier())
	}
	desc, err := remote.Head(img.tag, opts...)
	if err != nil {
		return v1.Hash{}, err
	}
	return desc.Digest, nil
}
