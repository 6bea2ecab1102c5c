package action

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"onprem.dev/onprem/installer/bundle"
	"onprem.dev/onprem/installer/kube"
	"onprem.dev/onprem/installer/output"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/installer/sbom"
	"onprem.dev/onprem/installer/version"
)

// SBOM formats of 'onprem sbom -o'.
const (
	SBOMTable     = output.Table
	SBOMJSON      = output.JSON
	SBOMSPDX      = "spdx-json"
	SBOMCycloneDX = "cyclonedx-json"
)

// SBOM reads the software bill of materials of a platform release from its
// bundle: the SBOM bundle create wrote for every image, from the image's
// own contents. The bundle is verified first (checksums and signature, as
// for every command that takes one), so the SBOMs are the signed ones.
// With Installed instead, it catalogs the images the installed platform's
// pods run, read from the registries they are pulled from.
type SBOM struct {
	// Bundle is the bundle file (--bundle).
	Bundle string
	// Installed catalogs what runs in Namespace (default onprem) of the
	// Cluster instead (--installed): every container image of its pods,
	// by the digest the kubelet resolved, read from its registry with the
	// credentials of DockerConfig (default: the user's docker config).
	Installed bool
	Cluster   kube.Options
	// Conn reaches the cluster; when nil, one is made from Cluster
	// (tests give one over a fake clientset: Connected).
	Conn         *Configuration
	Namespace    string
	DockerConfig string
	Insecure     bool
	// PublicKeyPaths and AllowUnsigned: as for BundleVerify.
	PublicKeyPaths []string
	AllowUnsigned  bool
	// Images keeps only these release images (--image; none: all).
	Images []string
	// Progress receives byte counts while the bundle is verified.
	Progress bundle.ProgressFunc
}

// SBOMResult is the platform's SBOM: each image's inventory.
type SBOMResult struct {
	Release string `json:"release"`
	// Created is when the bundle (and its SBOMs) was made.
	Created time.Time   `json:"created"`
	Images  []SBOMImage `json:"images"`
}

// SBOMImage is one image's inventory and what runs it.
type SBOMImage struct {
	*sbom.Inventory
	// UsedBy names the release's components that run the image, "runner"
	// for the build runner's, and "runtime chart NAME" for an image the
	// GitOps runtime's chart runs by itself.
	UsedBy []string `json:"usedBy,omitempty"`
}

// imageUsers maps each image name of rel to what runs it.
func imageUsers(rel *release.Release) map[string][]string {
	users := map[string][]string{}
	add := func(img, who string) {
		if !slices.Contains(users[img], who) {
			users[img] = append(users[img], who)
		}
	}
	for _, c := range rel.Components {
		for _, key := range slices.Sorted(maps.Keys(c.Images)) {
			add(c.Images[key], c.Name)
		}
	}
	if rel.Runner != nil {
		for _, img := range rel.Runner.Images {
			add(img, "runner")
		}
	}
	for _, img := range rel.Images {
		if img.Chart != "" {
			add(img.Name, "runtime chart "+img.Chart)
		}
	}
	return users
}

// Run verifies the bundle and reads its SBOMs.
func (s *SBOM) Run(ctx context.Context) (*SBOMResult, error) {
	switch {
	case s.Installed && s.Bundle != "":
		return nil, inputErr(errors.New("--bundle and --installed: give one (a release's bundle, or the platform that runs)"))
	case s.Installed:
		return s.runInstalled(ctx)
	case s.Bundle == "":
		return nil, inputErr(errors.New("--bundle FILE or --installed is required: the SBOMs a bundle carries, or those of the images the installed platform runs"))
	}
	if err := checkBundleFile(s.Bundle); err != nil {
		return nil, err
	}
	trust, err := bundleTrust(s.PublicKeyPaths, s.AllowUnsigned)
	if err != nil {
		return nil, err
	}
	b, err := bundle.Open(ctx, s.Bundle, bundle.OpenOptions{Trust: trust, Progress: s.Progress})
	if err != nil {
		return nil, trustErr(err)
	}
	defer b.Close()
	invs, err := b.Inventories()
	if errors.Is(err, bundle.ErrNoSBOM) {
		return nil, inputErr(err)
	}
	if err != nil {
		return nil, err
	}
	res := &SBOMResult{Release: b.Release().Version, Created: b.Metadata().Created}
	users := imageUsers(b.Release())
	for _, want := range s.Images {
		if !slices.ContainsFunc(invs, func(i *sbom.Inventory) bool { return i.Image == want }) {
			var names []string
			for _, i := range invs {
				names = append(names, i.Image)
			}
			return nil, inputErr(fmt.Errorf("--image %s: release %s has no such image (it has %s)", want, res.Release, strings.Join(names, ", ")))
		}
	}
	for _, i := range invs {
		if len(s.Images) == 0 || slices.Contains(s.Images, i.Image) {
			res.Images = append(res.Images, SBOMImage{Inventory: i, UsedBy: users[i.Image]})
		}
	}
	return res, nil
}

// WriteSBOM writes the result as format: table (one line per image), json
// (the inventories), spdx-json (one SPDX 2.3 document: the platform
// contains each image, which contains its packages) or cyclonedx-json.
func WriteSBOM(w io.Writer, format string, res *SBOMResult) error {
	doc := sbom.Document{
		Name:      "onprem platform " + res.Release,
		Namespace: "https://onprem.dev/spdx/platform/" + res.Release,
		Tool:      "onprem-" + version.Version, Created: res.Created,
		Root: &sbom.Root{Name: "onprem platform", Version: res.Release},
	}
	invs := make([]*sbom.Inventory, len(res.Images))
	for i, img := range res.Images {
		invs[i] = img.Inventory
	}
	switch format {
	case SBOMSPDX:
		return sbom.WriteSPDX(w, doc, invs...)
	case SBOMCycloneDX:
		return sbom.WriteCycloneDX(w, doc, invs...)
	}
	return output.Write(w, format, res, func(w io.Writer) {
		tw := output.NewTable(w)
		fmt.Fprintln(tw, "IMAGE\tUSED BY\tREFERENCE\tOS\tDEB\tGO")
		for _, i := range res.Images {
			c := i.Count()
			os, users := i.OS, strings.Join(i.UsedBy, ", ")
			if os == "" {
				os = "-"
			}
			if users == "" {
				users = "-"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", i.Image, users, i.Reference, os, c[sbom.TypeDeb], c[sbom.TypeGolang])
		}
		_ = tw.Flush()
	})
}
