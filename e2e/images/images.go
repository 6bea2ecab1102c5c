//go:build linux

package images

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"onprem.dev/onprem/e2e/buildplan"
	"onprem.dev/onprem/installer/release"
)

// Image is one built image and the reference it goes by.
type Image struct {
	// Name is what Build knows it as: traefik, mongodb, postgresql, redis,
	// rabbitmq, postgresql-ha, redis-ha, refservice, runner, onprem or
	// gitops-runtime.
	Name string
	// Ref is the full reference, e.g. docker.io/library/traefik:v3.6.12.
	Ref string
	// Image is the image (read from the cache's OCI layout).
	Image v1.Image
}

// Labels every image carries.
const (
	// LabelStamp is the hash of everything the image was built from.
	LabelStamp = "dev.onprem.e2e.stamp"
	// LabelContent says what really runs inside (the stand-ins differ
	// from the images whose references they take).
	LabelContent = "dev.onprem.e2e.content"
)

// RefserviceRef is the reference of the reference service's image before
// it is tagged as the platform's services (Retag, ForRelease).
const RefserviceRef = "onprem.dev/e2e/refservice:dev"

// recipe is how one image is made.
type recipe struct {
	// release is the release image whose reference the image takes.
	release string
	// ref is the reference of an image that takes no release image's
	// (ForRelease names it after the images it stands in for).
	ref string
	// stamp hashes every input of the image; it must be cheap.
	stamp func(ctx context.Context) (string, error)
	// make builds the image (and whatever it needs that the cache lacks),
	// keeping its own files in scratch until the image is written; content
	// says what runs inside.
	make func(ctx context.Context, scratch string) (img v1.Image, content string, err error)
	// debian is the Debian root filesystem the image is made of, if any
	// (Steps builds it as a step of its own).
	debian *debianSpec
}

// debianRecipe is the recipe of an image made from a Debian root
// filesystem.
func (b *builder) debianRecipe(release, ref string, s debianSpec) recipe {
	return recipe{release: release, ref: ref, stamp: b.debianStamp(s), make: b.debianImage(s), debian: &s}
}

func (b *builder) recipes() map[string]recipe {
	return map[string]recipe{
		"traefik":       {release: "traefik", stamp: b.traefikStamp, make: b.traefikImage},
		"mongodb":       {release: "mongodb", stamp: b.mongoStamp, make: b.mongoImage},
		"postgresql":    b.debianRecipe("postgresql", "", postgresImage),
		"redis":         b.debianRecipe("redis", "", redisImage),
		"postgresql-ha": b.debianRecipe("postgresql-ha", "", postgresHAImage),
		"redis-ha":      b.debianRecipe("redis-ha", "", redisHAImage),
		"rabbitmq":      b.debianRecipe("rabbitmq", "", rabbitmqImage),
		"refservice":    {ref: RefserviceRef, stamp: b.refserviceStamp, make: b.refserviceImage},
		GitopsRuntime:   b.debianRecipe("", GitopsRuntimeRef, gitopsImage),
		"runner":        {ref: RunnerRef, stamp: b.runnerStamp, make: b.runnerImage},
		"onprem":        {release: "onprem", stamp: b.onpremStamp, make: b.onpremImage},
	}
}

// HighAvailability are the images only spec.availability high runs
// (PostgreSQL with Patroni, Redis with what its Sentinel setup needs).
var HighAvailability = []string{"postgresql-ha", "redis-ha"}

// SingleNames lists the images Build knows but HighAvailability, sorted:
// what a platform of spec.availability single runs (the demo's, and the
// kind e2e's, whose cluster has one node).
func SingleNames() []string {
	return slices.DeleteFunc(Names(), func(n string) bool { return slices.Contains(HighAvailability, n) })
}

// Names lists the images Build knows, sorted.
func Names() []string {
	var names []string
	for n := range (&builder{}).recipes() {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Build builds the named images, or reads them from the cache when it
// holds them built from the same inputs ($ONPREM_CACHE/images; see the
// README for the layout). A warm Build builds nothing and takes no lock.
// The images are steps of an e2e/buildplan run (NewPlan): the Debian root
// filesystems (downloads and disk) overlap the Go builds. log receives
// progress lines (printf style; nil: slog).
func Build(ctx context.Context, names []string, log func(string, ...any)) ([]Image, error) {
	p, err := NewPlan(ctx, names, log)
	if err != nil {
		return nil, err
	}
	if _, err := buildplan.Run(ctx, buildplan.Options{StateDir: buildplan.StateDir(), Log: p.b.log}, p.Steps()...); err != nil {
		return nil, fmt.Errorf("images: %w", err)
	}
	return p.Images(ctx)
}

// Plan is Build's work as build steps, for a caller that runs them
// together with other steps (e2e/prebuild runs them with the kind
// toolchain's).
type Plan struct {
	b       *builder
	names   []string
	recipes map[string]recipe
	latest  *release.Release
}

// NewPlan checks the names and the cache folder.
func NewPlan(ctx context.Context, names []string, log func(string, ...any)) (*Plan, error) {
	if log == nil {
		log = func(format string, args ...any) { slog.Info(fmt.Sprintf(format, args...)) }
	}
	b := &builder{dir: CacheDir(), log: log}
	recipes := b.recipes()
	var unknown []string
	for _, n := range names {
		if _, ok := recipes[n]; !ok {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("images: unknown image %s; known: %s", strings.Join(unknown, ", "), strings.Join(Names(), ", "))
	}
	if err := os.MkdirAll(b.dir, 0o755); err != nil {
		return nil, fmt.Errorf("images: creating the cache folder %s (set ONPREM_CACHE to a writable folder): %w", b.dir, err)
	}
	latest, err := latestRelease()
	if err != nil {
		return nil, err
	}
	p := &Plan{b: b, recipes: recipes, latest: latest}
	seen := map[string]bool{}
	for _, n := range names {
		if !seen[n] {
			seen[n] = true
			p.names = append(p.names, n)
		}
	}
	return p, nil
}

// Steps are the build steps, named images/...: the Debian base root
// filesystem, each Debian image's root filesystem, and each image.
// Estimates are cold times on the project's 2-core machine.
func (p *Plan) Steps() []buildplan.Step {
	b := p.b
	var steps []buildplan.Step
	estimates := map[string]time.Duration{
		"traefik": 7 * time.Minute, "mongodb": 8 * time.Minute, "onprem": time.Minute,
		"postgresql": 30 * time.Second, "redis": 20 * time.Second, "rabbitmq": 30 * time.Second,
		"rootfs-postgresql": 2 * time.Minute, "rootfs-redis": 45 * time.Second, "rootfs-rabbitmq": 90 * time.Second,
		"rootfs-" + GitopsRuntime: time.Minute, "rootfs-postgresql-ha": 2 * time.Minute, "rootfs-redis-ha": 45 * time.Second,
	}
	base := false
	for _, n := range p.names {
		if p.recipes[n].debian != nil && !base {
			base = true
			steps = append(steps, buildplan.Step{
				Name: "images/debian-base", Uses: []buildplan.Resource{buildplan.IO, buildplan.Apt}, Estimate: 2 * time.Minute,
				Fresh: func(context.Context) bool {
					return fresh(filepath.Join(b.dir, "rootfs", "base-"+DebianSuite+".tar"), b.baseStamp())
				},
				Run: func(ctx context.Context) error { _, err := b.debianBase(ctx); return err },
			})
		}
	}
	for _, n := range p.names {
		r := p.recipes[n]
		img := buildplan.Step{
			Name: "images/" + n, Uses: []buildplan.Resource{buildplan.CPU}, Estimate: 30 * time.Second,
			Fresh: func(ctx context.Context) bool {
				stamp, err := b.stamp(ctx, n, r)
				return err == nil && fresh(filepath.Join(b.dir, "oci", n), stamp)
			},
			Run: func(ctx context.Context) error {
				if _, err := b.one(ctx, n, r); err != nil {
					return fmt.Errorf("images: %s: %w", n, err)
				}
				return nil
			},
		}
		if d, ok := estimates[n]; ok {
			img.Estimate = d
		}
		if spec := r.debian; spec != nil {
			rootfs := "images/rootfs-" + n
			steps = append(steps, buildplan.Step{
				Name: rootfs, Needs: []string{"images/debian-base"}, Uses: []buildplan.Resource{buildplan.IO},
				Estimate: estimates["rootfs-"+n],
				Fresh:    func(context.Context) bool { return fresh(filepath.Join(b.dir, "rootfs", n), b.rootfsStamp(*spec)) },
				Run:      func(ctx context.Context) error { _, err := b.debianRootfs(ctx, *spec); return err },
			})
			img.Needs = []string{rootfs}
		}
		steps = append(steps, img)
	}
	return steps
}

// Images reads the images from the cache (building any the steps did
// not), in the order they were named.
func (p *Plan) Images(ctx context.Context) ([]Image, error) {
	var out []Image
	for _, n := range p.names {
		r := p.recipes[n]
		img, err := p.b.one(ctx, n, r)
		if err != nil {
			return nil, fmt.Errorf("images: %s: %w", n, err)
		}
		ref := r.ref
		if rn := r.release; rn != "" {
			ri, ok := p.latest.Image(rn)
			if !ok {
				return nil, fmt.Errorf("images: %s: release %s names no image %q", n, p.latest.Version, rn)
			}
			ref = ri.Repository + ":" + ri.Tag
		}
		out = append(out, Image{Name: n, Ref: ref, Image: img})
	}
	return out, nil
}

// latestRelease is the newest embedded release manifest: the references
// the images take by default.
func latestRelease() (*release.Release, error) {
	set, err := release.Embedded()
	if err != nil {
		return nil, fmt.Errorf("images: reading the embedded release manifests: %w", err)
	}
	r := set.Latest()
	if r == nil {
		return nil, errors.New("images: no embedded release manifest")
	}
	return r, nil
}

// one returns the image called name from the cache, building it first
// when the cache lacks it or holds it built from other inputs.
func (b *builder) one(ctx context.Context, name string, r recipe) (v1.Image, error) {
	stamp, err := b.stamp(ctx, name, r)
	if err != nil {
		return nil, fmt.Errorf("computing the input stamp: %w", err)
	}
	dir := filepath.Join(b.dir, "oci", name)
	t0 := time.Now()
	built, err := b.produce(ctx, dir, stamp, func(ctx context.Context, tmp string) error {
		b.log("images: building %s (stamp %s)", name, stamp)
		scratch, err := os.MkdirTemp(b.dir, ".scratch-"+name+"-")
		if err != nil {
			return fmt.Errorf("a scratch folder: %w", err)
		}
		defer os.RemoveAll(scratch)
		img, content, err := r.make(ctx, scratch)
		if err != nil {
			return err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return err
		}
		cf = cf.DeepCopy()
		cf.Config.Labels[LabelStamp] = stamp
		cf.Config.Labels[LabelContent] = content
		if img, err = mutate.ConfigFile(img, cf); err != nil {
			return err
		}
		lp, err := layout.Write(tmp, empty.Index)
		if err != nil {
			return fmt.Errorf("writing the OCI layout %s: %w", tmp, err)
		}
		if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{annotationName: name})); err != nil {
			return fmt.Errorf("writing the OCI layout %s (is the disk full?): %w", tmp, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	img, err := loadCached(dir)
	if err != nil {
		return nil, err
	}
	if built {
		d := time.Since(t0)
		b.record("image "+name, d)
		b.log("images: built %s in %s", name, d.Round(100*time.Millisecond))
	} else {
		b.log("images: %s from the cache (stamp %s)", name, stamp)
	}
	return img, nil
}

// stamp is r's input stamp, computed once per builder (the sources do not
// change while a build runs).
func (b *builder) stamp(ctx context.Context, name string, r recipe) (string, error) {
	b.stampMu.Lock()
	defer b.stampMu.Unlock()
	if s, ok := b.stamps[name]; ok {
		return s, nil
	}
	s, err := r.stamp(ctx)
	if err != nil {
		return "", err
	}
	if b.stamps == nil {
		b.stamps = map[string]string{}
	}
	b.stamps[name] = s
	return s, nil
}

// annotationName marks the image in a cache layout.
const annotationName = "dev.onprem.e2e.image"

// loadCached reads the one image of a cache layout.
func loadCached(dir string) (v1.Image, error) {
	lp, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("reading the cached image %s (delete it to rebuild): %w", dir, err)
	}
	ii, err := lp.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("reading the cached image %s (delete it to rebuild): %w", dir, err)
	}
	im, err := ii.IndexManifest()
	if err != nil || len(im.Manifests) != 1 {
		return nil, fmt.Errorf("the cached image %s holds no single image (delete it to rebuild): %v", dir, err)
	}
	img, err := ii.Image(im.Manifests[0].Digest)
	if err != nil {
		return nil, fmt.Errorf("reading the cached image %s (delete it to rebuild): %w", dir, err)
	}
	return img, nil
}

// Retag returns img under each of refs (the same image, other names): the
// reference service's image as every platform service, for example.
func Retag(img Image, refs ...string) []Image {
	out := make([]Image, 0, len(refs))
	for _, r := range refs {
		out = append(out, Image{Name: img.Name, Ref: r, Image: img.Image})
	}
	return out
}

// releaseStandIns are release images that a built image of another name
// stands in for, when it is built: the runner's agent (a platform image,
// otherwise refservice) and its engine are both the runner image, which
// picks its role from its arguments.
var releaseStandIns = map[string]string{"runner-agent": "runner", "buildkit": "runner"}

// ForRelease names the built images as rel's images: each infrastructure
// image under the release's reference (repository:tag, no digest: a
// stand-in cannot match upstream's), runner (when built) under
// runner-agent and buildkit, a platform image built under its own name
// (postgresql-ha, redis-ha) as itself, and refservice under every other
// platform image (platformPrefix/repository:tag, as installer/images
// computes it).
// missing lists the release's images that built does not cover (sorted),
// so that the caller can decide whether its test needs them.
func ForRelease(rel *release.Release, platformPrefix string, built []Image) (imgs []Image, missing []string) {
	byName := map[string]Image{}
	for _, b := range built {
		byName[b.Name] = b
	}
	for _, ri := range rel.Images {
		name := ri.Name
		repo := ri.Repository
		if ri.Platform {
			// A platform image built under its own name (the databases'
			// high-availability images) is itself; the others are the
			// reference service.
			if _, ok := byName[ri.Name]; !ok {
				name = "refservice"
			}
			repo = strings.TrimSuffix(platformPrefix, "/") + "/" + ri.Repository
		}
		if s, ok := releaseStandIns[ri.Name]; ok {
			if _, ok := byName[s]; ok {
				name = s
			}
		}
		b, ok := byName[name]
		if !ok {
			missing = append(missing, ri.Name)
			continue
		}
		imgs = append(imgs, Retag(b, repo+":"+ri.Tag)...)
	}
	slices.Sort(missing)
	return imgs, missing
}
