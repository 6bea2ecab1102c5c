// Package gitopstest gives the tests of every ring the runtime chart: the
// real published packages (Upstream, read from ../shared/upstream beside
// the checkout) and a small fixture chart of onprem's own
// (installer/gitops/testdata/gitops-runtime) for unit tests, each served
// from a chart repository on loopback the way an operator's mirror serves
// the upstream one.
package gitopstest

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/registry"

	"onprem.dev/onprem/charts"
	"onprem.dev/onprem/e2e/testservers"
)

// ChartName is the fixture's (and the upstream chart's) name.
const ChartName = "gitops-runtime"

// Dir is the folder holding the fixture chart's folder.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// Chart loads the fixture at the given chart version (a release's
// runtime.chartVersion).
func Chart(t testing.TB, version string) *chartv2.Chart {
	t.Helper()
	ch, err := charts.LoadFrom(os.DirFS(Dir()), ChartName)
	if err != nil {
		t.Fatalf("gitopstest: %v", err)
	}
	ch.Metadata.Version = version
	return ch
}

// Archive packages the fixture at version into a .tgz and returns its
// bytes.
func Archive(t testing.TB, version string) []byte {
	t.Helper()
	path, err := chartutil.Save(Chart(t, version), t.TempDir())
	if err != nil {
		t.Fatalf("gitopstest: packaging the fixture chart: %v", err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// ServeOCI pushes the fixture at each version to a new in-process OCI
// registry on loopback (plain HTTP) and returns the chart repository to
// give onprem: oci://127.0.0.1:PORT/charts.
func ServeOCI(t testing.TB, versions ...string) string {
	t.Helper()
	return serveOCI(t, "the fixture chart", Archive, versions)
}

// serveOCI pushes the package archive gives for each version to a new
// in-process OCI registry on loopback and returns its chart repository.
func serveOCI(t testing.TB, what string, archive func(testing.TB, string) []byte, versions []string) string {
	t.Helper()
	host := testservers.Registry(t)
	client, err := registry.NewClient(registry.ClientOptPlainHTTP())
	if err != nil {
		t.Fatalf("gitopstest: registry client: %v", err)
	}
	for _, v := range versions {
		if _, err := client.Push(archive(t, v), host+"/charts/"+ChartName+":"+v); err != nil {
			t.Fatalf("gitopstest: pushing %s %s: %v", what, v, err)
		}
	}
	return "oci://" + host + "/charts"
}

// The real runtime chart: the published gitops-runtime packages, with
// their subcharts, that the shipped releases install. They are test data
// kept beside the checkout, in ../shared/upstream/gitops-runtime/ (see its
// PROVENANCE.md; CI has ../shared beside its clone), never in the
// repository.
const upstreamDir = "../shared/upstream/gitops-runtime"

// UpstreamPath is the path of the real chart's package at version
// (gitops-runtime-VERSION.tgz), found from the repository's root (the
// folder holding go.mod, above the test's working folder). A missing
// package fails the test: it is never skipped.
func UpstreamPath(t testing.TB, version string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("gitopstest: no go.mod above the test's folder: the real runtime chart is found from the repository's root")
		}
		dir = parent
	}
	p := filepath.Join(dir, filepath.FromSlash(upstreamDir), ChartName+"-"+version+".tgz")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("gitopstest: the real runtime chart %s %s: %v (the published packages are test data beside the checkout, in %s; CI has them)", ChartName, version, err, upstreamDir)
	}
	return p
}

// UpstreamArchive is the real chart's package at version.
func UpstreamArchive(t testing.TB, version string) []byte {
	t.Helper()
	data, err := os.ReadFile(UpstreamPath(t, version))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

var (
	upstreamMu     sync.Mutex
	upstreamCharts = map[string]*chartv2.Chart{}
)

// Upstream loads the real chart at version, with its subcharts, with the
// Helm SDK's loader (once per test binary: callers must not change it;
// rendering never does).
func Upstream(t testing.TB, version string) *chartv2.Chart {
	t.Helper()
	upstreamMu.Lock()
	defer upstreamMu.Unlock()
	if c, ok := upstreamCharts[version]; ok {
		return c
	}
	c, err := loader.LoadArchive(bytes.NewReader(UpstreamArchive(t, version)))
	if err != nil {
		t.Fatalf("gitopstest: loading the real runtime chart %s: %v", version, err)
	}
	upstreamCharts[version] = c
	return c
}

// ServeUpstreamOCI pushes the real chart's package at each version to a
// new in-process OCI registry on loopback (plain HTTP) and returns the
// chart repository to give onprem: oci://127.0.0.1:PORT/charts.
func ServeUpstreamOCI(t testing.TB, versions ...string) string {
	t.Helper()
	return serveOCI(t, "the real runtime chart", UpstreamArchive, versions)
}
