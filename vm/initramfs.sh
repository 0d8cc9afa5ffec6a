#!/usr/bin/env bash
# Builds the initramfs of the netem test VM: busybox, the kernel's sch_netem and veth modules
# from the cache that vm/fetch.sh fills, vm/init as /init, a program as /payload, any further
# programs under their own names in / (the mqttv5 broker as /mqttv5), and the C libraries
# they link, copied from this machine to the same paths (the VM runs this machine's x86_64
# userland on Debian's kernel).
#
# Usage: vm/initramfs.sh PROGRAM OUTPUT [PROGRAM...]   (cache: as vm/fetch.sh)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CONTINUUM_VM_CACHE:-$repo/target/vm-cache}
payload=$1
output=$2
shift 2
extras=("$@")

for program in "$payload" "${extras[@]}"; do
  if ! file_type=$(od -An -c -N4 "$program" 2>/dev/null) || [[ $file_type != *E*L*F* ]]; then
    echo "initramfs: $program is not an ELF program" >&2
    exit 1
  fi
done

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging"/{bin,lib,proc,sys,dev}
cp "$cache/root/bin/busybox" "$staging/bin/busybox"
cp "$cache/kernel/sch_netem.ko" "$cache/kernel/veth.ko" "$staging/lib/"
install -m 0755 "$repo/vm/init" "$staging/init"
install -m 0755 "$payload" "$staging/payload"
for program in "${extras[@]}"; do
  install -m 0755 "$program" "$staging/$(basename "$program")"
done
# ldd prints "name => /path (address)" for a library and "/path (address)" for the loader; a
# static program has none. A library ldd cannot find would fail in the VM: refused here.
linked=""
for program in "$payload" "${extras[@]}"; do
  if ! listed=$(ldd "$program" 2>&1); then
    [[ $listed == *"not a dynamic executable"* ]] && continue
    echo "initramfs: ldd $program: $listed" >&2
    exit 1
  fi
  if [[ $listed == *"not found"* ]]; then
    echo "initramfs: $program needs a library this machine lacks:" >&2
    echo "$listed" >&2
    exit 1
  fi
  linked+="$listed"$'\n'
done
libraries=$(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$linked" | sort -u)
for library in $libraries; do
  mkdir -p "$staging$(dirname "$library")"
  cp -L "$library" "$staging$library"
done
mkdir -p "$(dirname "$output")"
# Uncompressed: the kernel unpacks it faster than it would inflate it under TCG.
(cd "$staging" && find . | "$cache/root/bin/busybox" cpio -o -H newc 2>/dev/null) >"$output"
echo "initramfs: $output ($(du -h "$output" | cut -f1))"
