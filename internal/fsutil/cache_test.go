package fsutil

import "testing"

func TestCacheRoot(t *testing.T) {
	t.Setenv("ONPREM_CACHE", "/srv/cache")
	if got := CacheRoot(); got != "/srv/cache" {
		t.Errorf("CacheRoot with ONPREM_CACHE set = %s", got)
	}
	t.Setenv("ONPREM_CACHE", "")
	if got := CacheRoot(); got != "/var/cache/onprem" {
		t.Errorf("CacheRoot without ONPREM_CACHE = %s", got)
	}
}
