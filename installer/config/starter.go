package config

import (
	_ "embed"
	"strconv"
	"strings"
)

//go:embed starter.yaml
var starterTemplate string

// Starter returns a commented onprem.yaml to start from: apiVersion, kind,
// spec.version (version, quoted), spec.domain (ci.example.com) and
// spec.profile are set; every other section is explained and shown as a
// commented-out example.
func Starter(version string) []byte {
	return []byte(strings.Replace(starterTemplate, "{{ .Version }}", strconv.Quote(version), 1))
}
