package action

import (
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"onprem.dev/onprem/installer/chartfetch"
	"onprem.dev/onprem/installer/sbom"
	"onprem.dev/onprem/installer/signing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"

	"onprem.dev/onprem/installer/bundle"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/render"
)

// The bundle verbs (onprem bundle create, inspect, verify, push, keygen).
// Each checks what it is given first: a missing or unreadable file, a bad
// flag value, an image name the release does not have is an *InputError,
// and nothing is written. Error messages name the command-line flag that
// each field is filled from. Progress is reported through the Progress
// fields; nothing here prints.

// DefaultBundlePlatform is the platform picked from multi-platform images
// when BundleCreate.Platform is empty.
const DefaultBundlePlatform = "linux/amd64"

// BundleCreate writes a bundle of one platform release.
type BundleCreate struct {
	// Source, when its ConfigPath is set (-c), gives the release
	// (spec.version, which Version overrides) and where the platform's
	// own images are published (spec.images.platform). Without
	// ConfigPath, the release is Version among Source.Releases (default:
	// the embedded releases).
	Source
	// Version is the platform version to bundle (--version).
	Version string
	// Output is the bundle file to write (-o; required).
	Output string
	// Platform is picked from multi-platform images: os/arch[/variant]
	// (--platform; default linux/amd64).
	Platform string
	// OCILayout, when set, is an OCI layout folder that every image not in
	// ImageSources is read from, found by its reference annotation
	// (--oci-layout). Otherwise images come from their registries.
	OCILayout string
	// ImageSources are NAME=PATH (--image-source): the release image NAME
	// is read from PATH, a docker-archive tarball or an OCI layout folder
	// (a NAME given twice: the last one counts).
	ImageSources []string
	// DockerConfig is a docker config.json or a dockerconfigjson Secret
	// with the source registries' credentials (--docker-config; default:
	// the user's docker config).
	DockerConfig string
	// Insecure lets the source registries use plain HTTP or untrusted
	// certificates (--insecure).
	Insecure bool
	// KeyPath is the private key that signs the bundle (--key; default:
	// bundle.key in DefaultKeyDir, where 'onprem bundle keygen' writes it).
	// Without a key the bundle is refused unless Unsigned is set.
	KeyPath string
	// Unsigned writes a bundle without a signature (--unsigned): every
	// command that takes it then refuses it unless told --allow-unsigned.
	Unsigned bool
	// SourcePublicKeys are public key files of the images' publishers
	// (--source-public-key): an image whose source registry holds cosign
	// signatures, none of them made by one of these keys, is refused.
	// Without them, the source's signatures are carried unverified.
	SourcePublicKeys []string
	// Concurrency bounds the images resolved at once (default 4).
	Concurrency int
	// Progress receives byte counts while blobs are copied.
	Progress bundle.ProgressFunc
	// RuntimeChartRepository replaces the release's runtime chart
	// repository (a mirror of it), and RuntimeChart tunes its download.
	RuntimeChartRepository string
	RuntimeChart           chartfetch.Options
}

// Run checks the options, finds the release and every image, and writes
// the bundle. The file appears complete or not at all.
func (c *BundleCreate) Run(ctx context.Context) (*bundle.CreateResult, error) {
	if c.Output == "" {
		return nil, inputErr(errors.New("-o FILE: where to write the bundle is required"))
	}
	key, err := c.signingKey()
	if err != nil {
		return nil, err
	}
	sourceKeys, err := loadKeyFiles("--source-public-key", c.SourcePublicKeys)
	if err != nil {
		return nil, err
	}
	plat, err := parseBundlePlatform(c.Platform)
	if err != nil {
		return nil, err
	}
	rel, platformImages, err := c.release(ctx)
	if err != nil {
		return nil, err
	}
	src, err := c.sources(rel, plat)
	if err != nil {
		return nil, err
	}
	opts := bundle.CreateOptions{
		Release:        rel,
		Output:         c.Output,
		Source:         src,
		PlatformImages: platformImages,
		Platform:       plat,
		Concurrency:    c.Concurrency,
		Progress:       c.Progress,

		RuntimeChartRepository: c.RuntimeChartRepository,
		RuntimeChart:           c.RuntimeChart,
		// Every image the charts render with the release's values, the
		// runtime chart's included: not a list kept by hand.
		RenderedImages: func(ctx context.Context, runtimeChart *chartv2.Chart) ([]string, error) {
			return render.ReleaseImages(ctx, render.ImageOptions{Release: rel, PlatformImages: platformImages, RuntimeChart: runtimeChart})
		},
	}
	opts.SigningKey = key
	opts.SourceKeys = sourceKeys
	opts.SBOMCache = sbom.DefaultLayerCache()
	res, err := bundle.Create(ctx, opts)
	var se *bundle.SourceSignatureError
	if errors.As(err, &se) {
		return nil, inputErr(err)
	}
	return res, err
}

// signingKey reads the key the bundle is signed with: --key, or the one
// 'onprem bundle keygen' wrote into DefaultKeyDir. None is refused with
// the command that makes one, unless Unsigned.
func (c *BundleCreate) signingKey() (ed25519.PrivateKey, error) {
	if c.Unsigned {
		if c.KeyPath != "" {
			return nil, inputErr(errors.New("--key and --unsigned: give one"))
		}
		return nil, nil
	}
	p := c.KeyPath
	if p == "" {
		dir, err := DefaultKeyDir()
		if err != nil {
			return nil, inputErr(fmt.Errorf("no --key given and %w", err))
		}
		p = filepath.Join(dir, bundle.PrivateKeyFile)
		if _, err := os.Stat(p); errors.Is(err, fs.ErrNotExist) {
			return nil, inputErr(fmt.Errorf("bundles are signed, and there is no signing key: make one with 'onprem bundle keygen' (it writes %s, used from then on), or give --key FILE; --unsigned writes a bundle that every command refuses without --allow-unsigned", p))
		}
	}
	k, err := signing.LoadPrivateKey(p)
	if err != nil {
		return nil, inputErr(fmt.Errorf("--key: %w", err))
	}
	return k, nil
}

// DefaultKeyDir is where 'onprem bundle keygen' writes the signing key pair
// when given no --out, and where 'onprem bundle create' looks for it:
// $ONPREM_KEY_DIR, else onprem/keys in the user's configuration folder
// (~/.config/onprem/keys on Linux).
func DefaultKeyDir() (string, error) {
	if d := os.Getenv("ONPREM_KEY_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("the user's configuration folder is unknown (%w): set ONPREM_KEY_DIR", err)
	}
	return filepath.Join(d, "onprem", "keys"), nil
}

// parseBundlePlatform parses os/arch[/variant] (empty: linux/amd64).
func parseBundlePlatform(s string) (*v1.Platform, error) {
	if s == "" {
		s = DefaultBundlePlatform
	}
	p, err := v1.ParsePlatform(s)
	if err != nil {
		return nil, inputErr(fmt.Errorf("--platform %q: %w", s, err))
	}
	return p, nil
}

// release finds the release to bundle and the platform image prefix: from
// the configuration (with Version overriding spec.version), or Version
// among the known releases.
func (c *BundleCreate) release(ctx context.Context) (*release.Release, string, error) {
	if c.ConfigPath != "" {
		src := c.Source
		if c.Version != "" {
			v := c.Version
			src.Overrides.Version = &v
		}
		l, err := src.Load(ctx)
		if err != nil {
			return nil, "", err
		}
		return l.Release, l.Installation.Spec.Images.Platform, nil
	}
	if c.Version == "" {
		return nil, "", inputErr(errors.New("say which platform version to bundle: --version X or -c onprem.yaml"))
	}
	set := c.Releases
	if set == nil {
		var err error
		if set, err = release.Embedded(); err != nil {
			return nil, "", err
		}
	}
	rel, err := set.Get(c.Version)
	if err != nil {
		return nil, "", err
	}
	return rel, "", nil
}

// sources builds where each image is read from: the registries (with the
// docker config's credentials) or the OCI layout by default, and the
// archive or layout of each ImageSources entry for its image.
func (c *BundleCreate) sources(rel *release.Release, plat *v1.Platform) (bundle.Sources, error) {
	remote := bundle.RemoteOptions{Insecure: c.Insecure, Platform: plat}
	if c.DockerConfig != "" {
		kc, err := readBundleDockerConfig(c.DockerConfig)
		if err != nil {
			return bundle.Sources{}, err
		}
		remote.Keychain = kc
	}
	src := bundle.Sources{Default: bundle.RemoteSource(remote), ByName: map[string]bundle.Source{}}
	if c.OCILayout != "" {
		if _, err := os.Stat(filepath.Join(c.OCILayout, "index.json")); err != nil {
			return bundle.Sources{}, inputErr(fmt.Errorf("--oci-layout %s: not an OCI layout: %w", c.OCILayout, err))
		}
		src.Default = bundle.LayoutSource(c.OCILayout, plat)
	}
	for _, s := range c.ImageSources {
		imgName, p, ok := strings.Cut(s, "=")
		if !ok || imgName == "" || p == "" {
			return bundle.Sources{}, inputErr(fmt.Errorf("--image-source %q: use NAME=PATH", s))
		}
		if _, ok := rel.Image(imgName); !ok {
			return bundle.Sources{}, inputErr(fmt.Errorf("--image-source %q: release %s has no image %q", s, rel.Version, imgName))
		}
		st, err := os.Stat(p)
		if err != nil {
			return bundle.Sources{}, inputErr(fmt.Errorf("--image-source %s: %w", imgName, err))
		}
		if st.IsDir() {
			src.ByName[imgName] = bundle.LayoutSource(p, plat)
		} else {
			src.ByName[imgName] = bundle.ArchiveSource(p)
		}
	}
	return src, nil
}

// readBundleDockerConfig reads registry credentials from a docker config.json
// or a dockerconfigjson Secret.
func readBundleDockerConfig(p string) (authn.Keychain, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, inputErr(fmt.Errorf("--docker-config: %w", err))
	}
	kc, err := bundle.KeychainFromDockerConfig(data)
	if err != nil {
		return nil, inputErr(fmt.Errorf("--docker-config %s: %w", p, err))
	}
	return kc, nil
}

// checkBundleFile checks that p names a file (a missing file, a folder is
// an input error).
func checkBundleFile(p string) error {
	if p == "" {
		return inputErr(errors.New("no bundle file given"))
	}
	st, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return inputErr(fmt.Errorf("bundle %s: no such file", p))
		}
		return inputErr(err)
	}
	if st.IsDir() {
		return inputErr(fmt.Errorf("bundle %s is a folder, not a bundle file", p))
	}
	return nil
}

// bundleTrust is the keyring of the bundle verbs that take no
// configuration: the keys the embedded releases name and --public-key.
func bundleTrust(paths []string, allowUnsigned bool) (bundle.Trust, error) {
	set, err := release.Embedded()
	if err != nil {
		return bundle.Trust{}, err
	}
	return Source{PublicKeys: paths, AllowUnsigned: allowUnsigned}.trust(set)
}

// BundleInspect lists what a bundle holds. It reads only the bundle's
// index and does not check the content (see BundleVerify).
type BundleInspect struct {
	// Path is the bundle file.
	Path string
}

// Run opens the bundle without verifying it and describes it.
func (i *BundleInspect) Run(ctx context.Context) (*bundle.Inspection, error) {
	if err := checkBundleFile(i.Path); err != nil {
		return nil, err
	}
	b, err := bundle.Open(ctx, i.Path, bundle.OpenOptions{SkipVerify: true})
	if err != nil {
		return nil, err
	}
	defer b.Close()
	return b.Inspect()
}

// BundleVerify checks every file of a bundle against its checksums and its
// signature against the trusted keys.
type BundleVerify struct {
	// Path is the bundle file.
	Path string
	// PublicKeyPaths are files of public keys trusted besides the ones the
	// embedded releases name (--public-key).
	PublicKeyPaths []string
	// AllowUnsigned accepts an unsigned bundle, or one signed by a key
	// that is not trusted, and says so (--allow-unsigned).
	AllowUnsigned bool
	// Progress receives byte counts while the checksums are verified.
	Progress bundle.ProgressFunc
}

// Run verifies the bundle. A mismatch is a *bundle.CorruptError naming the
// file; an unsigned bundle (bundle.ErrUnsigned), an untrusted key
// (*bundle.UntrustedKeyError) or a signature that does not verify
// (*bundle.SignatureError) an *InputError.
func (v *BundleVerify) Run(ctx context.Context) (*bundle.VerifyResult, error) {
	if err := checkBundleFile(v.Path); err != nil {
		return nil, err
	}
	trust, err := bundleTrust(v.PublicKeyPaths, v.AllowUnsigned)
	if err != nil {
		return nil, err
	}
	res, err := bundle.Verify(ctx, v.Path, bundle.OpenOptions{Trust: trust, Progress: v.Progress})
	return res, trustErr(err)
}

// BundlePush verifies a bundle, then copies every image to a private
// registry at the references the installation pulls.
type BundlePush struct {
	// Path is the bundle file.
	Path string
	// Registry is HOST[:PORT][/PREFIX] (--registry): spec.registry.host
	// and spec.registry.pathPrefix.
	Registry string
	// Insecure lets the registry use plain HTTP or an untrusted
	// certificate (--insecure).
	Insecure bool
	// DockerConfig is a docker config.json or a dockerconfigjson Secret
	// with the registry's credentials (--docker-config; default: the
	// user's docker config).
	DockerConfig string
	// PublicKeyPaths and AllowUnsigned: as for BundleVerify.
	PublicKeyPaths []string
	AllowUnsigned  bool
	// Concurrency is the number of blobs uploaded at once; at least 1
	// (NewBundlePush sets bundle.DefaultPushConcurrency).
	Concurrency int
	// Progress receives byte counts, while the bundle is verified (Op
	// "verify") and while it is pushed (Op "push").
	Progress bundle.ProgressFunc
}

// NewBundlePush returns a BundlePush with the default concurrency.
func NewBundlePush() *BundlePush {
	return &BundlePush{Concurrency: bundle.DefaultPushConcurrency}
}

// Run checks the options, verifies the bundle and pushes it. When the push
// fails part way, the summary of what was copied is returned with the
// error (running the same push again copies only what is missing).
func (p *BundlePush) Run(ctx context.Context) (*bundle.PushSummary, error) {
	host, prefix, err := parsePushRegistry(p.Registry)
	if err != nil {
		return nil, err
	}
	if p.Concurrency < 1 {
		return nil, inputErr(fmt.Errorf("--concurrency %d: at least 1", p.Concurrency))
	}
	if err := checkBundleFile(p.Path); err != nil {
		return nil, err
	}
	var kc authn.Keychain = authn.DefaultKeychain
	if p.DockerConfig != "" {
		if kc, err = readBundleDockerConfig(p.DockerConfig); err != nil {
			return nil, err
		}
	}
	trust, err := bundleTrust(p.PublicKeyPaths, p.AllowUnsigned)
	if err != nil {
		return nil, err
	}
	b, err := bundle.Open(ctx, p.Path, bundle.OpenOptions{Trust: trust, Progress: p.Progress})
	if err != nil {
		return nil, trustErr(err)
	}
	defer b.Close()
	return bundle.Push(ctx, bundle.PushOptions{
		Bundle: b, Host: host, Prefix: prefix, Insecure: p.Insecure,
		Keychain: kc, Concurrency: p.Concurrency, Progress: p.Progress,
	})
}

// parsePushRegistry splits HOST[:PORT][/PREFIX] and checks that both parts make
// valid image references.
func parsePushRegistry(s string) (host, prefix string, err error) {
	host, prefix, _ = strings.Cut(s, "/")
	if host == "" {
		return "", "", inputErr(errors.New("--registry HOST[/PREFIX] is required"))
	}
	if _, err := name.NewRegistry(host); err != nil {
		return "", "", inputErr(fmt.Errorf("--registry %q: %w", s, err))
	}
	if prefix != "" {
		if _, err := images.Relocate("docker.io/library/x", host, prefix); err != nil {
			return "", "", inputErr(fmt.Errorf("--registry %q: the path is not valid: %w", s, err))
		}
	}
	return host, prefix, nil
}

// BundleKeygen writes a new ed25519 key pair to sign and verify bundles.
type BundleKeygen struct {
	// Dir receives bundle.key and bundle.pub (--out; default:
	// DefaultKeyDir, where 'onprem bundle create' finds the key).
	Dir string
	// Force replaces existing key files (--force).
	Force bool
}

// Run writes the key pair. Existing key files are an input error unless
// Force is set.
func (k *BundleKeygen) Run(ctx context.Context) (*bundle.KeygenResult, error) {
	if k.Dir == "" {
		d, err := DefaultKeyDir()
		if err != nil {
			return nil, inputErr(fmt.Errorf("no --out DIR given and %w", err))
		}
		k.Dir = d
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	res, err := bundle.Keygen(bundle.KeygenOptions{Dir: k.Dir, Force: k.Force})
	if errors.Is(err, bundle.ErrKeyExists) {
		return nil, inputErr(err)
	}
	return res, err
}
