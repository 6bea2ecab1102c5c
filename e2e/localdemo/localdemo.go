//go:build linux

// Package localdemo prepares, with no registry, what 'onprem local up'
// needs on this machine, built as one plan (e2e/prebuild): the kind node
// image (e2e/kindcluster, which also starts dockerd with the runtime this
// host needs) and one docker-archive of the platform's images (e2e/images), named as every
// embedded release names them. 'make demo' and installer/local's kind test
// use it through Prepare.
//
// The images are the e2e ring's stand-ins: every platform service runs the
// reference service (e2e/refservice), MongoDB is FerretDB, Redis,
// PostgreSQL and RabbitMQ are Debian's, Traefik is built from source.
package localdemo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"onprem.dev/onprem/e2e/images"
	"onprem.dev/onprem/e2e/prebuild"
	"onprem.dev/onprem/installer/config"
	"onprem.dev/onprem/installer/release"
	"onprem.dev/onprem/internal/fsutil"
)

// StandIns says what the demo's images really are; the demo prints it.
const StandIns = "the platform's services all run the reference service (e2e/refservice) and MongoDB is FerretDB " +
	"(e2e/images): stand-ins built here with no registry, not the real platform images"

// Options configures Prepare.
type Options struct {
	// Log receives progress lines, printf style (nil: slog at Info).
	Log func(format string, args ...any)
	// Archive is where the image archive is written (default:
	// $ONPREM_CACHE/localdemo/platform-images.tar).
	Archive string
	// PlatformImages is spec.images.platform of the installations that
	// will use the archive (default: config.DefaultPlatformImages).
	PlatformImages string
}

// Result is what Prepare made.
type Result struct {
	// NodeImage is the kind node image in the local docker.
	NodeImage string
	// Archive is the docker-archive of the platform's images.
	Archive string
	// Refs are the references the archive holds.
	Refs []string
	// Missing are release images that have no stand-in (the legacy
	// services, the runner's and runtimes' images): a configuration that
	// needs them cannot run offline.
	Missing []string
}

// Prepare builds (or finds in the caches) the node image and the platform's
// images, and writes the archive unless it already holds those images.
func Prepare(ctx context.Context, o Options) (*Result, error) {
	logf := o.Log
	if logf == nil {
		logf = func(format string, args ...any) { slog.Info(fmt.Sprintf(format, args...)) }
	}
	if o.Archive == "" {
		o.Archive = filepath.Join(fsutil.CacheRoot(), "localdemo", "platform-images.tar")
	}
	if o.PlatformImages == "" {
		o.PlatformImages = config.DefaultPlatformImages
	}
	// The platform's images: the GitOps runtime's stand-in is the e2e's
	// (the demo installs no runtime).
	// The demo runs spec.availability single: no high-availability image.
	names := slices.DeleteFunc(images.SingleNames(), func(n string) bool { return n == images.GitopsRuntime })
	pre, err := prebuild.Kind(ctx, prebuild.Options{Log: logf, Images: names})
	if err != nil {
		return nil, fmt.Errorf("localdemo: the kind node image and the platform's images: %w", err)
	}
	tc, built := pre.Toolchain, pre.Images
	rels, err := release.Embedded()
	if err != nil {
		return nil, err
	}
	// Every release's names: the same images under more tags cost nothing,
	// and 'local up --platform-version' and upgrades then work offline.
	var all []images.Image
	seen := map[string]bool{}
	missingSet := map[string]bool{}
	for _, rel := range rels.All() {
		imgs, missing := images.ForRelease(rel, o.PlatformImages, built)
		for _, img := range imgs {
			if !seen[img.Ref] {
				seen[img.Ref] = true
				all = append(all, img)
			}
		}
		for _, m := range missing {
			missingSet[m] = true
		}
	}
	res := &Result{NodeImage: tc.NodeImage, Archive: o.Archive}
	for _, img := range all {
		res.Refs = append(res.Refs, img.Ref)
	}
	slices.Sort(res.Refs)
	for m := range missingSet {
		res.Missing = append(res.Missing, m)
	}
	slices.Sort(res.Missing)

	stamp, err := archiveStamp(all)
	if err != nil {
		return nil, err
	}
	stampFile := o.Archive + ".stamp"
	if old, err := os.ReadFile(stampFile); err == nil && string(old) == stamp {
		if _, err := os.Stat(o.Archive); err == nil {
			logf("localdemo: %s is up to date (%d references)", o.Archive, len(all))
			return res, nil
		}
	}
	t0 := time.Now()
	logf("localdemo: writing %s (%d references)", o.Archive, len(all))
	if err := images.WriteDockerArchive(o.Archive, all); err != nil {
		return nil, err
	}
	if err := os.WriteFile(stampFile, []byte(stamp), 0o644); err != nil {
		return nil, fmt.Errorf("localdemo: %w", err)
	}
	logf("localdemo: wrote %s in %s", o.Archive, time.Since(t0).Round(100*time.Millisecond))
	return res, nil
}

// archiveStamp hashes every reference with its image's digest.
func archiveStamp(imgs []images.Image) (string, error) {
	h := sha256.New()
	for _, img := range imgs {
		if img.Image == nil {
			return "", errors.New("localdemo: " + img.Ref + " has no image")
		}
		d, err := img.Image.Digest()
		if err != nil {
			return "", fmt.Errorf("localdemo: %s: %w", img.Ref, err)
		}
		fmt.Fprintf(h, "%s %s\n", img.Ref, d)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
