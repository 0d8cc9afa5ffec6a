#!/usr/bin/env bash
# Boots the cached Debian kernel under qemu with the given initramfs and prints the console.
# TCG only (KVM does not work here); `-cpu max` gives the guest the timer features TCG can
# emulate. `-icount shift=0,sleep=off`: the guest's clock counts its instructions (1 ns each)
# and jumps to the next timer when the guest idles, so a guest timer fires when it is due in
# the guest's own time. Without it a guest timer fired 0.2-0.5 ms late on a shared host
# (nanosleep of 2.5 ms: median 2.75-2.83 ms; of 6.25 ms: 6.66-6.76 ms), every netem hop added
# that on top of its delay, and the raw UDP probes saw 17-23 % more than the configured delay;
# with it the same nanosleeps take 2.555 and 6.306 ms (the 50 us timer slack of a task), every
# time. Figures inside the guest are then in guest time: what the test checks is where netem
# sits and what it adds, not how fast this host is. No network device: nothing leaves the VM.
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
  -accel tcg -cpu max -icount shift=0,sleep=off -m 512 -smp 1 -nographic -nic none -no-reboot \
  -kernel "$cache/kernel/vmlinuz" -initrd "$initrd" \
  -append "console=ttyS0 panic=-1 quiet"
