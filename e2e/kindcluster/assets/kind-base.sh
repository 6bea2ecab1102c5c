#!/bin/bash
# kind-base.sh ROOT FILES
#
# Turns the Debian root filesystem extracted in ROOT into the layout of
# kind's base image, as kind's images/base/Dockerfile does it: FILES is
# images/base/files of the kind module. Debian's containerd, runc and CNI
# plugins are put where kind looks for them (containerd is replaced by
# containerd 2 in the node image). Written by onprem.dev/onprem/e2e/kindcluster.
set -euo pipefail
R=$1 F=$2

install -m 0755 "$F"/usr/local/bin/* "$R/usr/local/bin/"
mkdir -p "$R/kind/bin" "$R/LICENSES"
cp -r "$F/kind/." "$R/kind/"
find "$R/kind" -type f -exec chmod 0644 {} +
chmod 0755 "$R/kind" "$R/kind/bin" "$R"/kind/bin/*
install -m 0644 "$F"/LICENSES/* "$R/LICENSES/"
mkdir -p "$R/etc/containerd" "$R/etc/default" "$R/etc/sysctl.d" "$R/etc/systemd/system/kubelet.service.d"
install -m 0644 "$F/etc/crictl.yaml" "$R/etc/"
install -m 0644 "$F"/etc/containerd/* "$R/etc/containerd/"
install -m 0644 "$F"/etc/default/* "$R/etc/default/"
install -m 0644 "$F"/etc/sysctl.d/* "$R/etc/sysctl.d/"
install -m 0644 "$F"/etc/systemd/system/*.service "$F"/etc/systemd/system/*.slice "$R/etc/systemd/system/"
install -m 0644 "$F"/etc/systemd/system/kubelet.service.d/* "$R/etc/systemd/system/kubelet.service.d/"

chroot "$R" /bin/bash -euo pipefail -c '
find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
	/lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
	/lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
grep -q "^ReadKMsg=no" /etc/systemd/journald.conf || echo "ReadKMsg=no" >>/etc/systemd/journald.conf
[ -e /sbin/init ] || ln -s /usr/lib/systemd/systemd /sbin/init
for b in containerd containerd-shim-runc-v2 ctr; do
	[ -e /usr/local/bin/$b ] || ln -s /usr/bin/$b /usr/local/bin/$b
done
mkdir -p /opt/cni
[ -e /opt/cni/bin ] || ln -s /usr/lib/cni /opt/cni/bin
systemctl enable kubelet.service containerd.service undo-mount-hacks.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests
ctr oci spec |
	jq ".hooks.createContainer[.hooks.createContainer | length] |= . + {\"path\": \"/kind/bin/mount-product-files.sh\"}" |
	jq "del(.process.rlimits)" >/etc/containerd/cri-base.json
'
: >"$R/etc/resolv.conf"
rm -f "$R/etc/machine-id"
: >"$R/etc/machine-id"
