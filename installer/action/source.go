// Package action is onprem's library API: one struct per verb, options as
// fields, and a Run method. The command layer (cmd/onprem) only fills these
// from flags; everything here is usable and tested without the CLI.
package action

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/sethvargo/go-envconfig"

	"onprem.dev/onprem/installer/bundle"
	"onprem.dev/onprem/installer/render"
	"onprem.dev/onprem/installer/signing"
	"onprem.dev/onprem/installer/state"

	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
)

// Source says where an installation's configuration comes from.
type Source struct {
	// ConfigPath is onprem.yaml.
	ConfigPath string
	// Overrides are the flags that override the file and the environment.
	Overrides config.Overrides
	// Lookup reads ONPREM_* variables (default: the process environment).
	Lookup envconfig.Lookuper
	// Releases are the known releases (default: the embedded ones).
	Releases *release.Set
	// Bundles are air-gapped bundles ('onprem bundle create'): each one's
	// release, with every image pinned by digest, takes the place of the
	// embedded one of the same version, and is rendered with the bundle's
	// own charts and manifests. Every image is then pulled from
	// spec.registry, which is required.
	Bundles []string
	// PublicKeys are files of public keys trusted to sign the bundles,
	// besides those the embedded releases name and spec.trust
	// (--public-key).
	PublicKeys []string
	// AllowUnsigned accepts a bundle that is unsigned or signed by a key
	// that is not trusted (--allow-unsigned): a warning is logged and the
	// operation's history records it. Without it such a bundle is refused.
	AllowUnsigned bool
}

// Loaded is a read, defaulted and validated configuration with its release.
type Loaded struct {
	Installation *config.Installation
	Source       *config.Source
	Release      *release.Release
	Releases     *release.Set

	// content holds the charts and manifests of the releases that came
	// from bundles, by version; the others use the embedded ones.
	content map[string]content
	bundles []*bundle.Bundle
}

// BundleUses says which bundles the releases came from and how each one's
// signature was judged, for the operation's history.
func (l *Loaded) BundleUses() []state.BundleUse {
	var out []state.BundleUse
	for _, b := range l.bundles {
		u := state.BundleUse{Release: b.Release().Version, File: filepath.Base(b.Path())}
		if p := b.Provenance(); p != nil {
			u.Signer, u.TrustedBy, u.Unverified = p.KeyID, p.TrustedBy, p.Unverified
		}
		out = append(out, u)
	}
	return out
}

// content is where one release's charts and manifests come from.
type content struct{ charts, manifests fs.FS }

// Charts returns the charts of a release version (nil: the embedded ones).
func (l *Loaded) Charts(version string) fs.FS { return l.content[version].charts }

// Manifests returns the kustomize tree of a release version (nil: the
// embedded one).
func (l *Loaded) Manifests(version string) fs.FS { return l.content[version].manifests }

// RenderOptions are the options to render the configured release: with
// its bundle's charts and manifests when it came from one.
func (l *Loaded) RenderOptions(set []string) render.Options {
	v := l.Release.Version
	return render.Options{Installation: l.Installation, Release: l.Release, Set: set, Charts: l.Charts(v), Manifests: l.Manifests(v)}
}

// Close releases the bundles.
func (l *Loaded) Close() {
	for _, b := range l.bundles {
		_ = b.Close()
	}
	l.bundles = nil
}

// Load reads the configuration (file < env < flags, then defaults),
// validates it against the known releases, and picks its release.
func (s Source) Load(ctx context.Context) (*Loaded, error) {
	set := s.Releases
	if set == nil {
		var err error
		if set, err = release.Embedded(); err != nil {
			return nil, err
		}
	}
	var opened []*bundle.Bundle
	var trust bundle.Trust
	cont := map[string]content{}
	if len(s.Bundles) > 0 {
		var err error
		// The keys are those of the embedded releases (never a bundle's
		// own manifest), the flags' and, once read, spec.trust's.
		if trust, err = s.trust(set); err != nil {
			return nil, err
		}
		opened, err = s.openBundles(ctx)
		if err != nil {
			return nil, err
		}
		var rels []*release.Release
		for _, b := range opened {
			rels = append(rels, b.Release())
			cont[b.Release().Version] = content{charts: b.Charts(), manifests: b.Manifests()}
		}
		set = set.With(rels...)
	}
	closeAll := func() {
		for _, b := range opened {
			_ = b.Close()
		}
	}
	lookup := s.Lookup
	if lookup == nil {
		lookup = envconfig.OsLookuper()
	}
	var components []string
	for _, r := range set.All() {
		for _, n := range r.ComponentNames() {
			if !slices.Contains(components, n) {
				components = append(components, n)
			}
		}
	}
	in, src, err := config.Load(ctx, config.LoadOptions{
		Path:      s.ConfigPath,
		Lookup:    lookup,
		Overrides: s.Overrides,
		Validate: config.ValidateOptions{KnownVersions: set.Versions(), KnownComponents: components,
			// Component values against their charts' schemas, with the
			// release's own charts (a bundle's, when it brings them).
			CheckValues: func(in *config.Installation) []config.ValuesProblem {
				rel, err := set.Get(in.Spec.Version)
				if err != nil {
					return nil // spec.version is reported by itself
				}
				return render.CheckValues(in, rel, cont[rel.Version].charts)
			}},
	})
	if errors.Is(err, fs.ErrNotExist) {
		closeAll()
		return nil, inputErr(err)
	}
	if err != nil {
		closeAll()
		return nil, err
	}
	rel, err := set.Get(in.Spec.Version)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("spec.version: %w", err)
	}
	if err := judgeBundles(opened, trust, in.Spec.Trust); err != nil {
		closeAll()
		return nil, err
	}
	if err := checkBundled(in, opened); err != nil {
		closeAll()
		return nil, inputErr(err)
	}
	return &Loaded{Installation: in, Source: src, Release: rel, Releases: set, content: cont, bundles: opened}, nil
}

// trust is the keyring before spec.trust is known: the keys the releases
// of set name (the embedded ones) and the files of --public-key.
func (s Source) trust(set *release.Set) (bundle.Trust, error) {
	ring, err := set.Keyring()
	if err != nil {
		return bundle.Trust{}, err
	}
	files, err := loadPublicKeys(s.PublicKeys)
	if err != nil {
		return bundle.Trust{}, err
	}
	return bundle.Trust{Keys: ring.With(files...), AllowUnsigned: s.AllowUnsigned}, nil
}

// loadPublicKeys reads the files of --public-key.
func loadPublicKeys(paths []string) (signing.Keyring, error) {
	return loadKeyFiles("--public-key", paths)
}

// loadKeyFiles reads the public key files given with flag.
func loadKeyFiles(flag string, paths []string) (signing.Keyring, error) {
	var ring signing.Keyring
	for _, p := range paths {
		pk, err := signing.LoadPublicKey(p)
		if err != nil {
			return nil, inputErr(fmt.Errorf("%s: %w", flag, err))
		}
		ring = ring.With(signing.Key{Origin: flag + " " + p, Public: pk})
	}
	return ring, nil
}

// judgeBundles checks every bundle's signature against trust and the
// operator's spec.trust. Refusals are input errors: the operator fixes
// them with a key or --allow-unsigned.
func judgeBundles(opened []*bundle.Bundle, trust bundle.Trust, spec []config.TrustedKey) error {
	keys, err := (&config.Spec{Trust: spec}).TrustedKeys()
	if err != nil {
		return inputErr(err) // validation reports it first
	}
	trust.Keys = trust.Keys.With(keys...)
	for _, b := range opened {
		if _, err := b.CheckTrust(trust); err != nil {
			return trustErr(err)
		}
	}
	return nil
}

// trustErr makes a refused signature an input error (exit 2): the fix is
// the operator's.
func trustErr(err error) error {
	var ue *bundle.UntrustedKeyError
	var se *bundle.SignatureError
	if errors.Is(err, bundle.ErrUnsigned) || errors.As(err, &ue) || errors.As(err, &se) {
		return inputErr(err)
	}
	return err
}

// openBundles opens and verifies every bundle's checksums; their
// signatures are judged once spec.trust is read (judgeBundles). Two
// bundles of one version are refused.
func (s Source) openBundles(ctx context.Context) ([]*bundle.Bundle, error) {
	opts := bundle.OpenOptions{DeferTrust: true}
	var out []*bundle.Bundle
	fail := func(err error) ([]*bundle.Bundle, error) {
		for _, b := range out {
			_ = b.Close()
		}
		return nil, err
	}
	seen := map[string]string{}
	for _, p := range s.Bundles {
		if _, err := os.Stat(p); err != nil {
			return fail(inputErr(fmt.Errorf("--bundle %s: %w", p, err)))
		}
		b, err := bundle.Open(ctx, p, opts)
		if err != nil {
			return fail(fmt.Errorf("--bundle %s: %w", p, err))
		}
		out = append(out, b)
		v := b.Release().Version
		if other, dup := seen[v]; dup {
			return fail(inputErr(fmt.Errorf("--bundle %s and %s both hold platform %s: give one", other, p, v)))
		}
		seen[v] = p
	}
	return out, nil
}

// checkBundled checks that a configuration can use the bundles' images:
// they are only in the private registry they were pushed to, under the
// platform path they were bundled from.
func checkBundled(in *config.Installation, bundles []*bundle.Bundle) error {
	if len(bundles) == 0 {
		return nil
	}
	if in.Spec.Registry.Host == "" {
		return errors.New("spec.registry.host: required when installing from a bundle: set it (and spec.registry.pathPrefix) to the registry the bundle was pushed to with 'onprem bundle push'")
	}
	for _, b := range bundles {
		if want := b.Metadata().PlatformImages; want != "" && want != in.Spec.Images.Platform {
			return fmt.Errorf("spec.images.platform is %q but bundle %s was made from %q, and its images were pushed under that path: set spec.images.platform: %q",
				in.Spec.Images.Platform, b.Path(), want, want)
		}
	}
	return nil
}
