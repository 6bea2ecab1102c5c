//go:build linux

package testservers

import "testing"

// Chromium returns the path of Debian's Chromium, installing the package
// when it is missing (see ensurePackage), for tests that drive a real
// browser (headless, through the DevTools protocol).
func Chromium(t testing.TB) string {
	t.Helper()
	return ensurePackage(t, "chromium", "/usr/bin/chromium", "chromium")
}
