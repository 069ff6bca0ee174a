#!/usr/bin/env bash
# Debian packages `swerollout cluster up` and the image builds need, installed when
# root: containerd + runc + the CNI plugins run the kubelet's containers, iptables
# and conntrack serve kube-proxy, mmdebstrap makes base root filesystems from
# Debian's packages and buildah builds images from them (no Docker, no registry).
# Unlike install-system-deps.sh this fails when it cannot install: the real node
# does not work without them.
set -euo pipefail
pkgs=(containerd runc containernetworking-plugins iptables conntrack mmdebstrap buildah)
need=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "error: ${need[*]} missing; install them as root with apt-get (Debian 12)" >&2
  exit 1
fi
echo "installing ${need[*]} with apt-get" >&2
apt-get update -qq
# --no-install-recommends: buildah recommends fuse-overlayfs, slirp4netns and more
# that the vfs driver and host networking used here do not need.
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
