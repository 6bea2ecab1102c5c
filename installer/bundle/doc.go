// Package bundle makes, checks and pushes air-gapped bundles: one tar file
// holding everything an installation of one platform release needs when the
// cluster cannot reach the internet.
//
// A bundle is a plain (uncompressed) tar file:
//
//	images/oci-layout                   OCI image layout marker
//	images/blobs/sha256/<hex>           every manifest, config and layer, stored once
//	images/index.json                   one entry per release image (annotations: name, source)
//	releases/<version>.yaml             the release manifest, every image digest pinned
//	charts/<chart>/...                  the Helm charts, same layout as charts.FS (with the runtime chart)
//	manifests/...                       the kustomize tree, same layout as manifests.FS
//	bundle.json                         metadata (release, platform, creator, signing key id)
//	checksums                           "sha256  path" of every file above, sorted by path
//	checksums.sig                       optional: raw 64-byte ed25519 signature of checksums
//
// The tar is not compressed: image layers are compressed already (a zstd
// pass over a bundle saves well under 1%, see BenchmarkBundleSize), and an
// uncompressed tar can be read in place: Open indexes the file and serves
// blobs, charts and manifests straight from it through io.SectionReader,
// so nothing is extracted and memory stays small whatever the bundle size.
//
// A release with a runtime chart (release.Runtime: an upstream chart in a
// remote chart repository) has it fetched by Create with installer/chartfetch
// (CreateOptions.RuntimeChart, RuntimeChartRepository for a mirror),
// unpacked under charts/<chart>/ beside the embedded charts, and its
// archive's digest pinned as runtime.digest in the bundle's release
// manifest; its images are release images, carried like the others.
//
// The four verbs are Create (build a bundle from registries, OCI layouts or
// docker-save archives), Open/Verify (check every checksum and the
// signature), Inspect (what is inside) and Push (copy every image to a
// private registry, at the references that the install pulls).
package bundle
