#!/usr/bin/env bash
# Builds (once, then cached) the disk image of a real node: Debian 12 with systemd as PID 1,
# openssh-server taking only a key made for it, nebula, mosquitto, iproute2 and ping, and Debian's
# own kernel and initramfs to boot it with. Nothing in it reaches out: no DHCP, no default
# route; its one address comes from the kernel command line (`continuum.net=eth0,ADDR/LEN`,
# see vm/node-boot.sh), so one image serves every node. Host keys are made at each node's
# first boot, so every node has its own.
#
# Built by mmdebstrap (Debian's package `mmdebstrap`, which CI installs) from Debian's
# packages, as root: the image's files keep their owners. Idempotent: a complete cache built by this same script is
# left as it is; a change to the script rebuilds it.
#
# Usage: vm/node-image.sh
# Cache: $CONTINUUM_VM_CACHE/node (default <repo>/target/vm-cache/node), afterwards holding
#   disk.raw        the root filesystem (ext4, sparse), never written by a boot (overlays are)
#   vmlinuz, initrd.img   the image's kernel and initramfs
#   id_ed25519(.pub)      the key root on every node accepts
#   ready           the packages and versions inside
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CONTINUUM_VM_CACHE:-$repo/target/vm-cache}/node
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

say() { echo "node-image: $*"; }
script_sum=$(sha256sum "$0" | cut -d' ' -f1)

complete() {
  [ -f "$cache/ready" ] && [ -f "$cache/disk.raw" ] && [ -f "$cache/vmlinuz" ] &&
    [ -f "$cache/initrd.img" ] && [ -f "$cache/id_ed25519" ] &&
    [ "$(cat "$cache/script.sha256" 2>/dev/null)" = "$script_sum" ]
}

if complete; then
  say "image complete in $cache ($(wc -l <"$cache/ready") packages)"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  say "needs root (the image's files keep their owners)" >&2
  exit 1
fi
if ! command -v mmdebstrap >/dev/null; then
  say "needs mmdebstrap (apt-get install mmdebstrap)" >&2
  exit 1
fi
# What a build killed midway left (its trap does not run on SIGKILL): mounts first.
for stale in "$cache"/root.*; do
  [ -d "$stale" ] || continue
  findmnt -rn -o TARGET | grep -F "$stale/" | sort -r | while read -r mount; do
    umount -l "$mount"
  done
  rm -rf --one-file-system "$stale"
done

started=$(date +%s)
rm -f "$cache/ready" "$cache/script.sha256"
root=$(mktemp -d "$cache/root.XXXXXX")
trap 'rm -rf "$root" "$cache/disk.raw.part"' EXIT
rm -f "$cache/id_ed25519" "$cache/id_ed25519.pub"
ssh-keygen -q -t ed25519 -N '' -C continuum-test-node -f "$cache/id_ed25519"

packages=systemd-sysv,udev,dbus,openssh-server,iproute2,iputils-ping,nebula,mosquitto,linux-image-amd64,kmod,procps
say "mmdebstrap bookworm ($packages)"
# A mirror's hiccup (seen here: apt-get update failing once) is tried again.
for attempt in 1 2 3; do
  if mmdebstrap --variant=minbase --include="$packages" bookworm "$root"; then
    break
  fi
  [ "$attempt" = 3 ] && { say "mmdebstrap failed 3 times" >&2; exit 1; }
  say "mmdebstrap failed (attempt $attempt), again in 10 s"
  rm -rf "$root" && mkdir "$root"
  sleep 10
done

# The node's address from the kernel command line, before sshd and the network targets.
install -D -m 0755 /dev/stdin "$root/usr/lib/testnode/net" <<'EOF'
#!/bin/sh
# continuum.net=IFACE,ADDR/LEN (repeatable) on the kernel command line: address and up.
set -e
ip link set lo up
for word in $(cat /proc/cmdline); do
  case "$word" in
    continuum.net=*)
      spec=${word#continuum.net=}
      iface=${spec%%,*}
      # The NIC's driver may come up after this unit starts: wait for it (30 s at most).
      tries=0
      while [ ! -e "/sys/class/net/$iface" ] && [ "$tries" -lt 300 ]; do
        sleep 0.1
        tries=$((tries + 1))
      done
      ip addr add "${spec#*,}" dev "$iface"
      ip link set "$iface" up
      ;;
  esac
done
EOF
cat >"$root/etc/systemd/system/testnode-net.service" <<'EOF'
[Unit]
Description=The test node's addresses from the kernel command line
DefaultDependencies=no
After=systemd-udevd.service systemd-udev-settle.service
Wants=network.target
Before=network.target network-online.target ssh.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/lib/testnode/net

[Install]
WantedBy=multi-user.target
EOF
# Host keys of its own for every node, made at its first boot.
rm -f "$root"/etc/ssh/ssh_host_*
cat >"$root/etc/systemd/system/testnode-host-keys.service" <<'EOF'
[Unit]
Description=SSH host keys of this node, made at its first boot
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStart=/usr/bin/ssh-keygen -A

[Install]
WantedBy=multi-user.target ssh.service
EOF
chroot "$root" systemctl enable --quiet testnode-net.service testnode-host-keys.service
# Only the agent starts brokers.
chroot "$root" systemctl disable --quiet mosquitto.service
install -d -m 0700 "$root/root/.ssh"
install -m 0600 "$cache/id_ed25519.pub" "$root/root/.ssh/authorized_keys"
echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' >"$root/etc/fstab"
echo testnode >"$root/etc/hostname"
# A persistent journal: what an agent logged before a reboot is read after it.
chroot "$root" install -d -m 2755 -g systemd-journal /var/log/journal
chroot "$root" dpkg-query -W -f='${Package} ${Version}\n' >"$cache/ready.part"
cp "$root"/boot/vmlinuz-* "$cache/vmlinuz"
cp "$root"/boot/initrd.img-* "$cache/initrd.img"

say "making the ext4 image"
rm -f "$cache/disk.raw.part"
mke2fs -q -t ext4 -L testnode -d "$root" "$cache/disk.raw.part" 2G
mv "$cache/disk.raw.part" "$cache/disk.raw"
mv "$cache/ready.part" "$cache/ready"
echo "$script_sum" >"$cache/script.sha256"
say "built in $(($(date +%s) - started)) s: $(du -h --apparent-size "$cache/disk.raw" | cut -f1) apparent, $(du -h "$cache/disk.raw" | cut -f1) used, $(wc -l <"$cache/ready") packages"
