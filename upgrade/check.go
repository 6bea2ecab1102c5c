package upgrade

import (
	"errors"
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"
	goversion "github.com/hashicorp/go-version"

	"onprem.dev/onprem/installer/release"
)

// StepError says that one step of an upgrade path cannot be applied by this
// onprem or on this cluster.
type StepError struct {
	// N is the step's number (from 1) and Of the number of steps.
	N, Of int
	// From is the version the step starts from ("" for the first step: Check
	// is given the path without the installed version). To is the release
	// the step applies.
	From, To string
	Err      error
}

func (e *StepError) Error() string {
	if e.From == "" {
		return fmt.Sprintf("step %d of %d (upgrade to %s): %v", e.N, e.Of, e.To, e.Err)
	}
	return fmt.Sprintf("step %d of %d (%s → %s): %v", e.N, e.Of, e.From, e.To, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// Check verifies that every release on path (as returned by Path) can be
// applied: this onprem (installer, its own version) is at least the
// release's MinInstallerVersion, and the cluster's Kubernetes server version
// (as the server reports it, e.g. v1.33.4-eks-1234; "" skips the check) is in
// the release's range. It reports every failing step at once, each as a
// *StepError naming the step and the fix; nil when all pass.
func Check(path []*release.Release, installer string, kubernetes string) error {
	if _, err := semver.NewVersion(strings.TrimSpace(installer)); err != nil {
		return fmt.Errorf("onprem version %q is not a semantic version: %w", installer, err)
	}
	var kube *goversion.Version
	if strings.TrimSpace(kubernetes) != "" {
		v, err := goversion.NewVersion(strings.TrimSpace(kubernetes))
		if err != nil {
			return fmt.Errorf("kubernetes server version %q: %w", kubernetes, err)
		}
		// Provider suffixes (-eks-1234) parse as pre-releases; compare the
		// core, as release.SupportsKubernetes does.
		if kube, err = goversion.NewVersion(v.Core().String()); err != nil {
			return fmt.Errorf("kubernetes server version %q: %w", kubernetes, err)
		}
	}
	var errs []error
	for i, r := range path {
		step := func(err error) {
			e := &StepError{N: i + 1, Of: len(path), To: r.Version, Err: err}
			if i > 0 {
				e.From = path[i-1].Version
			}
			errs = append(errs, e)
		}
		if err := r.CheckInstaller(installer); err != nil {
			step(err)
		}
		if kube == nil {
			continue
		}
		ok, err := r.SupportsKubernetes(kube.String())
		switch {
		case err != nil:
			step(err)
		case !ok:
			step(kubernetesError(r, kubernetes, kube))
		}
	}
	return errors.Join(errs...)
}

// kubernetesError explains a Kubernetes version outside r's range, with the
// fix that fits the side it falls on.
func kubernetesError(r *release.Release, given string, v *goversion.Version) error {
	switch kubeSide(r.Kubernetes, v) {
	case tooOld:
		return fmt.Errorf("Kubernetes %s is too old for release %s, which supports %s: upgrade the cluster into that range before this step",
			given, r.Version, r.Kubernetes)
	case tooNew:
		return fmt.Errorf("Kubernetes %s is too new for release %s, which supports %s: the cluster is ahead of the platform and this step cannot run on it; "+
			"it needs a release of this step that supports Kubernetes %s (a newer onprem, or a bundle holding one)",
			given, r.Version, r.Kubernetes, given)
	default:
		return fmt.Errorf("Kubernetes %s is outside the range of release %s (%s): this step needs a cluster in that range",
			given, r.Version, r.Kubernetes)
	}
}

type side int

const (
	unknownSide side = iota
	tooOld
	tooNew
)

// kubeSide tells whether v fails the constraint by being too old or too new,
// from the operators of the parts it fails.
func kubeSide(constraint string, v *goversion.Version) side {
	cs, err := goversion.NewConstraint(constraint)
	if err != nil {
		return unknownSide
	}
	result := unknownSide
	for _, c := range cs {
		if c.Check(v) {
			continue
		}
		s := strings.TrimSpace(c.String())
		var got side
		switch {
		case strings.HasPrefix(s, ">"):
			got = tooOld
		case strings.HasPrefix(s, "<"):
			got = tooNew
		case strings.HasPrefix(s, "~>"):
			base, err := goversion.NewVersion(strings.TrimSpace(strings.TrimPrefix(s, "~>")))
			if err != nil {
				return unknownSide
			}
			got = tooNew
			if v.LessThan(base) {
				got = tooOld
			}
		default:
			return unknownSide
		}
		if result != unknownSide && result != got {
			return unknownSide
		}
		result = got
	}
	return result
}
