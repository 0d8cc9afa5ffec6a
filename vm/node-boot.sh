#!/usr/bin/env bash
# Boots one real node (the image of vm/node-image.sh) under qemu, TCG, until qemu exits.
#
# Its one NIC is a tap device on BRIDGE inside the network namespace NETNS, which the caller
# made (a test's testbed): the node reaches that bridge and nothing else, and this machine's
# root namespace never sees its traffic. Its disk is a copy-on-write overlay in DIR over the
# cached image, kept across boots of the same DIR (a reboot keeps what was installed) unless
# the image was rebuilt since; delete DIR for a fresh node. The serial console goes to DIR/console.log.
#
# Usage: vm/node-boot.sh NAME ADDRESS/LEN NETNS BRIDGE TAP DIR [MEMORY_MB]
#   NAME     the node's hostname;  ADDRESS/LEN  its eth0 address (no default route)
#   TAP      the tap device to make in NETNS (at most 15 characters)
# Cache: as vm/fetch.sh (qemu) and vm/node-image.sh (image, kernel). Needs qemu-img (qemu-utils).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CONTINUUM_VM_CACHE:-$repo/target/vm-cache}
name=$1 address=$2 netns=$3 bridge=$4 tap=$5 dir=$6 memory=${7:-1024}
root="$cache/root"
image="$cache/node"

mkdir -p "$dir"
# An overlay made over an earlier build of the image would read the new one as garbage.
if [ ! -f "$dir/disk.qcow2" ] || ! cmp -s "$image/script.sha256" "$dir/image.sha256"; then
  rm -f "$dir/disk.qcow2"
  qemu-img create -q -f qcow2 -F raw -b "$image/disk.raw" "$dir/disk.qcow2"
  cp "$image/script.sha256" "$dir/image.sha256"
fi
ip -n "$netns" tuntap add dev "$tap" mode tap
ip -n "$netns" link set "$tap" master "$bridge" up
# A MAC of its own per address (locally administered), so the bridge tells nodes apart.
mac=$(printf '52:54:%02x:%02x:%02x:%02x' $(echo "${address%/*}" | tr . ' '))

export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
export QEMU_MODULE_DIR="$root/usr/lib/x86_64-linux-gnu/qemu"
exec ip netns exec "$netns" "$root/usr/bin/qemu-system-x86_64" \
  -name "$name" \
  -L "$root/usr/share/qemu" -L "$root/usr/share/seabios" \
  -accel tcg -cpu max -m "$memory" -smp 1 \
  -display none -monitor none -serial "file:$dir/console.log" \
  -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0 net.ifnames=0 systemd.hostname=$name continuum.net=eth0,$address" \
  -drive "file=$dir/disk.qcow2,if=virtio,format=qcow2" \
  -netdev "tap,id=eth0,ifname=$tap,script=no,downscript=no" \
  -device "virtio-net-pci,netdev=eth0,mac=$mac"
