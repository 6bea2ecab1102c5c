// Package images builds, with no container registry and no docker, the
// container images the platform needs in the kind end-to-end ring, as OCI
// images (go-containerregistry): the Traefik ingress controller from
// source, a MongoDB stand-in (FerretDB), Redis, PostgreSQL and RabbitMQ
// from Debian's packages, and the reference service that plays every
// platform service. Each image honours the contract of its chart in
// charts/ (command, arguments, environment, user, volumes), with small Go
// entrypoints where the charts rely on what the official images' scripts
// do.
//
//	imgs, err := images.Build(ctx, []string{"traefik", "redis"}, t.Logf)
//	all := append(imgs, images.Retag(ref, "registry/pipelines-api:2.8.0")...)
//	err = images.WriteDockerArchive("images.tar", all) // kind load image-archive, ctr import
//	err = images.WriteOCILayout("oci", all)            // onprem bundle create's layout source
//
// Builds are cached in $ONPREM_CACHE/images, keyed by a stamp of their
// inputs: a warm Build builds nothing and takes no lock. See README.md for
// the cache layout and the measured times.
package images
