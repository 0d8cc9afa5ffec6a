#!/usr/bin/env bash
# Builds continuum-agent for every architecture an inventory names (default
# examples/inventory.toml), each where bootstrap looks for it:
#   target/<triple>/release/continuum-agent   (this machine's own: target/release/)
# For an architecture this machine cannot build for, it says exactly what to install and
# builds nothing for it. --check: only say what is ready and what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

check_only=false
inventory=examples/inventory.toml
for arg in "$@"; do
  case "$arg" in
    --check) check_only=true ;;
    -h|--help) sed -n '2,6p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) inventory=$arg ;;
  esac
done
[ -r "$inventory" ] || { echo "build-agents: cannot read $inventory" >&2; exit 2; }

# The nodes' architectures (`arch = "..."` lines), each once.
mapfile -t arches < <(sed -n 's/^[[:space:]]*arch[[:space:]]*=[[:space:]]*"\([^"]*\)".*/\1/p' "$inventory" | sort -u)
[ "${#arches[@]}" -gt 0 ] || { echo "build-agents: $inventory names no node architecture (arch = \"...\")" >&2; exit 2; }

host_arch=$(uname -m)
missing=0
for arch in "${arches[@]}"; do
  case "$arch" in
    x86_64)  triple=x86_64-unknown-linux-gnu;      linker=x86_64-linux-gnu-gcc;    package=gcc-x86-64-linux-gnu ;;
    aarch64) triple=aarch64-unknown-linux-gnu;     linker=aarch64-linux-gnu-gcc;   package=gcc-aarch64-linux-gnu ;;
    armv7)   triple=armv7-unknown-linux-gnueabihf; linker=arm-linux-gnueabihf-gcc; package=gcc-arm-linux-gnueabihf ;;
    *) echo "$arch: unknown architecture (bootstrap knows x86_64, aarch64, armv7)"; missing=1; continue ;;
  esac
  if [ "$arch" = "$host_arch" ]; then
    out=target/release/continuum-agent
    flags=()
  else
    out=target/$triple/release/continuum-agent
    flags=(--target "$triple")
    needs=()
    libdir=$(rustc --print target-libdir --target "$triple" 2>/dev/null || true)
    if ! ls "$libdir"/libstd-* >/dev/null 2>&1; then
      needs+=("the Rust standard library for $triple: rustup target add $triple")
    fi
    if ! command -v "$linker" >/dev/null 2>&1; then
      needs+=("the cross linker $linker: apt-get install $package (Debian/Ubuntu)")
    fi
    if [ "${#needs[@]}" -gt 0 ]; then
      echo "$arch: cannot build here; install"
      printf '  - %s\n' "${needs[@]}"
      echo "  then run this script again (or build elsewhere and set [agent] binaries = { $arch = \"PATH\" } in the inventory)"
      missing=1
      continue
    fi
  fi
  if $check_only; then
    echo "$arch: ready: cargo build --release -p agent --bin continuum-agent${flags[*]:+ ${flags[*]}}"
    continue
  fi
  cargo build --release -p agent --bin continuum-agent "${flags[@]}"
  echo "$arch: $out ($(du -h "$out" | cut -f1))"
done
exit "$missing"
