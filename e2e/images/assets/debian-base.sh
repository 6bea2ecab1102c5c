#!/bin/bash
# debian-base.sh WORK MIRROR SUITE OUT.tar
#
# A minimal Debian root filesystem (debootstrap --variant=minbase), written
# as a tarball to OUT.tar, without downloaded packages or apt lists. WORK is
# a scratch folder, removed afterwards.
# Written by onprem.dev/onprem/e2e/images.
set -euo pipefail
work=$1 mirror=$2 suite=$3 out=$4
root="$work/root"

cleanup() {
	for m in dev/pts dev proc sys; do
		if mountpoint -q "$root/$m" 2>/dev/null; then umount -l "$root/$m" || true; fi
	done
}
trap cleanup EXIT

rm -rf --one-file-system "$root"
mkdir -p "$root"
echo "== debootstrap --variant=minbase $suite $mirror"
debootstrap --variant=minbase "$suite" "$root" "$mirror"
cleanup
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
echo "== tar"
tar --numeric-owner -C "$root" -cf "$out" .
rm -rf --one-file-system "$root"
