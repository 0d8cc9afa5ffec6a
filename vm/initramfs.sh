#!/usr/bin/env bash
# Builds the initramfs of the netem test VM: busybox, the kernel's sch_netem and veth modules
# from the cache that vm/fetch.sh fills, vm/init as /init, and a static program as /payload.
#
# Usage: vm/initramfs.sh STATIC_PROGRAM OUTPUT   (cache: as vm/fetch.sh)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CONTINUUM_VM_CACHE:-$repo/target/vm-cache}
payload=$1
output=$2

if ! file_type=$(od -An -c -N4 "$payload" 2>/dev/null) || [[ $file_type != *E*L*F* ]]; then
  echo "initramfs: $payload is not an ELF program" >&2
  exit 1
fi

staging=$(mktemp -d)
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging"/{bin,lib,proc,sys,dev}
cp "$cache/root/bin/busybox" "$staging/bin/busybox"
cp "$cache/kernel/sch_netem.ko" "$cache/kernel/veth.ko" "$staging/lib/"
install -m 0755 "$repo/vm/init" "$staging/init"
install -m 0755 "$payload" "$staging/payload"
# Uncompressed: the kernel unpacks it faster than it would inflate it under TCG.
(cd "$staging" && find . | "$cache/root/bin/busybox" cpio -o -H newc 2>/dev/null) >"$output"
echo "initramfs: $output ($(du -h "$output" | cut -f1))"
