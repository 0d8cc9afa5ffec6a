#!/usr/bin/env bash
# Boots the cached Debian kernel under qemu with the given initramfs and prints the console.
# TCG only (KVM does not work here); `-cpu max` gives the guest the timer features TCG can
# emulate, which trims the timer latency netem adds under emulation (about 0.1 ms per round
# trip). No network device: nothing leaves the VM.
#
# Usage: vm/boot.sh INITRD [TIMEOUT_SECONDS]   (cache: as vm/fetch.sh; default timeout 240 s)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${CONTINUUM_VM_CACHE:-$repo/target/vm-cache}
initrd=$1
timeout_s=${2:-240}
root="$cache/root"

export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu"
export QEMU_MODULE_DIR="$root/usr/lib/x86_64-linux-gnu/qemu"
# -L twice: qemu's own firmware, and seabios' BIOS which qemu-system-data links to.
exec timeout --kill-after=10 "$timeout_s" "$root/usr/bin/qemu-system-x86_64" \
  -L "$root/usr/share/qemu" -L "$root/usr/share/seabios" \
  -accel tcg -cpu max -m 512 -smp 1 -nographic -nic none -no-reboot \
  -kernel "$cache/kernel/vmlinuz" -initrd "$initrd" \
  -append "console=ttyS0 panic=-1 quiet"
