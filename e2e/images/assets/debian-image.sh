#!/bin/bash
# debian-image.sh BASE.tar WORK OUT.tar VERSIONS
#
# Unpacks the base root filesystem BASE.tar in WORK, creates the service's
# user and group with a fixed number before any package can pick one,
# installs PACKAGES with apt in a chroot, runs POST there, trims what a
# container never reads (documentation, manuals, apt lists and caches,
# logs), and writes the result to OUT.tar (no /dev, /proc or /sys content:
# the container runtime provides them) and the installed versions of
# PACKAGES to VERSIONS. WORK is removed afterwards.
#
# Environment: SOURCES (the apt sources.list), PACKAGES (space-separated),
# USER_NAME, USER_ID, USER_HOME, POST (shell commands, may be empty).
# Written by onprem.dev/onprem/e2e/images.
set -euo pipefail
base=$1 work=$2 out=$3 versions=$4
root="$work/root"

cleanup() {
	for m in dev/pts proc; do
		if mountpoint -q "$root/$m" 2>/dev/null; then umount -l "$root/$m" || true; fi
	done
}
trap cleanup EXIT

rm -rf --one-file-system "$root"
mkdir -p "$root"
tar --numeric-owner -xpf "$base" -C "$root"
mount -t proc proc "$root/proc"
cp /etc/resolv.conf "$root/etc/resolv.conf"
printf '%s\n' "$SOURCES" >"$root/etc/apt/sources.list"
rm -f "$root"/etc/apt/sources.list.d/*
# No service may start inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"

echo "== user $USER_NAME ($USER_ID), home $USER_HOME"
chroot "$root" groupadd --system --gid "$USER_ID" "$USER_NAME"
chroot "$root" useradd --system --uid "$USER_ID" --gid "$USER_ID" --home-dir "$USER_HOME" \
	--no-create-home --shell /usr/sbin/nologin --comment "$USER_NAME" "$USER_NAME"

echo "== apt-get install $PACKAGES"
export DEBIAN_FRONTEND=noninteractive
chroot "$root" apt-get update
# shellcheck disable=SC2086
chroot "$root" apt-get install -y --no-install-recommends $PACKAGES
if [ -n "${POST:-}" ]; then
	echo "== post-install"
	chroot "$root" sh -euxc "$POST"
fi
# shellcheck disable=SC2086
chroot "$root" dpkg-query -W $PACKAGES >"$versions"
chroot "$root" apt-get clean

echo "== trim"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
	"$root"/var/lib/dpkg/*-old "$root"/usr/share/doc/* "$root"/usr/share/man/* \
	"$root"/usr/share/info/* "$root"/usr/share/lintian "$root"/usr/share/locale/* \
	"$root/usr/sbin/policy-rc.d" "$root/etc/resolv.conf" "$root"/tmp/* "$root"/root/.bash_history
find "$root/var/log" -type f -delete
cleanup

echo "== tar"
tar --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -C "$root" -cf "$out" .
rm -rf --one-file-system "$root"
