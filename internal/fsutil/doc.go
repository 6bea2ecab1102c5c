// Package fsutil holds the few file-system operations that the installer
// and the test rings must each get right once: replacing a file so that a
// reader never sees half of it (WriteFileAtomic), an exclusive lock that
// other processes sharing a cache folder respect (Lock), and taking down
// the mounts a killed build left below a folder (UnmountUnder), and where
// the caches kept outside the checkout live (CacheRoot).
package fsutil
