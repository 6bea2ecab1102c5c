package sbom

import (
	"fmt"
	"io"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// WriteCycloneDX writes a CycloneDX 1.6 JSON BOM of the images'
// inventories: the root as the BOM's subject, one container component per
// image holding its packages, each with its package URL.
func WriteCycloneDX(w io.Writer, d Document, invs ...*Inventory) error {
	bom := cdx.NewBOM()
	bom.Metadata = &cdx.Metadata{
		Timestamp: d.Created.UTC().Format(time.RFC3339),
		Tools:     &cdx.ToolsChoice{Components: &[]cdx.Component{{Type: cdx.ComponentTypeApplication, Name: d.Tool}}},
	}
	if d.Root != nil {
		bom.Metadata.Component = &cdx.Component{Type: cdx.ComponentTypeApplication, Name: d.Root.Name, Version: d.Root.Version, BOMRef: "platform"}
	}
	var comps []cdx.Component
	for i, inv := range invs {
		img := cdx.Component{Type: cdx.ComponentTypeContainer, Name: inv.Image, Version: inv.Digest, BOMRef: fmt.Sprintf("image-%d", i),
			Description: inv.Reference}
		var inner []cdx.Component
		for j, p := range inv.Packages {
			c := cdx.Component{Type: cdx.ComponentTypeLibrary, Name: p.Name, Version: p.Version, PackageURL: p.PURL,
				BOMRef:     fmt.Sprintf("image-%d-package-%d", i, j),
				Properties: &[]cdx.Property{{Name: "onprem:location", Value: p.Location}}}
			inner = append(inner, c)
		}
		if len(inner) > 0 {
			img.Components = &inner
		}
		comps = append(comps, img)
	}
	bom.Components = &comps
	enc := cdx.NewBOMEncoder(w, cdx.BOMFileFormatJSON)
	enc.SetPretty(true)
	if err := enc.EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		return fmt.Errorf("writing the CycloneDX BOM: %w", err)
	}
	return nil
}
