//go:build linux

package images

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"onprem.dev/onprem/internal/fsutil"
)

// DebianSuite is the Debian release the database images are made from.
const DebianSuite = "bookworm"

// ServiceUID is the user (and group) of the database images: what their
// charts set as runAsUser/runAsGroup/fsGroup.
const ServiceUID = 999

// PostgresMajor is bookworm's PostgreSQL.
const PostgresMajor = "15"

//go:embed assets/debian-base.sh
var debianBaseScript string

//go:embed assets/debian-image.sh
var debianImageScript string

// debianSpec is an image made of a Debian root filesystem with packages
// installed (one layer) and a small layer of our own on top (entrypoint,
// configuration).
type debianSpec struct {
	name     string
	packages []string
	// user is created with ServiceUID before the packages are installed,
	// so that the packages' own maintainer scripts find it.
	user, home string
	// post runs in the chroot after the installation.
	post string
	// entrypoint, when set, is a main package of this module installed as
	// /usr/local/bin/docker-entrypoint.sh (where the official images keep
	// theirs, and where the charts' commands call it).
	entrypoint string
	files      []file
	config     v1.Config
}

const basePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// entrypointPath is where a Debian image's entrypoint is installed (where
// the official images keep theirs, and where the charts' commands call
// it).
const entrypointPath = "/usr/local/bin/docker-entrypoint.sh"

var postgresImage = debianSpec{
	name:     "postgresql",
	packages: []string{"postgresql-" + PostgresMajor},
	user:     "postgres", home: "/var/lib/postgresql",
	// The package's default cluster goes: the entrypoint makes one in
	// PGDATA. /run/postgresql (= /var/run/postgresql) holds the socket.
	post: `rm -rf /var/lib/postgresql/` + PostgresMajor + ` /etc/postgresql/` + PostgresMajor + `
mkdir -p /var/lib/postgresql/data /run/postgresql /docker-entrypoint-initdb.d
chown 999:999 /var/lib/postgresql /var/lib/postgresql/data /run/postgresql
chmod 1777 /var/lib/postgresql/data
chmod 2777 /run/postgresql`,
	entrypoint: mainModule + "/e2e/images/cmd/postgres-entrypoint",
	config: v1.Config{
		Entrypoint: []string{"docker-entrypoint.sh"},
		Cmd:        []string{"postgres"},
		Env: []string{
			// The server's own folder first: pg_isready, psql, initdb,
			// pg_ctl are the real programs, not Debian's wrappers.
			"PATH=/usr/lib/postgresql/" + PostgresMajor + "/bin:" + basePath,
			"PGDATA=/var/lib/postgresql/data",
			"LANG=C.UTF-8",
		},
		User:         "999:999",
		WorkingDir:   "/var/lib/postgresql",
		ExposedPorts: ports(5432),
		StopSignal:   "SIGINT", // fast shutdown
	},
}

// postgresHAImage is the PostgreSQL image with Debian's Patroni: the
// release's postgresql-ha, which the postgresql chart runs under
// spec.availability high (its pods' command is `patroni <config>`, with
// the server's own programs found on PATH).
var postgresHAImage = func() debianSpec {
	s := postgresImage.with("postgresql-ha", "patroni")
	// Patroni, the container's first process, stops (stopping PostgreSQL
	// cleanly) on SIGTERM and ignores the SIGINT that the postgres image
	// stops with: with it, every member that a roll or a drain stopped
	// ran on until the kubelet killed it at the end of its grace period.
	s.config.StopSignal = "SIGTERM"
	return s
}()

// redisHAImage is the Redis image with what the redis chart's high
// availability script uses beside redis-server and redis-cli (Sentinel is
// redis-server --sentinel): curl, with which its keeper points the Service
// redis at the master.
var redisHAImage = redisImage.with("redis-ha", "curl")

// with is s named name, with more packages.
func (s debianSpec) with(name string, packages ...string) debianSpec {
	s.name = name
	s.packages = append(append([]string(nil), s.packages...), packages...)
	return s
}

var redisImage = debianSpec{
	name:     "redis",
	packages: []string{"redis-server"},
	user:     "redis", home: "/var/lib/redis",
	post: `mkdir -p /data
chown 999:999 /data`,
	config: v1.Config{
		Cmd:          []string{"redis-server"},
		Env:          []string{"PATH=" + basePath, "LANG=C.UTF-8"},
		User:         "999:999",
		WorkingDir:   "/data",
		ExposedPorts: ports(6379),
	},
}

// rabbitmqDefaults is the image's /etc/rabbitmq/conf.d/10-defaults.conf,
// which the rabbitmq chart keeps beside its own 90-onprem.conf.
const rabbitmqDefaults = `# Defaults of the onprem e2e RabbitMQ image (onprem.dev/onprem/e2e/images).
# A container logs to its output; the root filesystem may be read-only.
log.console = true
log.file = false
# The guest user (when no other is configured) may connect from anywhere.
loopback_users.guest = false
listeners.tcp.default = 5672
management.tcp.port = 15672
`

var rabbitmqImage = debianSpec{
	name:     "rabbitmq",
	packages: []string{"rabbitmq-server"},
	user:     "rabbitmq", home: "/var/lib/rabbitmq",
	post: `rm -rf /var/lib/rabbitmq/mnesia /var/lib/rabbitmq/.erlang.cookie
mkdir -p /etc/rabbitmq/conf.d /var/log/rabbitmq
chown -R 999:999 /var/lib/rabbitmq /var/log/rabbitmq`,
	entrypoint: mainModule + "/e2e/images/cmd/rabbitmq-entrypoint",
	files: []file{
		{path: "/etc/rabbitmq/conf.d/10-defaults.conf", data: []byte(rabbitmqDefaults), mode: 0o644},
		// What the official -management images enable.
		{path: "/etc/rabbitmq/enabled_plugins", data: []byte("[rabbitmq_management,rabbitmq_prometheus].\n"), mode: 0o644},
	},
	config: v1.Config{
		Entrypoint: []string{"docker-entrypoint.sh"},
		Cmd:        []string{"rabbitmq-server"},
		Env: []string{
			// The real scripts, not Debian's wrappers (which send the
			// server's output to a file and insist on the user's name).
			"PATH=/usr/lib/rabbitmq/bin:" + basePath,
			"HOME=/var/lib/rabbitmq",
			"LANG=C.UTF-8",
		},
		User:         "999:999",
		WorkingDir:   "/var/lib/rabbitmq",
		ExposedPorts: ports(4369, 5671, 5672, 15672, 15692, 25672),
	},
}

func (b *builder) baseStamp() string {
	return hashOf("debian-base", DebianSuite, debianBaseScript)
}

func (b *builder) rootfsStamp(s debianSpec) string {
	return hashOf("debian-rootfs", b.baseStamp(), debianImageScript, strings.Join(s.packages, " "),
		s.user, fmt.Sprint(ServiceUID), s.home, s.post)
}

// debianStamp hashes the root filesystem's recipe, the entrypoint's
// sources, the files and the configuration.
func (b *builder) debianStamp(s debianSpec) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		parts := []string{layoutVersion, b.rootfsStamp(s)}
		if s.entrypoint != "" {
			gs, err := b.goStamp(ctx, s.entrypoint)
			if err != nil {
				return "", err
			}
			parts = append(parts, gs)
		}
		for _, f := range s.files {
			parts = append(parts, f.path, string(f.data), f.link, fmt.Sprint(f.mode, f.dir))
		}
		cfg, err := json.Marshal(s.config)
		if err != nil {
			return "", err
		}
		return hashOf(append(parts, string(cfg))...), nil
	}
}

// debianImage builds the image: the cached root filesystem with the
// packages as one layer, then the entrypoint and files as a second.
func (b *builder) debianImage(s debianSpec) func(context.Context, string) (v1.Image, string, error) {
	return func(ctx context.Context, scratch string) (v1.Image, string, error) {
		rootfs, err := b.debianRootfs(ctx, s)
		if err != nil {
			return nil, "", err
		}
		base, err := tarLayer(filepath.Join(rootfs, "rootfs.tar"))
		if err != nil {
			return nil, "", err
		}
		layers := []v1.Layer{base}
		files := append([]file(nil), s.files...)
		if s.entrypoint != "" {
			bin := filepath.Join(scratch, "docker-entrypoint.sh")
			if err := b.goBuild(ctx, s.name+"-entrypoint", s.entrypoint, bin); err != nil {
				return nil, "", err
			}
			files = append(files, file{path: entrypointPath, src: bin, mode: 0o755})
		}
		if len(files) > 0 {
			l, err := filesLayer(files)
			if err != nil {
				return nil, "", err
			}
			layers = append(layers, l)
		}
		versions, err := os.ReadFile(filepath.Join(rootfs, "versions.txt"))
		if err != nil {
			return nil, "", fmt.Errorf("%s: the installed package versions: %w", s.name, err)
		}
		content := "Debian " + DebianSuite + " " + strings.Join(strings.Fields(string(versions)), " ")
		img, err := assemble(layers, s.config)
		return img, content, err
	}
}

// debianRootfs returns the folder holding rootfs.tar and versions.txt of
// s, building them when the cache lacks them: the base root filesystem
// (debootstrap, cached too), the user, the packages.
func (b *builder) debianRootfs(ctx context.Context, s debianSpec) (string, error) {
	base, err := b.debianBase(ctx)
	if err != nil {
		return "", err
	}
	sources, err := debianSources()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(b.dir, "rootfs", s.name)
	t0 := time.Now()
	built, err := b.produce(ctx, dir, b.rootfsStamp(s), func(ctx context.Context, tmp string) error {
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			return err
		}
		work, cleanup, err := b.workDir(s.name)
		if err != nil {
			return err
		}
		defer cleanup()
		b.log("images: %s: installing %s on Debian %s", s.name, strings.Join(s.packages, " "), DebianSuite)
		env := []string{
			"SOURCES=" + sources, "PACKAGES=" + strings.Join(s.packages, " "),
			"USER_NAME=" + s.user, fmt.Sprintf("USER_ID=%d", ServiceUID), "USER_HOME=" + s.home, "POST=" + s.post,
		}
		if err := b.run(ctx, "rootfs-"+s.name, cmdOpts{env: env}, "bash", "-c", debianImageScript, "debian-image.sh",
			base, work, filepath.Join(tmp, "rootfs.tar"), filepath.Join(tmp, "versions.txt")); err != nil {
			return fmt.Errorf("installing %s in a Debian root filesystem (the Debian mirror must answer: %s): %w",
				strings.Join(s.packages, " "), firstLine(sources), err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if built {
		b.record("rootfs "+s.name, time.Since(t0))
	}
	return dir, nil
}

// debianBase is the cached minimal root filesystem (debootstrap
// --variant=minbase), built when missing.
func (b *builder) debianBase(ctx context.Context) (string, error) {
	path := filepath.Join(b.dir, "rootfs", "base-"+DebianSuite+".tar")
	if fresh(path, b.baseStamp()) {
		return path, nil
	}
	if os.Geteuid() != 0 {
		return "", errors.New("building a Debian root filesystem (debootstrap, chroot) needs root")
	}
	if err := b.aptInstall(ctx, "debootstrap"); err != nil {
		return "", err
	}
	mirror, err := debianMirror()
	if err != nil {
		return "", err
	}
	t0 := time.Now()
	built, err := b.produce(ctx, path, b.baseStamp(), func(ctx context.Context, tmp string) error {
		work, cleanup, err := b.workDir("base")
		if err != nil {
			return err
		}
		defer cleanup()
		b.log("images: debootstrap %s from %s (about a minute)", DebianSuite, mirror)
		if err := b.run(ctx, "rootfs-base", cmdOpts{}, "bash", "-c", debianBaseScript, "debian-base.sh",
			work, mirror, DebianSuite, tmp); err != nil {
			return fmt.Errorf("debootstrap %s (the Debian mirror %s must answer; ONPREM_DEBIAN_MIRROR overrides it): %w", DebianSuite, mirror, err)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	if built {
		b.record("rootfs base "+DebianSuite, time.Since(t0))
	}
	return path, nil
}

// workDir is a scratch folder under the cache (same file system as the
// results); cleanup unmounts whatever a killed script left mounted there
// and removes it.
func (b *builder) workDir(name string) (string, func(), error) {
	dir := filepath.Join(b.dir, "work", fmt.Sprintf("%s-%d", name, os.Getpid()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, fmt.Errorf("creating the scratch folder %s: %w", dir, err)
	}
	return dir, func() {
		_ = fsutil.UnmountUnder(dir)
		_ = os.RemoveAll(dir)
	}, nil
}

// aptInstall installs Debian packages on this machine when any is
// missing (root only; apt's own lock serialises with other users of apt).
func (b *builder) aptInstall(ctx context.Context, pkgs ...string) error {
	var missing []string
	for _, p := range pkgs {
		out, err := output(ctx, "", nil, "dpkg-query", "-W", "-f=${db:Status-Status}", p)
		if err != nil || strings.TrimSpace(string(out)) != "installed" {
			missing = append(missing, p)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	command := "apt-get update && apt-get install -y --no-install-recommends " + strings.Join(missing, " ")
	if os.Geteuid() != 0 {
		return fmt.Errorf("the Debian packages %s are missing; install them as root: %s", strings.Join(missing, " "), command)
	}
	env := []string{"DEBIAN_FRONTEND=noninteractive"}
	lock := "-oDPkg::Lock::Timeout=600"
	if err := b.run(ctx, "host-packages", cmdOpts{env: env}, "apt-get", lock, "update"); err != nil {
		return fmt.Errorf("installing %s on this machine: %w", strings.Join(missing, " "), err)
	}
	args := append([]string{lock, "install", "-y", "--no-install-recommends"}, missing...)
	if err := b.run(ctx, "host-packages", cmdOpts{env: env}, "apt-get", args...); err != nil {
		return fmt.Errorf("installing %s on this machine: %w", strings.Join(missing, " "), err)
	}
	return nil
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}
