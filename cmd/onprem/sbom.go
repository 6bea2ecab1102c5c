package main

import (
	"github.com/spf13/cobra"

	"onprem.dev/onprem/installer/action"
	"onprem.dev/onprem/installer/output"
)

func newSBOMCmd() *cobra.Command {
	a := &action.SBOM{}
	var format string
	cmd := &cobra.Command{
		Use:   "sbom --bundle FILE | --installed",
		Short: "Print the platform's software bill of materials, per image",
		Long: `Print the software bill of materials of a platform release: for every image
the bundle carries, the Debian packages its dpkg database says are
installed and, for every Go executable in it, the Go modules its build
info names (with the Go standard library's version), each with its package
URL, which vulnerability scanners match.

'onprem bundle create' writes these SBOMs from each image's own contents,
layer by layer, into the bundle (sboms/<image>.spdx.json, SPDX 2.3), where
the bundle's checksums and signature cover them. This command verifies the
bundle first (checksums, and its signature by a trusted key, as every
command that takes a bundle does), then prints:

  -o table            one line per image: the components that run it (or
                      the runner, or the runtime chart), reference, OS,
                      package counts
  -o json             the inventories, with what runs each image
  -o spdx-json        one SPDX 2.3 document: the platform contains each
                      image, which contains its packages
  -o cyclonedx-json   one CycloneDX 1.6 BOM, the same tree

With --installed instead of --bundle, it catalogs what the installed
platform runs: every container image of the pods of its namespace
(--namespace), by the digest the kubelet resolved, read layer by layer from
the registry it is pulled from (your private registry: credentials from
your docker config or --docker-config, --insecure for plain HTTP). The
table's first column then names the component (app.kubernetes.io/name) that
runs each image.

Feed either document to the scanner you already use (e.g. 'grype sbom:FILE'
or 'trivy sbom FILE'). Not catalogued: language packages outside Debian's
(pip, npm, jars) and executables of other languages.`,
		Example: `  onprem sbom --bundle platform-2.8.0.bundle --public-key bundle.pub
  onprem sbom --bundle platform-2.8.0.bundle -o spdx-json > platform-2.8.0.spdx.json
  onprem sbom --bundle platform-2.8.0.bundle --image redis -o cyclonedx-json
  onprem sbom --installed --docker-config regcred.json -o spdx-json > running.spdx.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := output.Check(format, action.SBOMTable, action.SBOMJSON, action.SBOMSPDX, action.SBOMCycloneDX); err != nil {
				return inputError{err}
			}
			a.Progress = progressTo(cmd)
			res, err := a.Run(cmd.Context())
			if err != nil {
				return err
			}
			return action.WriteSBOM(cmd.OutOrStdout(), format, res)
		},
	}
	cmd.Flags().StringVar(&a.Bundle, "bundle", "", "the bundle whose SBOMs to print ('onprem bundle create')")
	cmd.Flags().StringArrayVar(&a.Images, "image", nil, "only this release image (repeatable; 'onprem bundle inspect' lists them)")
	addTrustFlags(cmd, &a.PublicKeyPaths, &a.AllowUnsigned)
	cmd.Flags().BoolVar(&a.Installed, "installed", false, "catalog the images the installed platform's pods run, read from their registry, instead of a bundle's")
	cmd.Flags().StringVarP(&a.Namespace, "namespace", "n", "onprem", "with --installed: the platform's namespace")
	cmd.Flags().StringVar(&a.DockerConfig, "docker-config", "", "with --installed: registry credentials, a docker config.json or a dockerconfigjson Secret (default: your docker config)")
	cmd.Flags().BoolVar(&a.Insecure, "insecure", false, "with --installed: the registry may use plain HTTP or an untrusted certificate")
	addClusterFlags(cmd, &a.Cluster)
	cmd.Flags().StringVarP(&format, "output", "o", output.Table, "output: table, json, spdx-json or cyclonedx-json")
	return cmd
}
