// Package sbom makes a software bill of materials of a container image from
// the image's own contents, layer by layer, without running it: the Debian
// packages its dpkg database says are installed (read with pault.ag's
// Debian control-file library) and, for every Go executable, the modules
// its build info names (the standard library's debug/buildinfo). A layer
// is scanned once, as a stream, and its findings are merged in layer order
// with the OCI whiteouts applied, so shared base layers cost once per
// bundle. The inventory is written as SPDX 2.3 JSON (spdx/tools-golang) or
// CycloneDX JSON (cyclonedx-go), each package with its package URL.
//
// Not catalogued: language packages outside Debian's (pip, npm, jar), and
// executables of other languages; an image that has them shows them only
// through the Debian packages that brought them.
package sbom
