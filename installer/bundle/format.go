package bundle

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"
)

// FormatVersion is the version of the bundle layout written by Create.
// Open refuses bundles of a newer format and reads the older ones: 2 adds
// the images' SBOMs (sboms/, bundle.json's sbom), which an onprem that
// reads only 1 would refuse as an unknown field, less clearly; 3 adds the
// images' cosign signatures (signatures/, bundle.json's imageSignatures).
const FormatVersion = 3

// Paths inside a bundle.
const (
	metadataFile  = "bundle.json"
	checksumsFile = "checksums"
	signatureFile = "checksums.sig"
	layoutDir     = "images"
	ociLayoutFile = layoutDir + "/oci-layout"
	indexFile     = layoutDir + "/index.json"
	blobsDir      = layoutDir + "/blobs/sha256"
	releasesDir   = "releases"
	chartsDir     = "charts"
	manifestsDir  = "manifests"
	sbomsDir      = "sboms"
	signaturesDir = "signatures"
)

// SBOMFormat is the format of the bundle's per-image SBOMs
// (sboms/<image>.spdx.json).
const SBOMFormat = "spdx-json"

// Annotations of the entries of images/index.json.
const (
	// AnnotationImageName is the name of the image in the release manifest.
	AnnotationImageName = "dev.onprem.image.name"
	// AnnotationSource is the reference the image was taken from
	// (repository:tag, repository with the platform prefix applied).
	AnnotationSource = "dev.onprem.image.source"
	// annotationRefName is the OCI standard annotation (the tag).
	annotationRefName = "org.opencontainers.image.ref.name"
	// annotationContainerd is the full reference, as containerd and
	// nerdctl expect when importing a layout.
	annotationContainerd = "io.containerd.image.name"
)

// Metadata is bundle.json: what the bundle is and how it was made.
type Metadata struct {
	FormatVersion int `json:"formatVersion"`
	// Release is the platform version the bundle carries.
	Release string `json:"release"`
	// Created is when the bundle was made (UTC).
	Created time.Time `json:"created"`
	// Creator is the onprem version that made it.
	Creator string `json:"creator,omitempty"`
	// PlatformImages is the registry path the platform's own images were
	// taken from (spec.images.platform). Push relocates from it, exactly as
	// the install does.
	PlatformImages string `json:"platformImages"`
	// Platform is the os/architecture of the images (multi-platform
	// sources are narrowed to it).
	Platform string `json:"platform,omitempty"`
	// KeyID identifies the key that signed the checksums (empty: unsigned).
	KeyID string `json:"keyID,omitempty"`
	// SBOM is the format of the SBOM the bundle holds for every image
	// (SBOMFormat; empty: made by an onprem that wrote none).
	SBOM string `json:"sbom,omitempty"`
	// ImageSignatures is the form of the image signatures the bundle
	// carries for every image (ImageSignatureFormat; empty: none, the
	// bundle is unsigned or older).
	ImageSignatures string `json:"imageSignatures,omitempty"`
}

func (m *Metadata) validate() error {
	if m.FormatVersion < 1 || m.FormatVersion > FormatVersion {
		return fmt.Errorf("%s: format version %d is not supported by this onprem (it reads up to %d): use a newer onprem", metadataFile, m.FormatVersion, FormatVersion)
	}
	if m.Release == "" {
		return fmt.Errorf("%s: no release version", metadataFile)
	}
	if m.PlatformImages == "" {
		return fmt.Errorf("%s: no platformImages", metadataFile)
	}
	return nil
}

func encodeMetadata(m *Metadata) ([]byte, error) {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", metadataFile, err)
	}
	return append(b, '\n'), nil
}

// blobPath is where the blob with this sha256 hex digest is stored.
func blobPath(hex string) string { return blobsDir + "/" + hex }

// blobHex returns the hex digest of a blob path, or "" for other files.
func blobHex(p string) string {
	if path.Dir(p) != blobsDir {
		return ""
	}
	return path.Base(p)
}

// releasePath is where the release manifest of version v is stored.
func releasePath(v string) string { return releasesDir + "/" + v + ".yaml" }

// sbomPath is where the SBOM of the release image name is.
func sbomPath(name string) string { return sbomsDir + "/" + name + ".spdx.json" }

// validEntryName says whether a tar entry name may appear in a bundle:
// a clean relative slash path (no "..", no leading "/", no backslash).
func validEntryName(n string) bool {
	return n != "." && fs.ValidPath(n) && !strings.Contains(n, "\\")
}
