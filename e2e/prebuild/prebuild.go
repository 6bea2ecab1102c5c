//go:build linux

// Package prebuild prepares, as one build plan (e2e/buildplan), what the
// kind ring and 'make demo' need: the kind toolchain and node image
// (e2e/kindcluster) and the platform's images (e2e/images). In one plan
// the downloads, apt and debootstrap of one overlap the compiles of the
// other, and the longest chains (the Kubernetes control plane, Traefik,
// FerretDB) start first; a warm run only checks stamps.
package prebuild

import (
	"context"
	"fmt"
	"log/slog"

	"onprem.dev/onprem/e2e/buildplan"
	"onprem.dev/onprem/e2e/images"
	"onprem.dev/onprem/e2e/kindcluster"
)

// Options configures Kind.
type Options struct {
	// Log receives progress lines, printf style (testing.TB.Logf fits);
	// nil logs through slog at Info level.
	Log func(format string, args ...any)
	// Images are the names of the images to build (default:
	// images.SingleNames(), what a platform of spec.availability single
	// runs, as `make demo`'s; the kind e2e asks for images.Names(), since
	// its high-availability step runs the HA images too).
	Images []string
}

// Result is what Kind prepared.
type Result struct {
	// Toolchain is the kind toolchain with its node image.
	Toolchain *kindcluster.Toolchain
	// Images are the built images, in the order asked.
	Images []images.Image
	// Report says which steps were cached and which were built.
	Report *buildplan.Report
}

// Kind builds (or finds in the caches) the kind toolchain and the images.
func Kind(ctx context.Context, o Options) (*Result, error) {
	logf := o.Log
	if logf == nil {
		logf = func(format string, args ...any) { slog.Info(fmt.Sprintf(format, args...)) }
	}
	names := o.Images
	if names == nil {
		names = images.SingleNames()
	}
	kp, err := kindcluster.NewPlan(ctx, kindcluster.Options{Log: logf})
	if err != nil {
		return nil, err
	}
	defer kp.Close()
	ip, err := images.NewPlan(ctx, names, logf)
	if err != nil {
		return nil, err
	}
	steps := append(kp.Steps(), ip.Steps()...)
	rep, err := buildplan.Run(ctx, buildplan.Options{StateDir: buildplan.StateDir(), Log: logf}, steps...)
	if err != nil {
		return nil, err // it names the failed step and says to run again
	}
	imgs, err := ip.Images(ctx)
	if err != nil {
		return nil, err
	}
	return &Result{Toolchain: kp.Toolchain(), Images: imgs, Report: rep}, nil
}
