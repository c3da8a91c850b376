#!/usr/bin/env bash
# Runs the images' staging step (deploy/docker/stage.sh) on this build tree:
# the executables must land stripped in PREFIX/bin, and runtime-packages.txt
# must name the packages of their libraries (gRPC, protobuf, Abseil) and
# nothing that the runtime base or the host provides (libc6, GPU drivers).
#   usage: stage_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src_dir=$1
build_dir=$2
command -v dpkg-query >/dev/null || { echo "SKIP: not a dpkg system"; exit 0; }
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
die() { echo "FAIL: $*" >&2; exit 1; }

"$src_dir/deploy/docker/stage.sh" "$build_dir" "$prefix" 2>/dev/null
for exe in conv1d_server conv1d_client; do
  [[ -x $prefix/bin/$exe ]] || die "$exe not staged"
  if readelf -S "$prefix/bin/$exe" | grep -q '\.debug_info'; then die "$exe not stripped"; fi
done
pkgs=$(cat "$prefix/runtime-packages.txt")
echo "runtime packages: $(tr '\n' ' ' <<<"$pkgs")"
for want in 'libgrpc\+\+' 'libprotobuf[0-9]' 'libabsl'; do
  grep -Eq "^$want" <<<"$pkgs" || die "runtime-packages.txt lacks a $want package"
done
for unwanted in libc6 libcuda1 hip-runtime-amd; do
  if grep -qx "$unwanted" <<<"$pkgs"; then die "runtime-packages.txt lists $unwanted"; fi
done
# Every listed package must exist on this system, i.e. names, not paths.
while read -r p; do
  dpkg-query -W "$p" >/dev/null 2>&1 || die "listed package $p is not a package"
done <<<"$pkgs"
echo "PASS: staged $(find "$prefix/bin" -type f | wc -l) executables, $(wc -l <<<"$pkgs") packages"
