package sbom

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/package-url/packageurl-go"
	spdxjson "github.com/spdx/tools-golang/json"
	"github.com/spdx/tools-golang/spdx"
	"github.com/spdx/tools-golang/spdx/v2/common"
)

// Document says what an SPDX document is about.
type Document struct {
	// Name and Namespace name the document (the namespace is a URI unique
	// to it).
	Name, Namespace string
	// Tool is the creator, e.g. "onprem-0.1.0".
	Tool    string
	Created time.Time
	// Root, when set, is the package the document describes and that
	// contains every image (a platform release); otherwise the document
	// describes its images.
	Root *Root
}

// Root is the package that contains the images.
type Root struct {
	Name, Version string
}

const locationPrefix = "found in "

// WriteSPDX writes an SPDX 2.3 JSON document of the images' inventories:
// one package per image (purpose CONTAINER) that CONTAINS its packages,
// each with its package URL.
func WriteSPDX(w io.Writer, d Document, invs ...*Inventory) error {
	doc := &spdx.Document{
		SPDXVersion: spdx.Version, DataLicense: spdx.DataLicense, SPDXIdentifier: "DOCUMENT",
		DocumentName: d.Name, DocumentNamespace: d.Namespace,
		CreationInfo: &spdx.CreationInfo{
			Creators: []common.Creator{{CreatorType: "Tool", Creator: d.Tool}},
			Created:  d.Created.UTC().Format(time.RFC3339),
		},
	}
	rel := func(a, b common.ElementID, kind string) {
		doc.Relationships = append(doc.Relationships, &spdx.Relationship{
			RefA: common.MakeDocElementID("", string(a)), RefB: common.MakeDocElementID("", string(b)), Relationship: kind})
	}
	var rootID common.ElementID
	if d.Root != nil {
		rootID = "Platform"
		doc.Packages = append(doc.Packages, &spdx.Package{
			PackageName: d.Root.Name, PackageSPDXIdentifier: rootID, PackageVersion: d.Root.Version,
			PackageDownloadLocation: "NOASSERTION", PrimaryPackagePurpose: "APPLICATION",
		})
		rel("DOCUMENT", rootID, "DESCRIBES")
	}
	for i, inv := range invs {
		imgID := common.ElementID(fmt.Sprintf("Image-%d", i))
		img := &spdx.Package{
			PackageName: inv.Image, PackageSPDXIdentifier: imgID, PackageVersion: inv.Digest,
			PackageDownloadLocation: "NOASSERTION", PrimaryPackagePurpose: "CONTAINER",
			PackageSourceInfo: inv.Reference, PackageComment: strings.Join(inv.Notes, "\n"),
			PackageDescription: inv.OS,
		}
		if hex, ok := strings.CutPrefix(inv.Digest, "sha256:"); ok {
			img.PackageChecksums = []common.Checksum{{Algorithm: common.SHA256, Value: hex}}
			name := inv.Reference
			if i := strings.LastIndexAny(name, "/"); i >= 0 {
				name = name[i+1:]
			}
			name, _, _ = strings.Cut(name, ":")
			img.PackageExternalReferences = []*spdx.PackageExternalReference{{Category: "PACKAGE-MANAGER", RefType: "purl",
				Locator: packageurl.NewPackageURL(packageurl.TypeOCI, "", name, inv.Digest, packageurl.QualifiersFromMap(map[string]string{"repository_url": repository(inv.Reference)}), "").ToString()}}
		}
		doc.Packages = append(doc.Packages, img)
		if d.Root != nil {
			rel(rootID, imgID, "CONTAINS")
		} else {
			rel("DOCUMENT", imgID, "DESCRIBES")
		}
		for j, p := range inv.Packages {
			id := common.ElementID(fmt.Sprintf("Package-%d-%d", i, j))
			doc.Packages = append(doc.Packages, &spdx.Package{
				PackageName: p.Name, PackageSPDXIdentifier: id, PackageVersion: p.Version,
				PackageDownloadLocation: "NOASSERTION", PackageSourceInfo: locationPrefix + p.Location,
				PrimaryPackagePurpose:     "LIBRARY",
				PackageExternalReferences: []*spdx.PackageExternalReference{{Category: "PACKAGE-MANAGER", RefType: "purl", Locator: p.PURL}},
			})
			rel(imgID, id, "CONTAINS")
		}
	}
	return spdxjson.Write(doc, w, spdxjson.Indent("  "))
}

// repository is a reference without its tag or digest.
func repository(ref string) string {
	repo, _, _ := strings.Cut(ref, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	return repo
}

// ReadSPDX reads the inventories of the images an SPDX JSON document that
// WriteSPDX wrote describes.
func ReadSPDX(r io.Reader) ([]*Inventory, error) {
	doc, err := spdxjson.Read(r)
	if err != nil {
		return nil, fmt.Errorf("reading the SPDX document: %w", err)
	}
	byID := map[common.ElementID]*spdx.Package{}
	for _, p := range doc.Packages {
		byID[p.PackageSPDXIdentifier] = p
	}
	var out []*Inventory
	images := map[common.ElementID]*Inventory{}
	for _, p := range doc.Packages {
		if p.PrimaryPackagePurpose != "CONTAINER" {
			continue
		}
		inv := &Inventory{Image: p.PackageName, Digest: p.PackageVersion, Reference: p.PackageSourceInfo, OS: p.PackageDescription}
		if p.PackageComment != "" {
			inv.Notes = strings.Split(p.PackageComment, "\n")
		}
		images[p.PackageSPDXIdentifier] = inv
		out = append(out, inv)
	}
	for _, r := range doc.Relationships {
		inv, ok := images[r.RefA.ElementRefID]
		if !ok || r.Relationship != "CONTAINS" {
			continue
		}
		p, ok := byID[r.RefB.ElementRefID]
		if !ok {
			return nil, fmt.Errorf("the SPDX document names package %s, which it does not hold", r.RefB.ElementRefID)
		}
		pkg := Package{Name: p.PackageName, Version: p.PackageVersion, Location: strings.TrimPrefix(p.PackageSourceInfo, locationPrefix)}
		for _, ref := range p.PackageExternalReferences {
			if ref.RefType != "purl" {
				continue
			}
			pkg.PURL = ref.Locator
			if u, err := packageurl.FromString(ref.Locator); err == nil {
				pkg.Type = u.Type
				q := u.Qualifiers.Map()
				pkg.Arch, pkg.Source = q["arch"], q["upstream"]
			}
		}
		inv.Packages = append(inv.Packages, pkg)
	}
	return out, nil
}
