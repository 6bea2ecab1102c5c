package fsutil

import "os"

// DefaultCacheRoot is CacheRoot when $ONPREM_CACHE is not set.
const DefaultCacheRoot = "/var/cache/onprem"

// CacheRoot is the folder of every cache that tests, benchmarks and the
// test rings' builds keep outside the checkout (tools, images, Kubernetes
// binaries, artifacts): $ONPREM_CACHE, default /var/cache/onprem.
func CacheRoot() string {
	if root := os.Getenv("ONPREM_CACHE"); root != "" {
		return root
	}
	return DefaultCacheRoot
}
