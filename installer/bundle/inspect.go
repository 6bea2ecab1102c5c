package bundle

import (
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/installer/images"
	"onprem.dev/onprem/installer/output"
	"onprem.dev/onprem/installer/sbom"
)

// Inspection describes what a bundle holds.
type Inspection struct {
	Path           string    `json:"path"`
	Size           int64     `json:"size"`
	Release        string    `json:"release"`
	Created        time.Time `json:"created"`
	Creator        string    `json:"creator,omitempty"`
	PlatformImages string    `json:"platformImages"`
	Platform       string    `json:"platform,omitempty"`
	Signed         bool      `json:"signed"`
	KeyID          string    `json:"keyID,omitempty"`
	// Verified says whether the checksums were checked when the bundle was
	// opened; SignatureVerified whether the signature was.
	Verified          bool        `json:"verified"`
	SignatureVerified bool        `json:"signatureVerified"`
	Images            []ImageInfo `json:"images"`
	Charts            []ChartInfo `json:"charts"`
	// TotalImageSize sums the blobs of every image (what one archive per
	// image would hold); UniqueBlobSize counts each blob once (what the
	// bundle holds).
	TotalImageSize int64 `json:"totalImageSize"`
	UniqueBlobSize int64 `json:"uniqueBlobSize"`
	Blobs          int   `json:"blobs"`
}

// ImageInfo is one image of a bundle.
type ImageInfo struct {
	Name string `json:"name"`
	// Reference is the source reference, pinned: repository:tag@digest.
	Reference string `json:"reference"`
	Digest    string `json:"digest"`
	// Size is the manifest, config and compressed layers.
	Size     int64  `json:"size"`
	Layers   int    `json:"layers"`
	Platform string `json:"platform,omitempty"`
	// SBOM is the image's SPDX SBOM in the bundle (empty: none), and
	// Packages counts what it lists by type (deb, golang).
	SBOM     string         `json:"sbom,omitempty"`
	Packages map[string]int `json:"packages,omitempty"`
	// Signatures says which image signatures the bundle carries for it:
	// "bundle" (made with the bundle's key) and "source" (found in its
	// source registry), each with the key that verified it.
	Signatures []SignatureInfo `json:"signatures,omitempty"`
}

// SignatureInfo is one image signature a bundle carries.
type SignatureInfo struct {
	From       string `json:"from"`
	VerifiedBy string `json:"verifiedBy,omitempty"`
}

// ChartInfo is one chart of a bundle.
type ChartInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Inspect describes the bundle.
func (b *Bundle) Inspect() (*Inspection, error) {
	in := &Inspection{
		Path: b.path, Size: b.size, Release: b.rel.Version, Created: b.meta.Created,
		Creator: b.meta.Creator, PlatformImages: b.meta.PlatformImages, Platform: b.meta.Platform,
		Signed: b.signed, KeyID: b.meta.KeyID, Verified: b.verified, SignatureVerified: b.sigVerified,
	}
	seen := map[v1.Hash]bool{}
	for _, bi := range b.images {
		info := ImageInfo{
			Name: bi.img.Name, Reference: images.Reference(bi.img, b.meta.PlatformImages),
			Digest: bi.img.Digest, Size: bi.desc.Size, Layers: len(bi.manifest.Layers),
		}
		if bi.desc.Platform != nil {
			info.Platform = bi.desc.Platform.String()
		}
		if b.meta.SBOM != "" {
			inv, err := b.inventory(bi.img.Name)
			if err != nil {
				return nil, err
			}
			info.SBOM, info.Packages = sbomPath(bi.img.Name), inv.Count()
		}
		is, err := b.ImageSignatures(bi.img.Name)
		if err != nil {
			return nil, err
		}
		if is != nil {
			for _, s := range is.Signatures {
				info.Signatures = append(info.Signatures, SignatureInfo{From: s.From, VerifiedBy: s.VerifiedBy})
			}
		}
		blobs := append([]v1.Descriptor{bi.desc, bi.manifest.Config}, bi.manifest.Layers...)
		info.Size = 0
		for _, d := range blobs {
			info.Size += d.Size
			if !seen[d.Digest] {
				seen[d.Digest] = true
				in.UniqueBlobSize += d.Size
				in.Blobs++
			}
		}
		in.TotalImageSize += info.Size
		in.Images = append(in.Images, info)
	}
	names, err := charts.NamesIn(b.Charts())
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", b.path, err)
	}
	for _, n := range names {
		data, err := b.readSmall(path.Join(chartsDir, n, "Chart.yaml"))
		if err != nil {
			return nil, err
		}
		var c struct {
			Version string `json:"version"`
		}
		if err := yaml.Unmarshal(data, &c); err != nil {
			return nil, b.corrupt(path.Join(chartsDir, n, "Chart.yaml"), "is not valid: %v", err)
		}
		in.Charts = append(in.Charts, ChartInfo{Name: n, Version: c.Version})
	}
	return in, nil
}

// WriteText writes the inspection for people.
func (in *Inspection) WriteText(w io.Writer) error {
	sig := "unsigned"
	if in.Signed {
		sig = "signed by " + in.KeyID
		if in.SignatureVerified {
			sig += " (signature verified)"
		} else {
			sig += " (signature not checked: run 'onprem bundle verify')"
		}
	}
	ver := "checksums verified"
	if !in.Verified {
		ver = "checksums not verified (run 'onprem bundle verify')"
	}
	fmt.Fprintf(w, "bundle %s: platform %s, %s, created %s by %s\n", in.Path, in.Release, formatBytes(in.Size), in.Created.Format(time.RFC3339), in.Creator)
	fmt.Fprintf(w, "%s; %s\n", sig, ver)
	fmt.Fprintf(w, "images from %s, platform %s\n\n", in.PlatformImages, in.Platform)
	tw := output.NewTable(w)
	fmt.Fprintln(tw, "IMAGE\tREFERENCE\tLAYERS\tSIZE\tSBOM PACKAGES\tSIGNATURES")
	for _, i := range in.Images {
		pkgs := "none"
		if i.SBOM != "" {
			pkgs = fmt.Sprintf("%d deb, %d go", i.Packages[sbom.TypeDeb], i.Packages[sbom.TypeGolang])
		}
		sigs := "none"
		if len(i.Signatures) > 0 {
			var parts []string
			for _, s := range i.Signatures {
				p := s.From
				if s.VerifiedBy == "" {
					p += " (not verified)"
				}
				parts = append(parts, p)
			}
			sigs = strings.Join(parts, ", ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", i.Name, i.Reference, i.Layers, formatBytes(i.Size), pkgs, sigs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = output.NewTable(w)
	fmt.Fprintln(tw, "CHART\tVERSION")
	for _, c := range in.Charts {
		fmt.Fprintf(tw, "%s\t%s\n", c.Name, c.Version)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%d images, %d blobs: %s unique (%s if each image were stored on its own)\n",
		len(in.Images), in.Blobs, formatBytes(in.UniqueBlobSize), formatBytes(in.TotalImageSize))
	return err
}
