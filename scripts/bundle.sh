#!/usr/bin/env bash
# Packs a built conv1d-serve into a relocatable tarball that runs on any
# x86-64 Linux host with glibc and libstdc++ at least as new as the build
# host's (Debian 12, Ubuntu 24.04, ...), without installing packages:
#   OUT_DIR/conv1d-serve-<version>-<arch>.tar.gz
#     bin/conv1d-serve     launcher: conv1d-serve server|client|load [flags]
#     bin/conv1d_server, bin/conv1d_client, bin/conv1d_load (when built)
#     lib/                 every shared library they load, except the C
#                          library, libstdc++/libgcc_s and the GPU driver stack
#     MANIFEST             version, source revision, glibc floor, file list
# usage: scripts/bundle.sh BUILD_DIR OUT_DIR [--version V] [--arch A]
#   --version  default: the project version in the top-level CMakeLists.txt
#   --arch     default: `uname -m`, plus -cuda/-hip when the build has a GPU backend
set -euo pipefail

usage() { sed -n '2,13p' "$0" >&2; exit 2; }
[[ $# -ge 2 ]] || usage
build_dir=$(cd "$1" && pwd)
out_dir=$2
shift 2
version=""
arch=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --version) version=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    *) usage ;;
  esac
done

src_dir=$(cd "$(dirname "$0")/.." && pwd)
if [[ -z $version ]]; then
  version=$(sed -nE 's/^project\(conv1d_serve VERSION ([0-9.]+).*/\1/p' "$src_dir/CMakeLists.txt")
  [[ -n $version ]] || { echo "bundle.sh: no project version found" >&2; exit 1; }
fi
if [[ -z $arch ]]; then
  arch=$(uname -m)
  gpu=$(sed -nE 's/^CONV1D_GPU:STRING=(.*)/\1/p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
  if grep -qE '^CMAKE_CUDA_COMPILER:(FILEPATH|STRING)=.+' "$build_dir/CMakeCache.txt" 2>/dev/null &&
      [[ ${gpu^^} != OFF && ${gpu^^} != HIP ]]; then
    arch+=-cuda
  elif [[ ${gpu^^} == HIP ]]; then
    arch+=-hip
  fi
fi

# Loaded from the host on purpose: the C library and loader (must match the
# kernel-facing host), libstdc++/libgcc_s (a host GPU runtime linked against a
# newer libstdc++ would break on an older bundled copy) and the GPU driver
# stack, which must match the host's kernel driver.
host_re='^(linux-vdso|ld-linux|libnvidia-|(libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libstdc\+\+|libgcc_s|libcuda|libamdhip64|libhsa-runtime64|libhsakmt|libamd_comgr|librocprofiler-register|libdrm|libdrm_amdgpu)\.so)'

find_binary() {
  find "$build_dir" -name CMakeFiles -prune -o -type f -name "$1" -perm -u+x -print | head -n 1
}

name="conv1d-serve-$version-$arch"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
root="$stage/$name"
mkdir -p "$root/bin" "$root/lib"

bins=()
for exe in conv1d_server conv1d_client conv1d_load; do
  path=$(find_binary "$exe")
  if [[ -z $path ]]; then
    if [[ $exe == conv1d_load ]]; then continue; fi
    echo "bundle.sh: $exe not found under $build_dir (build it first)" >&2
    exit 1
  fi
  install -m 0755 "$path" "$root/bin/$exe"
  # Debug info is most of a RelWithDebInfo binary; symbols stay for backtraces.
  if command -v strip >/dev/null; then strip --strip-debug "$root/bin/$exe"; fi
  bins+=("$root/bin/$exe")
done

declare -A seen=()
for bin in "${bins[@]}"; do
  # ldd lists the whole closure, so one pass per binary is enough.
  while read -r lib arrow path _; do
    [[ $arrow == "=>" ]] || continue
    [[ $lib =~ $host_re ]] && continue
    if [[ $path == not ]]; then
      echo "bundle.sh: $(basename "$bin") needs $lib, which ldd cannot find" >&2
      exit 1
    fi
    [[ -n ${seen[$lib]:-} ]] && continue
    seen[$lib]=1
    # Copy the file itself under the soname the loader asks for.
    install -m 0644 "$(readlink -f "$path")" "$root/lib/$lib"
  done < <(ldd "$bin")
done

cat >"$root/bin/conv1d-serve" <<'LAUNCHER'
#!/bin/sh
# conv1d-serve launcher: runs a bundled program against the bundled libraries.
#   conv1d-serve server [--listen=... --backend=...]
#   conv1d-serve client health --target=HOST:PORT
#   conv1d-serve load --target=a,b,c ...
# Works under `env -i` (the shell's default PATH) and through a symlink.
self=$0
if command -v readlink >/dev/null 2>&1; then
  self=$(readlink -f "$0") || self=$0
fi
case $self in
  */*) dir=${self%/*} ;;
  *) echo "conv1d-serve: run it by path (e.g. ./bin/conv1d-serve)" >&2; exit 2 ;;
esac
root=$(cd -P "$dir/.." && pwd -P) || exit 2
case ${1:-} in
  server) exe=conv1d_server ;;
  client) exe=conv1d_client ;;
  load) exe=conv1d_load ;;
  *) echo "usage: $0 server|client|load [flags...]" >&2; exit 2 ;;
esac
shift
if [ ! -x "$root/bin/$exe" ]; then
  echo "conv1d-serve: $exe is not in this bundle" >&2
  exit 2
fi
LD_LIBRARY_PATH=$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
exec "$root/bin/$exe" "$@"
LAUNCHER
chmod 0755 "$root/bin/conv1d-serve"

# The newest glibc symbol version any bundled file needs is the host floor.
glibc_floor=$(for f in "$root"/bin/conv1d_* "$root"/lib/*; do
    [[ -e $f ]] && objdump -T "$f" 2>/dev/null
  done | grep -oE 'GLIBC_[0-9]+\.[0-9]+(\.[0-9]+)?' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
sha=$(git -C "$src_dir" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
{
  echo "name: conv1d-serve"
  echo "version: $version"
  echo "arch: $arch"
  echo "revision: $sha"
  echo "requires-glibc: ${glibc_floor:-unknown}"
  echo "files:"
  (cd "$root" && find bin lib -type f | LC_ALL=C sort | sed 's/^/  - /')
} >"$root/MANIFEST"

mkdir -p "$out_dir"
tarball="$(cd "$out_dir" && pwd)/$name.tar.gz"
tar -C "$stage" --owner=0 --group=0 --numeric-owner -czf "$tarball" "$name"
echo "$tarball"
