// Package runtimetest serves the fixture runtime chart
// (installer/runtime/testdata/gitops-runtime) from a chart repository on
// loopback, the way an operator's mirror serves the upstream one, for the
// tests of every ring.
package runtimetest

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
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
		t.Fatalf("runtimetest: %v", err)
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
		t.Fatalf("runtimetest: packaging the fixture chart: %v", err)
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
	host := testservers.Registry(t)
	client, err := registry.NewClient(registry.ClientOptPlainHTTP())
	if err != nil {
		t.Fatalf("runtimetest: registry client: %v", err)
	}
	for _, v := range versions {
		if _, err := client.Push(Archive(t, v), host+"/charts/"+ChartName+":"+v); err != nil {
			t.Fatalf("runtimetest: pushing the fixture chart %s: %v", v, err)
		}
	}
	return "oci://" + host + "/charts"
}
