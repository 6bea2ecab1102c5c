// Package version is this onprem's own version, stamped at build time with
// -ldflags "-X onprem.dev/onprem/installer/version.Version=...".
package version

// Version of this onprem build (semver). Releases name the oldest onprem
// that may install them.
var Version = "0.1.0"
