package main

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/bundle"
	"onprem.dev/onprem/installer/output"
)

func newBundleCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "bundle",
		Short: "Make, check and push air-gapped bundles",
		Long: `An air-gapped bundle is one file that holds everything an installation of
one platform version needs when the cluster cannot reach the internet: every
image (as one OCI image layout, shared layers stored once), the release
manifest with every image digest pinned, the Helm charts, the kustomize
manifests, a checksums file and an ed25519 signature of those checksums.

Bundles are signed, and every command that takes one (verify, push,
install, upgrade, restore, ... --bundle) refuses a bundle that is unsigned
or signed by a key it does not trust. Trusted are: the keys onprem's own
releases name (bundles made by the onprem project), the operator's keys in
spec.trust of onprem.yaml, and --public-key files. --allow-unsigned accepts
any bundle with a warning, recorded in the installation's history.

The workflow for a bundle of your own making:

  # once, on a trusted machine: a signing key pair (in ~/.config/onprem/keys,
  # where 'bundle create' finds it from then on)
  onprem bundle keygen

  # on a machine with internet access
  onprem bundle create --version 2.8.0 -o platform-2.8.0.bundle

  # carry the file (and bundle.pub) into the air-gapped network, then
  onprem bundle verify platform-2.8.0.bundle --public-key bundle.pub
  onprem bundle push platform-2.8.0.bundle --registry registry.internal:5000/onprem \
      --public-key bundle.pub --docker-config regcred.yaml

Put bundle.pub in spec.trust of onprem.yaml so that install and upgrade
trust it without --public-key.

Set spec.registry.host and spec.registry.pathPrefix in onprem.yaml to the
same registry and path: the push writes every image exactly where the
install pulls it.`,
	}
	cmd.AddCommand(newBundleCreateCmd(), newBundleInspectCmd(), newBundleVerifyCmd(), newBundlePushCmd(), newBundleKeygenCmd())
	return cmd
}

func newBundleCreateCmd() *cobra.Command {
	a := &action.BundleCreate{}
	cmd := &cobra.Command{
		Use:   "create --version X -o FILE",
		Short: "Write a bundle of a platform version: images, charts, manifests, checksums",
		Long: `Write one bundle file holding a platform release: its images as one OCI
image layout (layers shared between images stored once), the release
manifest with every image digest pinned, the Helm charts and kustomize
manifests of this onprem, the SHA-256 of every file and an ed25519
signature of those checksums, made with --key or, by default, the key
'onprem bundle keygen' wrote (~/.config/onprem/keys/bundle.key, or
$ONPREM_KEY_DIR). Without a key the command refuses and names the one that
makes it; --unsigned writes a bundle that every command refuses unless
told --allow-unsigned.

The version comes from --version or from spec.version of -c onprem.yaml
(which also gives spec.images.platform, where the platform's own images are
published). Images are read from their registries (credentials from your
docker config, or --docker-config), unless:

  --image-source NAME=PATH   takes the release image NAME from PATH: a
                             docker-archive tarball ('docker save' output)
                             or an OCI layout folder (repeatable)
  --oci-layout DIR           takes every other image from an OCI layout,
                             found by its reference annotation
                             (io.containerd.image.name or
                             org.opencontainers.image.ref.name holding e.g.
                             docker.io/library/redis:7.2.7)

Every image is signed too, in cosign's form (a simple signing payload
naming its digest), and 'bundle push' attaches those signatures beside
the relocated images (the tag sha256-<digest>.sig), so that the private
registry holds signed images: spec.registry.requireSignatures then makes
preflight and install refuse any image without one. Signatures the source
registry holds for an image are carried and pushed too; give the
publishers' public keys with --source-public-key and an image whose
source signatures none of them made is refused.

The release's GitOps runtime chart is fetched from its chart repository (or
your mirror of it, --chart-repository) and carried too, its digest pinned.

Multi-platform images are narrowed to --platform (default linux/amd64).
The file is written next to FILE under a temporary name and renamed when
complete: after any failure (a missing image, a full disk, Ctrl-C) no
partial bundle is left behind. Progress goes to stderr.`,
		Example: `  onprem bundle keygen && onprem bundle create --version 2.8.0 -o platform-2.8.0.bundle
  onprem bundle create -c onprem.yaml -o platform.bundle --key keys/bundle.key
  onprem bundle create --version 2.8.0 -o p.bundle --oci-layout ./mirror \
      --image-source pipelines-api=./pipelines-api.tar`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a.Progress = progressTo(cmd)
			res, err := a.Run(cmd.Context())
			if err != nil {
				return err
			}
			signed := "unsigned"
			if res.Signed {
				signed = "signed with key " + res.KeyID
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: platform %s, %d images, %d blobs, %.1f MiB, %s (%.1fs)\n",
				res.Path, res.Release, res.Images, res.Blobs, float64(res.Size)/(1<<20), signed, res.Seconds)
			fmt.Fprintf(cmd.OutOrStdout(), "image signatures: %d images signed with the bundle's key; %d carry their source registry's signatures (%d verified with --source-public-key)\n",
				res.ImagesSigned, res.SourceSigned, res.SourceVerified)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&a.Version, "version", "", "platform version to bundle (default: spec.version of -c)")
	f.StringVarP(&a.ConfigPath, "config", "c", "", "onprem.yaml to take the version and spec.images.platform from")
	f.StringVarP(&a.Output, "output", "o", "", "the bundle file to write")
	f.StringVar(&a.KeyPath, "key", "", "private key to sign the bundle with (default: bundle.key that 'onprem bundle keygen' wrote into ~/.config/onprem/keys or $ONPREM_KEY_DIR)")
	f.BoolVar(&a.Unsigned, "unsigned", false, "write the bundle without a signature (every command then refuses it without --allow-unsigned)")
	f.StringArrayVar(&a.ImageSources, "image-source", nil, "NAME=PATH: take image NAME from a docker-archive tarball or an OCI layout folder (repeatable)")
	f.StringVar(&a.OCILayout, "oci-layout", "", "take the images from this OCI layout folder, by reference annotation")
	f.StringVar(&a.Platform, "platform", action.DefaultBundlePlatform, "platform picked from multi-platform images")
	f.StringVar(&a.DockerConfig, "docker-config", "", "credentials for the source registries: a docker config.json or a dockerconfigjson Secret (default: your docker config)")
	f.BoolVar(&a.Insecure, "insecure", false, "source registries may use plain HTTP or untrusted certificates")
	f.StringArrayVar(&a.SourcePublicKeys, "source-public-key", nil, "public key FILE of an image publisher: an image whose source registry holds cosign signatures, none made by these keys, is refused (repeatable)")
	f.IntVar(&a.Concurrency, "concurrency", 4, "images resolved at once")
	f.StringVar(&a.RuntimeChartRepository, "chart-repository", "", "a mirror of the release's GitOps runtime chart repository: oci://HOST/PATH or https://HOST/PATH (default: the release's)")
	f.BoolVar(&a.RuntimeChart.PlainHTTP, "chart-plain-http", false, "reach an oci:// chart repository over plain HTTP")
	f.StringVar(&a.RuntimeChart.CAFile, "chart-ca-file", "", "CA certificates (PEM) for the chart repository")
	f.StringVar(&a.RuntimeChart.RegistryConfig, "chart-registry-config", "", "docker config.json with credentials for an oci:// chart repository")
	return cmd
}

// progressTo reports progress on the command's stderr, for people.
func progressTo(cmd *cobra.Command) bundle.ProgressFunc {
	return bundle.ProgressTo(cmd.ErrOrStderr(), 2*time.Second)
}

func newBundleInspectCmd() *cobra.Command {
	a := &action.BundleInspect{}
	var format string
	cmd := &cobra.Command{
		Use:   "inspect FILE",
		Short: "List what a bundle holds: version, images, charts, sizes",
		Long: `List what a bundle holds: its platform version, who made it and when, each
image with its source reference, pinned digest and size, the charts, and how
much space sharing layers saved. Inspect reads only the bundle's index (it
is fast on any size); it does not check the content: use 'onprem bundle
verify' for that.`,
		Example: `  onprem bundle inspect platform-2.8.0.bundle
  onprem bundle inspect platform-2.8.0.bundle -o json | jq -r '.images[].reference'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			a.Path = args[0]
			in, err := a.Run(cmd.Context())
			if err != nil {
				return err
			}
			return writeText(cmd, format, in)
		},
	}
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}

func newBundleVerifyCmd() *cobra.Command {
	a := &action.BundleVerify{}
	var format string
	cmd := &cobra.Command{
		Use:   "verify FILE",
		Short: "Check every file of a bundle against its checksums, and its signature",
		Long: `Check a bundle: the SHA-256 of every file against the checksums file (read
as a stream; nothing is extracted), that nothing was added or removed, that
every image the release names is complete, and that the ed25519 signature
of the checksums was made by a trusted key: one that onprem's releases name,
or a --public-key file.

On a mismatch the file at fault is named and the exit code is 1. An
unsigned bundle, one signed by a key that is not trusted, or one whose
signature does not verify (changed after signing) is refused with exit code
2; --allow-unsigned accepts the first two with a warning.`,
		Example: `  onprem bundle verify platform-2.8.0.bundle --public-key bundle.pub`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			a.Path = args[0]
			a.Progress = progressTo(cmd)
			return runAndWrite(cmd, format, a.Run, func(w io.Writer, res *bundle.VerifyResult) {
				sig := "signature verified: " + res.TrustedBy
				if !res.SignatureVerified {
					sig = "NOT VERIFIED, accepted with --allow-unsigned: " + res.Unverified
				}
				fmt.Fprintf(w, "%s: platform %s, %d files (%.1f MiB) match their checksums; %s\n",
					res.Path, res.Release, res.Files, float64(res.Bytes)/(1<<20), sig)
			})
		},
	}
	addTrustFlags(cmd, &a.PublicKeyPaths, &a.AllowUnsigned)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json or yaml")
	return cmd
}

func newBundlePushCmd() *cobra.Command {
	a := action.NewBundlePush()
	var format string
	cmd := &cobra.Command{
		Use:   "push FILE --registry HOST[/PREFIX]",
		Short: "Copy every image of a bundle to a private registry",
		Long: `Verify a bundle (checksums, and its signature by a trusted key, as 'onprem
bundle verify' does; nothing is copied from a bundle that fails), then copy
every image to the private registry at the reference the installation pulls:
the source registry host is replaced by HOST/PREFIX and the path kept, so
docker.io/library/redis:7.2.7 becomes HOST/PREFIX/library/redis:7.2.7.
Set spec.registry.host to HOST and spec.registry.pathPrefix to PREFIX.

Blobs are uploaded in parallel (--concurrency) and skipped when the
registry has them already, so running push again after an interruption
copies only what is missing, and a second push copies nothing. Manifests
are pushed after their blobs, by digest and by tag. Transient errors (5xx,
connection resets, timeouts) are retried with backoff; refused credentials
(401/403) stop the push at once.

Credentials come from --docker-config (a docker config.json, or a
kubernetes.io/dockerconfigjson Secret as 'kubectl get secret NAME -o yaml'
prints it: the same one as spec.registry.pullSecret), else from your docker
config. Progress goes to stderr; the summary to stdout.`,
		Example: `  onprem bundle push platform-2.8.0.bundle --registry registry.internal:5000/onprem
  onprem bundle push platform.bundle --registry 10.0.0.5:5000 --insecure --public-key bundle.pub
  kubectl -n onprem get secret regcred -o yaml > regcred.yaml
  onprem bundle push platform.bundle --registry registry.internal/onprem --docker-config regcred.yaml -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkFormat(format); err != nil {
				return err
			}
			a.Path = args[0]
			a.Progress = progressTo(cmd)
			sum, err := a.Run(cmd.Context())
			if err != nil {
				if sum != nil && sum.BlobsCopied > 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "%d blobs were copied before the failure; run the same push again to copy the rest\n", sum.BlobsCopied)
				}
				return err
			}
			return writeText(cmd, format, sum)
		},
	}
	f := cmd.Flags()
	f.StringVar(&a.Registry, "registry", "", "the private registry and path: HOST[:PORT][/PREFIX] (spec.registry.host and pathPrefix)")
	f.BoolVar(&a.Insecure, "insecure", false, "the registry uses plain HTTP or a certificate this machine does not trust")
	f.StringVar(&a.DockerConfig, "docker-config", "", "registry credentials: a docker config.json or a dockerconfigjson Secret (default: your docker config)")
	addTrustFlags(cmd, &a.PublicKeyPaths, &a.AllowUnsigned)
	f.IntVar(&a.Concurrency, "concurrency", bundle.DefaultPushConcurrency, "blobs uploaded at once")
	f.StringVarP(&format, "output", "o", output.Table, "summary on stdout: table, json or yaml")
	return cmd
}

func newBundleKeygenCmd() *cobra.Command {
	a := &action.BundleKeygen{}
	cmd := &cobra.Command{
		Use:   "keygen [--out DIR]",
		Short: "Make an ed25519 key pair to sign and verify bundles",
		Long: `Write a new ed25519 key pair: DIR/bundle.key (the private key, PKCS#8 PEM,
mode 0600: keep it where bundles are made, never ship it) and DIR/bundle.pub
(the public key, PEM: give it to whoever verifies, pushes or installs
bundles; they trust it with --public-key or in spec.trust of onprem.yaml).
Without --out, DIR is ~/.config/onprem/keys (or $ONPREM_KEY_DIR), where
'onprem bundle create' finds the key by itself.
Existing key files are never replaced unless --force is given.

The signature is a detached ed25519 signature of the bundle's checksums
file, so it can also be checked without onprem:

  tar -xf platform.bundle checksums checksums.sig
  openssl pkeyutl -verify -pubin -inkey bundle.pub -rawin -in checksums -sigfile checksums.sig`,
		Example: `  onprem bundle keygen
  onprem bundle keygen --out keys/`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			res, err := a.Run(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s (private, keep it secret) and %s (public); key id %s\n", res.PrivateKey, res.PublicKey, res.KeyID)
			return nil
		},
	}
	cmd.Flags().StringVar(&a.Dir, "out", "", "folder to write bundle.key and bundle.pub into (default: ~/.config/onprem/keys, or $ONPREM_KEY_DIR)")
	cmd.Flags().BoolVar(&a.Force, "force", false, "replace existing key files")
	return cmd
}
