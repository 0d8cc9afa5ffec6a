#!/usr/bin/env bash
# Fetches what the netem VM test boots: qemu for TCG, a Debian kernel (which has sch_netem and
# veth as modules) and a static busybox, into a private cache folder.
#
# Debian packages are fetched with `apt-get download` and unpacked with `dpkg-deb`: nothing is
# installed on this machine, and linux-image-* never is. Idempotent: a complete cache is left
# as it is. Runs `apt-get update` only when the package lists are missing or stale.
#
# Usage: vm/fetch.sh
# Cache: $CONTINUUM_VM_CACHE, default <repo>/target/vm-cache. Layout afterwards:
#   root/      qemu, its libraries and firmware, busybox (unpacked packages)
#   kernel/    vmlinuz, sch_netem.ko, veth.ko
#   ready      the packages and versions the cache holds
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CONTINUUM_VM_CACHE:-$repo/target/vm-cache}
mkdir -p "$cache"
# Concurrent test runs share one cache.
exec 9>"$cache/.lock"
flock 9

say() { echo "fetch: $*"; }

complete() {
  [ -f "$cache/ready" ] &&
    [ -x "$cache/root/usr/bin/qemu-system-x86_64" ] &&
    [ -f "$cache/root/usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so" ] &&
    [ -x "$cache/root/bin/busybox" ] &&
    [ -f "$cache/kernel/vmlinuz" ] && [ -f "$cache/kernel/sch_netem.ko" ] && [ -f "$cache/kernel/veth.ko" ]
}

if complete; then
  say "cache complete in $cache ($(tr '\n' ' ' <"$cache/ready"))"
  exit 0
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
depends() {
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$@" 2>/dev/null | awk '$1 == "Depends:" && $2 !~ /^</ { print $2 }' | sort -u
}

if ! apt-cache show qemu-system-x86 linux-image-amd64 busybox-static >/dev/null 2>&1; then
  say "package lists missing: apt-get update"
  apt-get update -qq
fi

# The kernel metapackage names the real image package; only that one is downloaded.
kernel_pkg=$(depends linux-image-amd64 | grep '^linux-image-' | head -1)
[ -n "$kernel_pkg" ] || { say "cannot resolve linux-image-amd64"; exit 1; }

# qemu's dependencies this machine lacks, and theirs, except those of qemu-system-common,
# which only serve display/audio/USB modules a headless TCG guest never loads.
level1=$(for p in $(depends qemu-system-x86); do installed "$p" || echo "$p"; done)
level2=$(for p in $(depends $(grep -vx 'qemu-system-common' <<<"$level1")); do installed "$p" || echo "$p"; done)
packages=$(printf '%s\n' qemu-system-x86 busybox-static "$kernel_pkg" $level1 $level2 | sort -u)

mkdir -p "$cache/debs"
download() {
  # apt warns that root downloads unsandboxed; expected here.
  (cd "$cache/debs" && apt-get download -q $packages 2>&1 | { grep -v '^W: Download is performed unsandboxed' || true; })
}
say "downloading: $(tr '\n' ' ' <<<"$packages")"
if ! download; then
  # Lists may name versions the mirror has since replaced.
  say "download failed: apt-get update, then retrying"
  apt-get update -qq
  download
fi

rm -rf "$cache/root" "$cache/kernel" "$cache/ready"
mkdir -p "$cache/root" "$cache/kernel"
for deb in "$cache"/debs/*.deb; do
  case $(basename "$deb") in
    linux-image-*) ;;
    *) dpkg-deb -x "$deb" "$cache/root" ;;
  esac
done
# From the kernel package, only the kernel and the two modules (the rest is ~400 MB).
kdeb=$(ls "$cache"/debs/"$kernel_pkg"_*.deb | tail -1)
kver=${kernel_pkg#linux-image-}
dpkg-deb --fsys-tarfile "$kdeb" | tar -x -C "$cache/kernel" \
  "./boot/vmlinuz-$kver" \
  "./lib/modules/$kver/kernel/net/sched/sch_netem.ko" \
  "./lib/modules/$kver/kernel/drivers/net/veth.ko"
mv "$cache/kernel/boot/vmlinuz-$kver" "$cache/kernel/vmlinuz"
mv "$cache/kernel/lib/modules/$kver/kernel/net/sched/sch_netem.ko" "$cache/kernel/"
mv "$cache/kernel/lib/modules/$kver/kernel/drivers/net/veth.ko" "$cache/kernel/"
rm -rf "$cache/kernel/boot" "$cache/kernel/lib"

libs="$cache/root/usr/lib/x86_64-linux-gnu:$cache/root/lib/x86_64-linux-gnu"
missing=$(LD_LIBRARY_PATH=$libs ldd "$cache/root/usr/bin/qemu-system-x86_64" \
  "$cache/root/usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so" | awk '/not found/ { print $1 }' | sort -u)
if [ -n "$missing" ]; then
  say "qemu still lacks: $(tr '\n' ' ' <<<"$missing")"
  exit 1
fi

for deb in "$cache"/debs/*.deb; do dpkg-deb -f "$deb" Package Version | paste -sd= ; done |
  sed 's/^Package: //; s/=Version: /=/' >"$cache/ready"
rm -rf "$cache/debs"
say "cache ready in $cache (kernel $kver)"
