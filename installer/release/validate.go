package release

import (
	"onprem.dev/onprem/installer/signing"

	"errors"
	"fmt"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/Masterminds/semver/v3"
	goversion "github.com/hashicorp/go-version"
	"k8s.io/apimachinery/pkg/util/validation"
)

var (
	digestRE = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
	tagRE    = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	repoRE   = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)
	dateRE   = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
)

var groups = []string{GroupIngress, GroupInfrastructure, GroupLegacy, GroupProvisioning, GroupPipelines, GroupGitOps, GroupBackup}

// Validate checks a release manifest and reports every problem at once.
func (r *Release) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }

	if r.APIVersion != APIVersion {
		bad("apiVersion: %q, want %q", r.APIVersion, APIVersion)
	}
	if r.Kind != Kind {
		bad("kind: %q, want %q", r.Kind, Kind)
	}
	for i, k := range r.Trust {
		if strings.TrimSpace(k.Name) == "" {
			bad("trust[%d].name: required (whose key it is)", i)
		}
		if _, err := signing.ParsePublicKey([]byte(k.PublicKey)); err != nil {
			bad("trust[%d].publicKey: %v", i, err)
		}
	}
	if _, err := semver.StrictNewVersion(r.Version); err != nil {
		bad("version: %q is not a semantic version (like 2.7.0): %v", r.Version, err)
	}
	if r.Date != "" {
		if _, err := time.Parse(time.DateOnly, r.Date); err != nil || !dateRE.MatchString(r.Date) {
			bad("date: %q is not YYYY-MM-DD", r.Date)
		}
	}
	if _, err := semver.StrictNewVersion(r.MinInstallerVersion); err != nil {
		bad("minInstallerVersion: %q is not a semantic version: %v", r.MinInstallerVersion, err)
	}
	if strings.TrimSpace(r.Kubernetes) == "" {
		bad("kubernetes: the supported Kubernetes range is required (e.g. \">= 1.30, < 1.37\")")
	} else if _, err := goversion.NewConstraint(r.Kubernetes); err != nil {
		bad("kubernetes: %q is not a version constraint: %v", r.Kubernetes, err)
	}
	if r.UpgradeFrom != "" {
		c, err := semver.NewConstraint(r.UpgradeFrom)
		if err != nil {
			bad("upgradeFrom: %q is not a semver constraint: %v", r.UpgradeFrom, err)
		} else if v, err := semver.StrictNewVersion(r.Version); err == nil && c.Check(v) {
			bad("upgradeFrom: %q admits the release's own version %s", r.UpgradeFrom, r.Version)
		}
	}

	images := map[string]bool{}
	for i, img := range r.Images {
		p := fmt.Sprintf("images[%d]", i)
		if img.Name == "" {
			bad("%s.name: required", p)
		} else if images[img.Name] {
			bad("%s.name: %q is defined twice", p, img.Name)
		}
		images[img.Name] = true
		if !repoRE.MatchString(img.Repository) {
			bad("%s.repository: %q is not a valid repository", p, img.Repository)
		} else if img.Platform && strings.Contains(strings.SplitN(img.Repository, "/", 2)[0], ".") {
			bad("%s.repository: %q names a registry host; a platform image's repository is a path under spec.images.platform", p, img.Repository)
		}
		if !tagRE.MatchString(img.Tag) {
			bad("%s.tag: %q is not a valid tag", p, img.Tag)
		}
		if img.Digest != "" && !digestRE.MatchString(img.Digest) {
			bad("%s.digest: %q is not sha256:<64 hex digits>", p, img.Digest)
		}
	}

	comps := map[string]Component{}
	for i, c := range r.Components {
		p := fmt.Sprintf("components[%d]", i)
		if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 {
			bad("%s.name: %q: %s", p, c.Name, strings.Join(msgs, "; "))
		} else if _, dup := comps[c.Name]; dup {
			bad("%s.name: %q is defined twice", p, c.Name)
		}
		comps[c.Name] = c
		if c.Chart == "" {
			bad("%s.chart: required", p)
		}
		if _, err := semver.StrictNewVersion(c.ChartVersion); err != nil {
			bad("%s.chartVersion: %q is not a semantic version", p, c.ChartVersion)
		}
		if !slices.Contains(groups, c.Group) {
			bad("%s.group: %q is not one of %s", p, c.Group, strings.Join(groups, ", "))
		}
		unknownImages(p+".images", c.Images, images, bad)
		if len(c.Images) == 0 {
			bad("%s.images: a component needs at least one image", p)
		}
	}
	for i, c := range r.Components {
		for _, d := range c.DependsOn {
			if _, ok := comps[d]; !ok {
				bad("components[%d].dependsOn: %q is not a component of this release", i, d)
			}
		}
	}
	if cycle := findCycle(r.Components); cycle != nil {
		bad("components: dependency cycle %s", strings.Join(cycle, " -> "))
	}

	if a := r.Runner; a != nil {
		if a.Chart == "" {
			bad("runner.chart: required")
		}
		if _, err := semver.StrictNewVersion(a.ChartVersion); err != nil {
			bad("runner.chartVersion: %q is not a semantic version", a.ChartVersion)
		}
		if len(a.Images) == 0 {
			bad("runner.images: the runner needs at least one image")
		}
		unknownImages("runner.images", a.Images, images, bad)
	}

	if rc := r.Runtime; rc != nil {
		if rc.Chart == "" {
			bad("runtime.chart: required")
		}
		if _, err := semver.StrictNewVersion(rc.ChartVersion); err != nil {
			bad("runtime.chartVersion: %q is not a semantic version", rc.ChartVersion)
		}
		switch u, err := url.Parse(rc.Repository); {
		case rc.Repository == "":
			bad("runtime.repository: required (oci://HOST/PATH or https://HOST/PATH)")
		case err != nil || u.Host == "" || (u.Scheme != "oci" && u.Scheme != "https" && u.Scheme != "http"):
			bad("runtime.repository: %q is not an oci://, https:// or http:// chart repository", rc.Repository)
		}
		if rc.Digest != "" && !digestRE.MatchString(rc.Digest) {
			bad("runtime.digest: %q is not sha256:<64 hex digits>", rc.Digest)
		}
		written := map[string]string{}
		known := map[string]bool{}
		for _, k := range RuntimeContractKeys {
			known[k] = true
		}
		for _, k := range slices.Sorted(maps.Keys(rc.Contract)) {
			switch {
			case !known[k]:
				bad("runtime.contract.%s: not a contract key (valid: %s)", k, strings.Join(RuntimeContractKeys, ", "))
			case checkValuesPath(rc.Contract[k]) != "":
				bad("runtime.contract.%s: %s", k, checkValuesPath(rc.Contract[k]))
			}
			if other, dup := written[rc.Contract[k]]; dup {
				bad("runtime.contract.%s: values path %s is also written by %s", k, rc.Contract[k], other)
			}
			written[rc.Contract[k]] = "runtime.contract." + k
		}
		for _, k := range RequiredContractKeys {
			if rc.Contract[k] == "" {
				bad("runtime.contract.%s: required: the values path where chart %s %s reads the %s (onprem fills in a chart version through its contract only)", k, rc.Chart, rc.ChartVersion, k)
			}
		}
		for i, ps := range rc.PullSecrets {
			p := fmt.Sprintf("runtime.pullSecrets[%d]", i)
			if why := checkValuesPath(ps.Path); why != "" {
				bad("%s.path: %s", p, why)
			}
			if ps.Format != ListOfReferences && ps.Format != ListOfNames {
				bad("%s.format: %q is not %s ([{name: NAME}]) or %s ([NAME])", p, ps.Format, ListOfReferences, ListOfNames)
			}
			if other, dup := written[ps.Path]; dup {
				bad("%s: values path %s is also written by %s", p, ps.Path, other)
			}
			written[ps.Path] = p
		}
	}

	migs := map[string]bool{}
	for i, m := range r.Migrations {
		p := fmt.Sprintf("migrations[%d]", i)
		if msgs := validation.IsDNS1123Label(m.Name); len(msgs) > 0 {
			bad("%s.name: %q: %s", p, m.Name, strings.Join(msgs, "; "))
		} else if migs[m.Name] {
			bad("%s.name: %q is defined twice", p, m.Name)
		}
		migs[m.Name] = true
		c, ok := comps[m.Component]
		if !ok {
			bad("%s.component: %q is not a component of this release", p, m.Component)
		} else if c.Chart != "service" {
			bad("%s.component: %q is not a platform service; migrations run a service's image", p, m.Component)
		}
		if len(m.Args) == 0 {
			bad("%s.args: the migration command is required", p)
		}
		if len(m.Touches) == 0 {
			bad("%s.touches: name the data the migration changes, so that it is backed up", p)
		}
		for j, t := range m.Touches {
			if t.Engine != "mongodb" && t.Engine != "postgresql" {
				bad("%s.touches[%d].engine: %q is not mongodb or postgresql", p, j, t.Engine)
			}
			if _, ok := comps[t.Service]; !ok {
				bad("%s.touches[%d].service: %q is not a component of this release", p, j, t.Service)
			}
		}
		if m.Timeout != "" {
			if d, err := time.ParseDuration(m.Timeout); err != nil || d <= 0 {
				bad("%s.timeout: %q is not a positive duration (like 10m)", p, m.Timeout)
			}
		}
	}
	return errors.Join(errs...)
}

// findCycle returns one dependency cycle, or nil.
func findCycle(cs []Component) []string {
	deps := map[string][]string{}
	for _, c := range cs {
		deps[c.Name] = c.DependsOn
	}
	const (
		white = iota
		grey
		black
	)
	color := map[string]int{}
	var stack []string
	var visit func(string) []string
	visit = func(n string) []string {
		color[n] = grey
		stack = append(stack, n)
		for _, d := range deps[n] {
			if _, known := deps[d]; !known {
				continue
			}
			switch color[d] {
			case grey:
				i := slices.Index(stack, d)
				return append(append([]string(nil), stack[i:]...), d)
			case white:
				if c := visit(d); c != nil {
					return c
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[n] = black
		return nil
	}
	for _, c := range cs {
		if color[c.Name] == white {
			if cyc := visit(c.Name); cyc != nil {
				return cyc
			}
		}
	}
	return nil
}

// CheckInstaller returns an error when installer (this onprem's version) is
// older than the release's minimum.
func (r *Release) CheckInstaller(installer string) error {
	min, err := semver.StrictNewVersion(r.MinInstallerVersion)
	if err != nil {
		return fmt.Errorf("release %s: minInstallerVersion: %w", r.Version, err)
	}
	have, err := semver.NewVersion(installer)
	if err != nil {
		return fmt.Errorf("installer version %q: %w", installer, err)
	}
	if have.LessThan(min) {
		return fmt.Errorf("release %s needs onprem %s or newer; this is onprem %s: download a newer onprem", r.Version, min, have)
	}
	return nil
}

// SupportsKubernetes reports whether a Kubernetes server version (as the
// server reports it, e.g. v1.33.4-eks-1234) is in the release's range.
func (r *Release) SupportsKubernetes(server string) (bool, error) {
	c, err := goversion.NewConstraint(r.Kubernetes)
	if err != nil {
		return false, fmt.Errorf("release %s: kubernetes: %w", r.Version, err)
	}
	v, err := goversion.NewVersion(server)
	if err != nil {
		return false, fmt.Errorf("kubernetes version %q: %w", server, err)
	}
	// Provider suffixes (-eks-1234, -gke.100) parse as pre-releases, which
	// constraints never match; compare the release core only.
	core, err := goversion.NewVersion(v.Core().String())
	if err != nil {
		return false, err
	}
	return c.Check(core), nil
}

// checkValuesPath describes what is wrong with a dot-separated values
// path, "" when nothing is.
func checkValuesPath(p string) string {
	if p == "" {
		return "an empty values path"
	}
	for _, k := range strings.Split(p, ".") {
		if k == "" || strings.TrimSpace(k) != k {
			return fmt.Sprintf("%q is not a values path (dot-separated keys, none empty)", p)
		}
	}
	return ""
}

// unknownImages reports (bad), in the order of their keys, the images of
// refs (key: image name) that images does not list; at names where refs
// stands in the manifest ("components[0].images", "runner.images").
func unknownImages(at string, refs map[string]string, images map[string]bool, bad func(format string, a ...any)) {
	for _, k := range slices.Sorted(maps.Keys(refs)) {
		if !images[refs[k]] {
			bad("%s.%s: image %q is not in images", at, k, refs[k])
		}
	}
}
