#!/usr/bin/env bash
# Installs with apt what a fresh Debian 12 machine lacks to build and test
# fusejit. Idempotent and quiet when everything is there.
set -euo pipefail

pkgs=(gcc make cmake pkg-config python3 llvm-19-dev llvm-19-tools check libzstd-dev)
# The golden-data generator and the PyTorch bridge tests use Debian's torch
# and numpy under /usr/bin/python3 (FJ_NO_TORCH=1 skips them).
if [ "${FJ_NO_TORCH:-0}" != 1 ]; then
  pkgs+=(python3-numpy python3-pytest python3-torch)
fi
# The Halide peer of bench/peers/run.py (benchmark only: two packages, ~28 MB,
# plus libllvm14 where it is missing; FJ_NO_HALIDE=1 skips it).
if [ "${FJ_NO_HALIDE:-0}" != 1 ]; then
  pkgs+=(python3-halide)
fi

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "install-deps: installing ${missing[*]}" >&2
SUDO=
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
