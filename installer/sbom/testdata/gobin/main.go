// Command gobin is a Go program with a dependency, built by the sbom tests
// to read its build info as a scanner would.
package main

import (
	"fmt"

	"github.com/package-url/packageurl-go"
	"pault.ag/go/debian/version"
)

func main() {
	v, _ := version.Parse("1.0-1")
	fmt.Println(packageurl.NewPackageURL("deb", "debian", "x", v.String(), nil, "").ToString())
}
