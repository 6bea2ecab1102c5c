//go:build linux

package images

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"onprem.dev/onprem/e2e/testservers"
)

const (
	mongoEntrypoint = mainModule + "/e2e/images/cmd/mongo-entrypoint"
	mongoShell      = mainModule + "/e2e/images/cmd/mongosh"
	mongoDump       = mainModule + "/e2e/images/cmd/mongodump"
	mongoRestore    = mainModule + "/e2e/images/cmd/mongorestore"
)

// busyboxApplets are the commands the upgrade's backup script
// (installer/render, backupScripts) and a platform backup's and restore's
// scripts (installer/dbdump) run in the MongoDB image besides the tools,
// and a few to look around with: Debian's static busybox provides them.
var busyboxApplets = []string{"sh", "cat", "dirname", "ls", "mkdir", "mktemp", "mv", "printf", "rm"}

// busybox installs Debian's busybox-static on this machine when missing
// and returns its path and package version.
func (b *builder) busybox(ctx context.Context) (string, string, error) {
	if err := b.aptInstall(ctx, "busybox-static"); err != nil {
		return "", "", err
	}
	out, err := output(ctx, "", nil, "dpkg-query", "-W", "-f", "${Version}", "busybox-static")
	if err != nil {
		return "", "", fmt.Errorf("busybox-static's version: %w", err)
	}
	return "/bin/busybox", strings.TrimSpace(string(out)), nil
}

func (b *builder) mongoStamp(ctx context.Context) (string, error) {
	gs, err := b.goStamp(ctx, mongoEntrypoint, mongoShell, mongoDump, mongoRestore)
	if err != nil {
		return "", err
	}
	_, bbVersion, err := b.busybox(ctx)
	if err != nil {
		return "", err
	}
	return hashOf(layoutVersion, "mongodb", testservers.FerretDBVersion, gs, "busybox-static "+bbVersion, strings.Join(busyboxApplets, " ")), nil
}

// mongoImage: FerretDB (built once by e2e/testservers into
// $ONPREM_CACHE/ferretdb) behind an entrypoint that speaks the official
// mongo image's contract, as the mongodb chart's user (999), and a
// mongosh stand-in that runs db-provision's script (cmd/mongosh), a
// mongodump stand-in for the upgrade's backup Job and platform backups
// (cmd/mongodump), a mongorestore stand-in for restores (cmd/mongorestore),
// and
// Debian's static busybox for that Job's shell script.
func (b *builder) mongoImage(ctx context.Context, scratch string) (v1.Image, string, error) {
	ferret, err := testservers.FerretDB(ctx, b.log)
	if err != nil {
		return nil, "", fmt.Errorf("building FerretDB %s: %w", testservers.FerretDBVersion, err)
	}
	entrypoint := filepath.Join(scratch, "docker-entrypoint.sh")
	if err := b.goBuild(ctx, "mongodb-entrypoint", mongoEntrypoint, entrypoint); err != nil {
		return nil, "", err
	}
	shell := filepath.Join(scratch, "mongosh")
	if err := b.goBuild(ctx, "mongosh", mongoShell, shell); err != nil {
		return nil, "", err
	}
	dumper := filepath.Join(scratch, "mongodump")
	if err := b.goBuild(ctx, "mongodump", mongoDump, dumper); err != nil {
		return nil, "", err
	}
	restorer := filepath.Join(scratch, "mongorestore")
	if err := b.goBuild(ctx, "mongorestore", mongoRestore, restorer); err != nil {
		return nil, "", err
	}
	bb, bbVersion, err := b.busybox(ctx)
	if err != nil {
		return nil, "", err
	}
	files := []file{{path: "/bin/busybox", src: bb, mode: 0o755}}
	for _, a := range busyboxApplets {
		files = append(files, file{path: "/bin/" + a, link: "busybox"})
	}
	layer, err := filesLayer(append(files, []file{
		{path: "/usr/local/bin/mongosh", src: shell, mode: 0o755},
		{path: "/usr/local/bin/mongodump", src: dumper, mode: 0o755},
		{path: "/usr/local/bin/mongorestore", src: restorer, mode: 0o755},
		{path: "/usr/local/bin/ferretdb", src: ferret, mode: 0o755},
		{path: "/usr/local/bin/docker-entrypoint.sh", src: entrypoint, mode: 0o755},
		{path: "/etc/passwd", data: passwd("mongodb", ServiceUID, "/data/db"), mode: 0o644},
		{path: "/etc/group", data: group("mongodb", ServiceUID), mode: 0o644},
		{path: "/data/db", dir: true, mode: 0o755, uid: ServiceUID, gid: ServiceUID},
		{path: "/data/configdb", dir: true, mode: 0o755, uid: ServiceUID, gid: ServiceUID},
		{path: "/tmp", dir: true, mode: 0o1777},
	}...))
	if err != nil {
		return nil, "", fmt.Errorf("mongodb: %w", err)
	}
	img, err := assemble([]v1.Layer{layer}, v1.Config{
		Entrypoint:   []string{"docker-entrypoint.sh"},
		Cmd:          []string{"mongod"},
		Env:          []string{"PATH=" + basePath},
		User:         fmt.Sprintf("%d:%d", ServiceUID, ServiceUID),
		WorkingDir:   "/",
		ExposedPorts: ports(27017),
	})
	return img, "FerretDB " + testservers.FerretDBVersion + " (SQLite), busybox-static " + bbVersion, err
}
