#!/bin/bash
# rootfs.sh WORK MIRROR SUITE OUT.tar INCLUDE EXTRA
#
# Builds the Debian root filesystem of the kind node image with
# debootstrap (minbase plus INCLUDE, comma-separated), installs EXTRA
# (space-separated) with apt inside it, and writes it as a tarball to
# OUT.tar. WORK is a scratch folder that is removed afterwards.
# Written by onprem.dev/onprem/e2e/kindcluster.
set -euo pipefail
work=$1 mirror=$2 suite=$3 out=$4 include=$5 extra=$6
root="$work/rootfs"

cleanup() {
	if mountpoint -q "$root/proc"; then umount -l "$root/proc" || true; fi
}
trap cleanup EXIT

rm -rf --one-file-system "$root"
mkdir -p "$root"
echo "== debootstrap $suite from $mirror"
debootstrap --variant=minbase --include="$include" "$suite" "$root" "$mirror"

echo "== apt-get install $extra"
mount -t proc proc "$root/proc"
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
# shellcheck disable=SC2086
chroot "$root" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $extra
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root/usr/sbin/policy-rc.d"
umount -l "$root/proc"

echo "== tar"
tar --numeric-owner -C "$root" -cf "$out" .
rm -rf --one-file-system "$root"
