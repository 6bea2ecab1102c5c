// Package charts holds the Helm charts that onprem writes, one folder per
// chart, embedded in the binary. README.md in this folder is the values
// contract between the render pipeline and the charts.
package charts

import "embed"

// FS holds every chart folder (Chart.yaml, values.yaml, templates/).
//
//go:embed all:*
var FS embed.FS
